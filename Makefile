# streamfill: `make demo` runs the main job on the local stack, `make test` runs the whole suite.
# Both install everything first (Python packages here, every role: `.[all,dev]`; OS packages and Kafka jars through
# `streamfill stack up`). `make release` builds and checks the sdist and the wheel.

PYTHON ?= $(shell command -v python3.11 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# test workers: Airflow's and the broker's waits overlap Spark's work (tests/shared_run.py)
TEST_WORKERS ?= 2

.PHONY: install spark-provider demo test test-unit test-matrix constraints release soak docs docs-options screenshots browser up down status bench-read clean

install: $(VENV)/.installed

# the exact versions of constraints.txt (pyproject.toml holds the ranges a team's environment may use), every role
$(VENV)/.installed: pyproject.toml setup.py constraints.txt
	@command -v $(PYTHON) >/dev/null || (apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -c constraints.txt -e '.[all,dev]'
	$(MAKE) --no-print-directory spark-provider
	touch $@

# the apache-spark provider (Airflow's tasks submit Spark through its hook) without its dependencies: it requires
# pyspark-client, Spark Connect's client alone, which installs into PySpark's own `pyspark` package and leaves no
# local mode. Then the hook must import and pyspark-client must be absent.
# PROVIDER_BIN: the venv's bin folder; PROVIDER_CONSTRAINTS: the version, constraints.txt's by default
PROVIDER_BIN ?= $(BIN)
PROVIDER_CONSTRAINTS ?= -c constraints.txt
spark-provider:
	$(PROVIDER_BIN)/pip install -q --no-deps $(PROVIDER_CONSTRAINTS) apache-airflow-providers-apache-spark
	$(PROVIDER_BIN)/python -c "import airflow.providers.apache.spark.hooks.spark_submit"
	@! $(PROVIDER_BIN)/pip show pyspark-client >/dev/null 2>&1 || \
	  (echo "pyspark-client is installed: it breaks PySpark's local mode; pip uninstall it and reinstall pyspark" >&2; exit 1)

# constraints.txt anew: the newest versions pyproject.toml's ranges allow, resolved in a scratch venv
constraints:
	rm -rf .constraints-venv
	$(PYTHON) -m venv .constraints-venv
	.constraints-venv/bin/pip install -q -U pip
	.constraints-venv/bin/pip install -q '.[all,dev]'
	$(MAKE) --no-print-directory spark-provider PROVIDER_BIN=.constraints-venv/bin PROVIDER_CONSTRAINTS=
	{ grep '^#' constraints.txt; .constraints-venv/bin/pip freeze --exclude-editable | grep -v '^streamfill'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .constraints-venv

# a release of this commit: refused unless CHANGELOG.md's top section is dated and names the version the commit
# builds (its tag: streamfill/version.py), then the sdist and the wheel into dist/, each checked by twine
release: install
	@version=$$($(BIN)/python -m streamfill.version --release $(CURDIR)) && \
	  $(BIN)/python -m build --outdir dist $(CURDIR) && \
	  $(BIN)/twine check --strict dist/streamfill-$$version.tar.gz dist/streamfill-$$version-py3-none-any.whl

demo: install
	$(BIN)/streamfill stack up
	$(BIN)/streamfill demo

test: install browser
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# the documentation's pictures: the browser tests' screenshots of the streamfill page and Airflow's views, on the
# local stack after `make demo` (the page test needs the demo's job)
screenshots: install browser
	$(BIN)/streamfill stack up
	STREAMFILL_SCREENSHOTS=docs/images $(BIN)/pytest -m browser -p no:xdist $(PYTEST_ARGS)

# the UI test drives Debian's chromium through its chromedriver (no browser download)
browser:
	@command -v chromedriver >/dev/null && command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)

test-unit: install
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

# the unit tests and one backfill on every supported Python and on the oldest supported Airflow, each in a fresh
# venv within pyproject.toml's ranges; writes the matrix into docs/requirements.md (tests/matrix.py)
test-matrix: install
	$(BIN)/streamfill stack up
	$(BIN)/python -m tests.matrix

# the randomized checker of docs/guarantees.md's invariants on new seeds until SECONDS are up, against a PostgreSQL
# of its own (the local stack's binaries); prints the runs, faults and offsets checked, and every failing seed
SECONDS ?= 600
soak: install
	$(BIN)/streamfill stack up
	$(BIN)/python -m tests.checker.soak --seconds $(SECONDS)

# the documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link or a page left out fails
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# the docs' tables of options and settings, written from their declarations (cli/option_docs.py); a unit test
# fails while a table differs from them
docs-options: install
	$(BIN)/python -m streamfill.cli.option_docs --write

up: install
	$(BIN)/streamfill stack up

down: install
	$(BIN)/streamfill stack down

status: install
	$(BIN)/streamfill stack status

clean: down
	rm -rf .stack
