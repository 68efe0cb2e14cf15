# Every target bootstraps .venv from pyproject.toml, so a fresh clone needs only Python 3.11+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: test lint typecheck pytest run bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever pyproject.toml changes; all extras, so Spark and the dev tools are present.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

test: lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(VENV)/bin/pytest

# The main job: a local cluster (a controller and 3 brokers on 127.0.0.1:9092-9094, data in
# ./data) in the foreground until Ctrl-C; `ketch up --help` for the options.
run: $(STAMP)
	$(VENV)/bin/ketch up

bench: $(STAMP)
	$(PY) -m bench.timers
	$(PY) -m bench.mailbox
	$(PY) -m bench.records
	$(PY) -m bench.storage
	$(PY) -m bench.rpc
	$(PY) -m bench.replication
	$(PY) -m bench.failover
	$(PY) -m bench.verify
	$(VENV)/bin/ketch bench latency --duration 30 --json bench-latency.json --plot bench-latency.png

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
