# tfs-stack: two commands for a newcomer.
#   make up    run the stack (docker compose where an engine answers, else the embedded server)
#   make test  install everything and run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEBIAN_PACKAGES := prometheus

.PHONY: help up test install debs venv clean bench monitor

help:
	@echo "make up     run the stack (serves models/; exports the small demo models into an empty repository, MODELS=all for every zoo model)"
	@echo "make test   install what the tests need and run them"
	@echo "make bench  speed ratios: codec, embedded server, load generator"
	@echo "make monitor  Prometheus with the stack's rules on 127.0.0.1:9090 (scrapes 127.0.0.1:8501)"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv install: $(STAMP)

# Debian packages the tests use (promtool and prometheus). Installs only what is missing.
debs:
	@if ! command -v promtool >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEBIAN_PACKAGES)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(DEBIAN_PACKAGES) >/dev/null; \
	fi

test: $(STAMP) debs
	$(PY) -m pytest

# MODELS=resnet50,digits_xla (or all) also exports those zoo models when missing (default: digits,
# text and ranker, only into an empty model repository).
up: $(STAMP)
	$(PY) -m serving.up $(if $(MODELS),--models $(MODELS))

# Speed checks: each script prints ratios measured side by side in one run (minutes; use a quiet machine).
bench: $(STAMP)
	$(PY) -m exporter ensure --model-repo models digits resnet50
	$(PY) -m benchmarks.codec --imports
	$(PY) -m benchmarks.server --model-repo models
	$(PY) -m benchmarks.loadgen --model-repo models

# Prometheus (Debian's package) with the stack's rules on 127.0.0.1:9090, scraping TF Serving or
# the embedded server on 127.0.0.1:8501 (e.g. make monitor MONITOR_ARGS="--rest=http://HOST:PORT").
monitor: $(STAMP) debs
	$(PY) -m monitoring.local $(MONITOR_ARGS)

clean:
	rm -rf $(VENV) .cache
