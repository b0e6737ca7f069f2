# Every target sets up what it needs: a fresh clone runs `make test` or `make run` directly.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# KAFKA_VERSION=3.9.2 make test runs the same suite against a 3.x broker.
export KAFKA_VERSION

.PHONY: setup jars test test-fast lint run bench fuzz kafka-up kafka-down clean

setup: $(STAMP) jars

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

jars: $(STAMP)
	$(PY) -m testbed.jvm

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The whole suite, slow end-to-end scenarios included.
test: setup lint
	$(PY) -m pytest

# Everything but the slow end-to-end scenarios, for quick iterations.
test-fast: setup
	$(PY) -m pytest -m "not slow"

# BOOTSTRAP=host:port make run  monitors that cluster; without it, a local broker and demo groups.
run: setup
	$(VENV)/bin/rebalance-monitor run $(if $(BOOTSTRAP),--bootstrap-server $(BOOTSTRAP),--demo) $(RUN_ARGS)

bench: setup
	$(PY) -m benchmarks.decode_bench

fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q tests/test_decoders_properties.py

kafka-up: setup
	$(PY) -m testbed.broker up

kafka-down: $(STAMP)
	$(PY) -m testbed.broker down

clean:
	-$(PY) -m testbed.broker down
	rm -rf $(VENV) build .local .pytest_cache .ruff_cache .hypothesis *.egg-info
