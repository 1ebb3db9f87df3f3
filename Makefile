# One command to set up a fresh machine and start the app (`make run`), one to set up and run every test
# (`make test`). Both create .venv, install torch with pip first (the CPU wheel; an unpinned torch pulls a
# multi-GB CUDA build), then the project. Re-running skips what is already installed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=  # e.g. --index-url https://download.pytorch.org/whl/cpu for the CPU build on a plain machine
PORT ?= 8501

.PHONY: run test test-fast setup setup-test browser clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)" $(TORCH_PIP_ARGS)
	$(PIP) install --quiet -e .
	touch $@

# The engines whose clip settings divclip reads from their own code (tests/engines): OpenRLHF, AReaL and SkyRL pull
# GPU-only dependencies (vllm, deepspeed, flash-attn), so they come without them (--no-deps); divclip reads their
# argparse parsers and config dataclasses, and runs SkyRL's policy-loss functions, which need loguru and jaxtyping.
# skyrl-gym: SkyRL's config module imports it.
ENGINE_PKGS ?= openrlhf==0.11.2 areal==1.0.4 skyrl==0.3.0 skyrl-gym==0.3.0

$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install --quiet -e ".[test,train,verl,trl,engines]"
	$(PIP) install --quiet --no-deps $(ENGINE_PKGS)
	touch $@

setup: $(VENV)/.base
setup-test: $(VENV)/.test browser

# Browser tests drive Debian's chromium headless; never a browser download.
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

run: setup
	$(VENV)/bin/streamlit run app/main.py --server.port $(PORT) --server.headless true

test: setup-test
	$(PY) -m pytest

# The fast loop while working: everything but the tests marked slow (browser, training runs, long arena
# comparisons, the wheel build). `make test` still runs them all.
test-fast: $(VENV)/.test
	$(PY) -m pytest -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
