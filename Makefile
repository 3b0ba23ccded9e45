# RL Studio — set up, start, test.
#   make studio   create .venv, install, start the desktop app
#   make test     create .venv, install, lint, type-check, check the import
#                 contracts, run the test suite (offscreen)
#   make bench    run the benchmarks in tests/benchmarks and print the figures
# Override the torch wheel with e.g. `make studio TORCH_SPEC="torch==2.5.1"`.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.rl-studio-installed

.PHONY: studio test bench lint setup clean xvfb-deps

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip setuptools wheel
	# torch first, from an overridable spec, so nothing else pulls a CUDA build
	$(BIN)/python -m pip install "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

studio: $(STAMP)
	$(BIN)/rl-studio

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest tests

# Benchmarks run for minutes by design: no faulthandler thread dumps after
# faulthandler_timeout (pyproject.toml, for `make test`); each benchmark's
# pytest-timeout mark still ends (and dumps) one that hangs.
bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest tests/benchmarks -p no:cacheprovider -s -q -o addopts="" -o faulthandler_timeout=0

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Optional: what the real-window drag-and-drop test needs (it skips without
# it), and bubblewrap, which confines untrusted code (engine/confine.py falls
# back to unshare, and refuses such code where neither works).
xvfb-deps:
	apt-get update -qq
	apt-get install -y -qq xvfb xdotool imagemagick libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 bubblewrap

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
