# make run | make test | make bench: each first installs what is missing (README.md).
#   apt: Java and Debian's ZooKeeper, plus the venv module, headers and gcc if Python lacks them
#   .venv: the project, editable, with the extras the target needs (redone when setup.cfg changes)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
PYTEST_ARGS ?=
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# Every process the targets start (the suite's brokers, CLI runs, simulation seeds, pytest's
# workers) imports the project: with PYTHONDONTWRITEBYTECODE set in the caller's environment,
# each of them compiled its ~150 modules from source again, 0.4 CPU-s of a broker's 1.0 s start.
unexport PYTHONDONTWRITEBYTECODE

.DEFAULT_GOAL := help
.PHONY: help run test bench system-packages browser-packages peer-packages

help:
	@echo "make run    ZooKeeper on 127.0.0.1:2181 and one broker, data under ./var/ (Ctrl-C stops)"
	@echo "make run BROKERS=3  the same with three brokers (ports 9092, 9192, 9292; README.md)"
	@echo "make test   the whole pytest suite (PYTEST_ARGS='...' passes options to pytest)"
	@echo "make bench  the benchmark suite, results under bench/results/"
	@echo "make scale  5 brokers, 1,000 partitions: creation, idle cost, failover, controlled shutdown (SCALE_ARGS='--long')"
	@echo "make soak   tests/reliability and tests/replication at length (make test runs their short form), with a summary"
	@echo "make nemesis MINUTES=20  the Jepsen-style run: 5 brokers, 3 ZooKeepers, random faults, a checker (root; docs/nemesis.md)"
	@echo "make simulate SECONDS=600  seeds of the replication simulation for that long (docs/simulation.md)"
	@echo "make spark-cluster  a Spark standalone master and two workers on 127.0.0.1 (Ctrl-C stops)"

# BROKERS=N: N brokers (twisted_broker/devcluster.py says which ports each gets).
run: $(VENV)/.installed-test
	$(VENV)/bin/python -m twisted_broker.devcluster $(if $(BROKERS),--brokers $(BROKERS))

# The suite mostly waits (on brokers, ZooKeeper, clients), so it runs in TEST_WORKERS pytest-xdist
# workers; tests/support/distribution.py keeps the tests that share a module's broker, or the
# SparkSession, on one worker. setup.cfg's timeout bounds each test. Measured on 2 cores: 1 worker
# 12.6 min, 3 workers 4.1-4.2 min, 4 workers 3.7-4.2 min, 6 workers 5.9 min; 3 leaves the
# timing-bound tests (failover bounds, group rebalances) the most room for the same time.
TEST_WORKERS ?= 3
test: $(VENV)/.installed-test | browser-packages
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# tests/browser drives Debian's chromium through Playwright's Python package (never
# `playwright install`: it downloads a browser). ~70 s and 480 MB, so only make test asks.
browser-packages:
	@[ -x /usr/bin/chromium ] || { echo "apt-get install: chromium"; \
	  $(SUDO) apt-get update -qq; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }

bench: $(VENV)/.installed-bench | peer-packages
	$(VENV)/bin/python -m bench

# Issue 23's scale benchmark (bench/scale.py): ZooKeeper and 5 brokers on loopback, 100 topics of
# 10 partitions at factor 3; creation, idle CPU/RSS/fds, produce/consume, failover after kill -9
# and after a session expiry, controlled shutdown; every wait bounded (about 25 min at most).
# JSON under bench/results/scale-<date>.json. SCALE_ARGS passes options (--long: 4,000
# partitions; --partitions 200 --brokers 3 --topics 20: the short form; --profile DIR).
SCALE_ARGS ?=
.PHONY: scale
scale: $(VENV)/.installed-test
	$(VENV)/bin/python -m bench.scale $(SCALE_ARGS)

# tests/reliability and tests/replication at length: >= 20 kill cycles (of a broker, and of a
# replicated partition's leader under load), >= 100,000 fuzzed frames, 1,000 held
# connections; it ends with the summary table (faults injected, cases tried, messages lost).
.PHONY: soak
soak: $(VENV)/.installed-test
	RELIABILITY_SCALE=soak $(VENV)/bin/python -m pytest -q --timeout 3600 tests/reliability tests/replication $(PYTEST_ARGS)

# MINUTES of faults (default 5), SEED to replay a schedule; needs root (network namespaces, a
# loop-mounted disk). Prints the checker's table; exits non-zero on any violation.
.PHONY: nemesis
nemesis: $(VENV)/.installed-test
	$(SUDO) $(VENV)/bin/python -m tests.nemesis --minutes $(or $(MINUTES),5) $(if $(SEED),--seed $(SEED))

# The deterministic simulation of replication (docs/simulation.md): seeds over every fault mix in
# 2 processes for SECONDS; prints the failing seeds' schedules and the figures. make test runs
# its short form (tests/simulation/). SIM_ARGS passes options (--mix, --first, --set ...).
SECONDS ?= 60
SIM_ARGS ?=
.PHONY: simulate
simulate: $(VENV)/.installed-test
	PYTHONHASHSEED=0 $(VENV)/bin/python -m tests.simulation --seconds $(SECONDS) --jobs 2 $(SIM_ARGS)

# bench/paper.py's peers, from Debian: RabbitMQ, ActiveMQ (Java: system-packages), Redis and
# NATS (JetStream is in nats-server). The benchmark starts each on loopback itself, so they are
# installed under a policy-rc.d that refuses service starts when the machine has none of its
# own (a container's usually has one already; it is then left alone).
peer-packages:
	@missing=""; \
	[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=" rabbitmq-server"; \
	[ -f /usr/share/activemq/bin/activemq.jar ] || missing+=" activemq"; \
	[ -x /usr/bin/redis-server ] || missing+=" redis-server"; \
	[ -x /usr/sbin/nats-server ] || missing+=" nats-server"; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null; \
	    $(SUDO) chmod 755 /usr/sbin/policy-rc.d; \
	    trap '$(SUDO) rm -f /usr/sbin/policy-rc.d' EXIT; \
	  fi; \
	  $(SUDO) apt-get update -qq; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Checked on every run (a few stat calls), so a machine that lost a package gets it back
# (nc: the README's `echo mntr | nc 127.0.0.1 9093`);
# apt-get update runs only when something is missing.
system-packages:
	@missing=""; \
	command -v java >/dev/null || missing+=" default-jre-headless"; \
	[ -f /usr/share/java/zookeeper.jar ] || missing+=" zookeeper"; \
	[ -f /usr/share/java/slf4j-simple.jar ] || missing+=" libslf4j-java"; \
	command -v nc >/dev/null || missing+=" netcat-openbsd"; \
	{ $(PYTHON) -c 'import ensurepip, os, sys, sysconfig; \
	    sys.exit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))' 2>/dev/null \
	  && command -v gcc >/dev/null; } || missing+=" python3-venv python3-dev gcc"; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update -qq; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# One stamp per set of extras; compat mode, because twistd cannot see the plugin of a
# default (import-hook) editable install. spark: PySpark and pyarrow for tests/spark and
# bench/spark_bench.py (Java comes from system-packages); redone when this file changes.
EXTRAS_test := test,spark
EXTRAS_bench := test,bench,spark

# --no-compile: pip would byte-compile every module of every package (pyspark's thousands
# included), 12 of the 39 s of a fresh install; a module is compiled, and its .pyc written,
# the first time a process imports it (make test's processes keep bytecode: see above).
$(VENV)/.installed-%: setup.cfg pyproject.toml Makefile | system-packages
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --no-compile -e '.[$(EXTRAS_$*)]' --config-settings editable_mode=compat
	touch $@

# The compiled twisted_broker/codec/kafka/record_values.py (issue 24: a modern Produce reads
# every record's value there, 16x faster compiled): mypyc builds its .so beside the source,
# which Python then imports first; without it the source runs. Redone when the source changes.
$(VENV)/.compiled: twisted_broker/codec/kafka/record_values.py | $(VENV)/.installed-test
	$(VENV)/bin/mypyc twisted_broker/codec/kafka/record_values.py >/dev/null
	rm -rf build
	touch $@
run test bench scale soak nemesis simulate: $(VENV)/.compiled

# A Python with pyspark (the driver's version) and pyarrow and nothing of this project: the
# executors' interpreter in tests/spark/test_standalone_cluster.py (make test), in make
# bench's cluster rows and on make spark-cluster, whose JVMs also come from its pyspark. The
# ETL ships the project to it (twisted_broker/spark/executor_code.py). Redone when setup.cfg
# or this file changes.
SPARK_WORKER_VENV := .venv-spark-worker
.PHONY: spark-cluster
test bench: $(SPARK_WORKER_VENV)/.installed

# Without a pip of its own (ensurepip: 6 of its 13 s): the project venv's pip installs into it.
$(SPARK_WORKER_VENV)/.installed: setup.cfg Makefile | $(VENV)/.installed-test
	[ -x $(SPARK_WORKER_VENV)/bin/python ] || $(PYTHON) -m venv --without-pip $(SPARK_WORKER_VENV)
	$(VENV)/bin/pip --python $(SPARK_WORKER_VENV)/bin/python install -q --no-compile $$($(VENV)/bin/python -c \
	  'from importlib.metadata import version as v; print("pyspark==" + v("pyspark"), "pyarrow==" + v("pyarrow"))')
	touch $@

# Master spark://127.0.0.1:7077 (web UI 8180), workers' web UIs 8181 and 8182, files under
# var/spark-cluster/; Ctrl-C stops all three JVMs. README.md: the nightly ETL against it.
spark-cluster: $(VENV)/.installed-test $(SPARK_WORKER_VENV)/.installed
	$(VENV)/bin/python -m twisted_broker.spark.standalone --python $(SPARK_WORKER_VENV)/bin/python \
	  --work-dir var/spark-cluster

# tests/kafka_clients and bench/modern.py: today's Kafka clients against the modern listener (issue
# 16). kafka-python, aiokafka and confluent-kafka come with the test extra (all make bench
# needs); for make test, kcat is Debian's kafkacat and kafkajs comes from npm into tests/support/kafka_clients/js.
.PHONY: modern-client-packages
test: modern-client-packages tests/support/kafka_clients/js/node_modules/.installed

modern-client-packages:
	@missing=""; \
	command -v kcat >/dev/null || missing+=" kafkacat"; \
	command -v node >/dev/null || missing+=" nodejs"; \
	command -v npm >/dev/null || missing+=" npm"; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update -qq; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing; \
	fi

tests/support/kafka_clients/js/node_modules/.installed: tests/support/kafka_clients/js/package.json tests/support/kafka_clients/js/package-lock.json | modern-client-packages
	cd tests/support/kafka_clients/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@
