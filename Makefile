# `make test` and `make demo` each set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	TOPHUB_LOCATION=NONE $(PY) -m pytest -q --durations=15 tests

demo: $(STAMP)
	TOPHUB_LOCATION=NONE $(VENV)/bin/quantfuse demo

clean:
	rm -rf $(VENV)
