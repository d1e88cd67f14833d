#!/usr/bin/env bash
# Bundles the language server into bundled/ (packed into the .vsix), like vscode-python-tools-extension-template:
#   bundled/libs/   pygls, lsprotocol, attrs, cattrs, typing_extensions (requirements-bundled.txt, --no-deps, exact
#                   pins), msgspec for CPython 3.11-3.14 (one compiled module per version, side by side), and a copy
#                   of the machine_lsp package. The extension puts it first on PYTHONPATH (machine.importStrategy
#                   useBundled), so any Python >= 3.11 runs the server, and the jobs it starts, without pip.
#   bundled/dist/   the machine-lsp wheel: "Create Training Environment" installs it with the `train` extra.
# Needs pip and the package registry (or its cache). ~10 s.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
EXT="$(cd "$HERE/.." && pwd)"
ROOT="$(cd "$EXT/../.." && pwd)"
PY="${MACHINE_BUNDLE_PYTHON:-python3}"
MSGSPEC="msgspec==$(sed -n 's/^msgspec==//p' "$ROOT/requirements/constraints.txt")"
OUT="$EXT/bundled"
export PIP_ROOT_USER_ACTION=ignore
PIP=("$PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile --only-binary=:all:)

rm -rf "$OUT"
mkdir -p "$OUT/libs" "$OUT/dist"
"${PIP[@]}" --target "$OUT/libs" -r "$EXT/requirements-bundled.txt"

# msgspec: one wheel per CPython version; the compiled modules' names carry their ABI, so they live side by side.
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) PLATFORM=manylinux_2_17_x86_64 ;;
  Linux-aarch64) PLATFORM=manylinux_2_17_aarch64 ;;
  *) PLATFORM="" ;;
esac
if [ -n "$PLATFORM" ]; then
  tmp="$(mktemp -d)"
  for version in 3.11 3.12 3.13 3.14; do
    "${PIP[@]}" --target "$tmp/$version" --implementation cp --python-version "$version" --platform "$PLATFORM" "$MSGSPEC"
    cp -rn "$tmp/$version/." "$OUT/libs/"
    cp "$tmp/$version"/msgspec/_core.*.so "$OUT/libs/msgspec/"
  done
  rm -rf "$tmp"
else
  "${PIP[@]}" --target "$OUT/libs" "$MSGSPEC"  # this platform: the bundling interpreter's version only
fi

# The server itself: the machine_lsp package (sources and package data, no caches).
"$PY" - "$ROOT/machine_lsp" "$OUT/libs/machine_lsp" <<'PYEOF'
import shutil, sys
shutil.copytree(sys.argv[1], sys.argv[2], ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
PYEOF
# The wheel the training environment installs (with its `train` extra).
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$OUT/dist" "$ROOT" >/dev/null
rm -rf "$ROOT/build"  # setuptools' scratch directory
find "$OUT" -name '__pycache__' -prune -exec rm -rf {} +
echo "[bundle-server] $(du -sh "$OUT" | cut -f1) in $OUT: $(ls "$OUT/libs" | grep -v dist-info | tr '\n' ' ')" >&2
