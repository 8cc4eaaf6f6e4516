# `make test` and `make demo` each set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-slow demo install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The suite on TEST_WORKERS processes (pytest-xdist; a test file stays on one worker, so its
# module fixtures are built once; heaviest files first, tests/conftest.py), then the tests that
# time code, alone on the machine.
TEST_WORKERS ?= 2
PARALLEL_PYTEST = TOPHUB_LOCATION=NONE $(PY) -m pytest -q --durations=15 -n $(TEST_WORKERS) \
	--dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(PARALLEL_PYTEST) -m "not serial and not slow" tests
	TOPHUB_LOCATION=NONE $(PY) -m pytest -q -m serial tests

# The whole flows of a minute or more each (tests/conftest.py SLOW_TESTS); CI runs them after `test`.
test-slow: $(STAMP)
	$(PARALLEL_PYTEST) -m "slow and not serial" tests

demo: $(STAMP)
	TOPHUB_LOCATION=NONE $(VENV)/bin/quantfuse demo

clean:
	rm -rf $(VENV)
