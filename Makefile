# RL Studio — set up, start, test.
#   make studio   create .venv, install, start the desktop app
#   make test     create .venv, install, lint, type-check, check the import
#                 contracts, run the test suite (offscreen) but the slow tests
#   make test-slow  the slow end-to-end tests (CI runs both)
#   make bench    run the benchmarks in tests/benchmarks and print the figures
# Override the torch wheel with e.g. `make studio TORCH_SPEC="torch==2.5.1"`.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.rl-studio-installed

.PHONY: studio test test-slow bench bench-purejaxrl lint setup clean xvfb-deps pg-deps

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip setuptools wheel
	# torch first, from an overridable spec, so nothing else pulls a CUDA build
	$(BIN)/python -m pip install "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -e ".[dev]"
	# RL Zoo's hyperparameter files, read as data (engine/rl/zoo_presets.py),
	# never imported: without its dependencies, whose moviepy would downgrade
	# Pillow.
	$(BIN)/python -m pip install --no-deps "rl-zoo3==2.9.2"
	touch $(STAMP)

studio: $(STAMP)
	# Qt's X11 libraries: installed as root with apt, else the command is named
	$(BIN)/python -m studio.platform_check --install
	$(BIN)/rl-studio

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest tests -m "not slow" --durations=30

# The end-to-end tests marked slow (several processes, real training, sweeps,
# scale-out, fuzzing): CI runs them after `make test`.
test-slow: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest tests -m slow --durations=30

# Benchmarks run for minutes by design: no faulthandler thread dumps after
# faulthandler_timeout (pyproject.toml, for `make test`); each benchmark's
# pytest-timeout mark still ends (and dumps) one that hangs.
bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest tests/benchmarks -p no:cacheprovider -s -q -o addopts="" -o faulthandler_timeout=0

# PureJaxRL, issue 27's reference for the jax backend, beside the project (it
# needs network access): its ppo.py at a fixed commit, with the gymnax it was
# written for (1.x changed step's return) and the project's own jax.
PUREJAXRL_COMMIT := 31756b197773a52db763fdbe6d635e4b46522a73
bench-purejaxrl: $(STAMP)
	$(PYTHON) -m venv .venv-purejaxrl
	.venv-purejaxrl/bin/python -m pip install "jax==$$($(BIN)/python -c 'import jax; print(jax.__version__)')" gymnax==0.0.9 flax optax distrax
	test -d .purejaxrl || git clone https://github.com/luchris429/purejaxrl .purejaxrl
	git -C .purejaxrl checkout -q $(PUREJAXRL_COMMIT)

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

# PostgreSQL, which the shared-store tests (tests/pg_server.py) start as a
# private server on 127.0.0.1 (they skip, saying so, without it). Only the
# binaries: the package's own cluster is not started.
pg-deps:
	apt-get update -qq
	apt-get install -y -qq postgresql

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
