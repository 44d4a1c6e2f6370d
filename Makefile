# Entry points: make run, make test, make lint, make bench.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JAVA_DEPS := .deps/java/.installed
CONFIG ?= config/broker.yaml

.PHONY: run test unit integration lint bench venv java-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

$(JAVA_DEPS): scripts/java-deps.sh
	bash scripts/java-deps.sh .deps/java $(PY)

java-deps: $(STAMP) $(JAVA_DEPS)

run: $(STAMP)
	$(VENV)/bin/gregor broker --config $(CONFIG)

test: $(STAMP) $(JAVA_DEPS)
	$(PY) -m pytest -q tests

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP) $(JAVA_DEPS)
	$(PY) -m pytest -q tests/integration

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy protocol storage coordinator broker

bench: $(STAMP)
	$(PY) -m bench.produce_fetch
	$(PY) -m bench.produce_validation
	$(PY) -m bench.append_micro

clean:
	rm -rf $(VENV) .deps data
