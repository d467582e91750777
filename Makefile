# make run | make test | make bench: each first installs what is missing (README.md).
#   apt: Java and Debian's ZooKeeper, plus the venv module, headers and gcc if Python lacks them
#   .venv: the project, editable, with the extras the target needs (redone when setup.cfg changes)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
PYTEST_ARGS ?=
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.DEFAULT_GOAL := help
.PHONY: help run test bench system-packages

help:
	@echo "make run    ZooKeeper on 127.0.0.1:2181 and one broker, data under ./var/ (Ctrl-C stops)"
	@echo "make test   the whole pytest suite (PYTEST_ARGS='...' passes options to pytest)"
	@echo "make bench  the benchmark suite, results under bench/results/"

run: $(VENV)/.installed-test
	$(VENV)/bin/python -m twisted_broker.devcluster

test: $(VENV)/.installed-test
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

bench: $(VENV)/.installed-bench
	$(VENV)/bin/python -m bench

# Checked on every run (a few stat calls), so a machine that lost a package gets it back;
# apt-get update runs only when something is missing.
system-packages:
	@missing=""; \
	command -v java >/dev/null || missing+=" default-jre-headless"; \
	[ -f /usr/share/java/zookeeper.jar ] || missing+=" zookeeper"; \
	[ -f /usr/share/java/slf4j-simple.jar ] || missing+=" libslf4j-java"; \
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
# default (import-hook) editable install.
EXTRAS_test := test
EXTRAS_bench := test,bench

$(VENV)/.installed-%: setup.cfg pyproject.toml | system-packages
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[$(EXTRAS_$*)]' --config-settings editable_mode=compat
	touch $@
