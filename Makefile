# The only set-up a fresh machine needs: `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all test-install demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[train,test]"
	touch $(STAMP)

# Modules stay whole on one xdist worker, costliest first (tests/conftest.py: HEAVY_FIRST).
test: install
	$(BIN)/python -m pytest -q -m "not slow" -n auto --dist loadscope --no-loadscope-reorder

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
