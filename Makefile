# streamfill: `make demo` runs the main job on the local stack, `make test` runs the whole suite.
# Both install everything first (Python packages here; OS packages and Kafka jars through `streamfill stack up`).

PYTHON ?= $(shell command -v python3.11 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo test test-unit up down status bench-read clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || (apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: install
	$(BIN)/streamfill stack up
	$(BIN)/streamfill demo

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

test-unit: install
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

up: install
	$(BIN)/streamfill stack up

down: install
	$(BIN)/streamfill stack down

status: install
	$(BIN)/streamfill stack status

clean: down
	rm -rf .stack
