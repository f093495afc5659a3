# The only set-up a fresh machine needs: `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# uv installs without compiling bytecode: each module is compiled on its first import and kept in .venv/pycache
# (nothing written beside any source), also where PYTHONDONTWRITEBYTECODE would have every process compile again
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
unexport PYTHONDONTWRITEBYTECODE
STAMP := $(VENV)/.installed

.PHONY: install test test-all test-install demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	# uv installs what pip would, from the same registries, in seconds rather than a minute and a half. It goes
	# in by the interpreter's own pip where it has one (pip >= 22.3 installs into another environment); else the
	# venv gets a pip of its own first (ensurepip: 5 s more)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet "uv>=0.5,<1" 2>/dev/null || \
	  { $(BIN)/python -m ensurepip --default-pip >/dev/null && $(BIN)/python -m pip install --quiet "uv>=0.5,<1"; }
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[train,test]"
	touch $(STAMP)

# Modules stay whole on one xdist worker, costliest first (tests/conftest.py: HEAVY_FIRST). One worker more than
# cores: Ray's start and the tests' fresh processes wait with a core idle (2 cores: 333 s with 2 workers, 300 s with 3)
WORKERS := $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
test: install
	$(BIN)/python -m pytest -q -m "not slow" -n $(WORKERS) --dist loadscope --no-loadscope-reorder

# Every test, as users' runs compile and account (`make test` compiles for compile time and memoises one
# pure accounting function: tests/conftest.py).
test-all: install
	TANPLAN_TEST_PLAIN=1 $(BIN)/python -m pytest -q -n auto --dist loadscope --no-loadscope-reorder

# `pip install .` without extras in a fresh venv: the planner works and imports no JAX (about a minute).
test-install: install
	$(BIN)/python -m pytest -q -m slow tests/test_planner_install.py

demo: install
	$(BIN)/tanplan demo

bench: install
	$(BIN)/tanplan bench

clean:
	rm -rf $(VENV) build *.egg-info
