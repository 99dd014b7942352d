# tfs-stack: two commands for a newcomer.
#   make up    run the stack (docker compose where an engine answers, else the embedded server)
#   make test  install everything and run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEBIAN_PACKAGES := prometheus

.PHONY: help up test install debs venv clean bench

help:
	@echo "make up     run the stack (exports demo models if missing)"
	@echo "make test   install what the tests need and run them"

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

up: $(STAMP)
	$(PY) -m serving.up

clean:
	rm -rf $(VENV) .cache
