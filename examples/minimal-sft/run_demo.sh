#!/usr/bin/env bash
# `make demo`: the whole minimal-sft loop on the embedded local model (see run_demo.py and README.md).
# Arguments go to run_demo.py, e.g. `bash run_demo.sh --style-rows 0` for the unscoped comparison.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-$HERE/../../.venv/bin/python}"
exec "$PY" "$HERE/run_demo.py" "$@"
