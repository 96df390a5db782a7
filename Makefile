# Every target bootstraps its own virtual environment, so a fresh machine with
# only Python 3.11 and pip is enough.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench phoenix clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,frameworks]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check relay_runtime adapters integrations tests examples benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy -p relay_runtime

unit: $(STAMP)
	$(PY) -m pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	$(PY) -m benchmarks

# Arize Phoenix in its own venv, for the end-to-end OTel test (skipped without it, except under CI=true).
phoenix:
	bash tests/phoenix/setup.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
