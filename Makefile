# `make test` and `make demo` each set everything up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-slow test-families demo install clean

# TVM 0.19's wheel exists for Python 3.11 only: any other is refused, in one line, before the
# venv is made (PYTHON_FOUND runs $(PYTHON) only then).
PYTHON_FOUND = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHON_REFUSED = quantfuse needs Python 3.11, but $(PYTHON) is $(or $(PYTHON_FOUND),not a Python that runs): run make PYTHON=python3.11 (or the path of a Python 3.11)

$(PY):
	$(if $(filter 3.11,$(PYTHON_FOUND)),,$(error $(PYTHON_REFUSED)))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The suite on TEST_WORKERS processes (pytest-xdist; a test file stays on one worker, so its
# module fixtures are built once; heaviest files first, tests/conftest.py).
TEST_WORKERS ?= 2
PARALLEL_PYTEST = TOPHUB_LOCATION=NONE $(PY) -m pytest -q --durations=15 -n $(TEST_WORKERS) \
	--dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(PARALLEL_PYTEST) -m "not slow and not families" tests

# The whole flows of a minute or more each (tests/conftest.py SLOW_TESTS); CI runs them after `test`.
test-slow: $(STAMP)
	$(PARALLEL_PYTEST) -m "slow and not families" tests

# The seven classic CNN families as PT2E programs, their untuned builds against the programs and
# their fusion on the A100: minutes per family on 2 cores (MobileNetV3's untuned build ran over 9
# minutes), so outside CI's 90 minutes; their imports run in test-slow.
test-families: $(STAMP)
	$(PARALLEL_PYTEST) -m families tests

demo: $(STAMP)
	TOPHUB_LOCATION=NONE $(VENV)/bin/quantfuse demo

clean:
	rm -rf $(VENV)
