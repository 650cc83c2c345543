# The two commands: `make test` and `make demo`. Everything they need is installed here,
# idempotently: a second run only checks the stamps.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KINESIS_LOCAL_VERSION := 0.6.2
KINESIS_LOCAL := .tools/node_modules/kinesis-local/main.js
DYNALITE_VERSION := 4.0.0
DYNALITE := .tools/node_modules/dynalite/cli.js
STAMP := $(VENV)/.installed
# Two pytest-xdist workers, one per core, a file's tests on one worker (its module's servers
# start once): measured, 24 min of pytest on one worker, 12 min on two, since most of a test's
# time is spent waiting on a server or a JVM. The slowest tests are in every run's log,
# to keep `make test` inside its ~15 minutes.
PYTEST_ARGS ?= -n 2 --dist loadfile --durations=15

.PHONY: setup test quick lint typecheck unit demo bench clean

setup: $(STAMP) $(KINESIS_LOCAL) $(DYNALITE)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,dev,bench,otel]'
	touch $(STAMP)

$(KINESIS_LOCAL):
	mkdir -p .tools
	npm install --silent --no-audit --no-fund --prefix .tools kinesis-local@$(KINESIS_LOCAL_VERSION)
	test -f $(KINESIS_LOCAL)

$(DYNALITE):
	mkdir -p .tools
	npm install --silent --no-audit --no-fund --prefix .tools dynalite@$(DYNALITE_VERSION)
	test -f $(DYNALITE)

lint: $(STAMP)
	$(BIN)/ruff check kinesis_actors spark_bridge tests benchmarks examples
	$(BIN)/ruff format --check kinesis_actors spark_bridge tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: setup lint typecheck unit

# The edit loop: the suite without its slow end-to-end runs (`@pytest.mark.slow`).
quick: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS) -m "not slow"

demo: setup
	$(BIN)/kinesis-actors demo

bench: setup
	$(BIN)/kinesis-actors bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
