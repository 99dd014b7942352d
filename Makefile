# tfs-stack: two commands for a newcomer.
#   make up    run the stack (docker compose where an engine answers, else the embedded server)
#   make down  stop what make up started (compose or embedded, from .cache/serving/stack.json)
#   make logs  its logs (SERVICE=NAME, FOLLOW=1), from what make up recorded; never compose by hand
#   make test  install everything and run the whole test suite
#   make certs the compose gateway's local CA, certificates and API keys (gateway/secrets/)
#   make images the local stand-in images for an engine that reaches no registry (make up IMAGES=local)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# tensorflow-serving-api at its pyproject pin, installed --no-deps: its declared `tensorflow` dependency
# would pull the CUDA build in beside the CPU-only `tensorflow-cpu` of the `tf` extra (pyproject.toml).
SERVING_API := $(shell grep -o 'tensorflow-serving-api==[0-9.]*' pyproject.toml | head -1)
# Debian packages the tests use, as package:tool: prometheus (promtool, prometheus), nginx (the gateway tests).
DEBIAN_PACKAGES := prometheus:promtool nginx:nginx
# Where `make certs` writes (git-ignored; .env's GATEWAY_SECRETS_HOST_DIR is where compose reads).
GATEWAY_SECRETS ?= gateway/secrets
# Extra names for the gateway's server certificate, e.g. make certs SERVER_NAMES="gpu-host 10.0.0.5".
SERVER_NAMES ?=

.PHONY: help up down logs export test install debs venv clean bench monitor certs gpu-report images

help:
	@echo "make up     run the stack (serves models/; exports the small demo models into an empty repository, MODELS=all for every zoo model)"
	@echo "make down   stop what make up started (compose or embedded)"
	@echo "make logs   the stack's logs (SERVICE=tfserving for one compose service; FOLLOW=1 keeps printing)"
	@echo "make export ARGS='export --model resnet50 --variant xla'  the exporter in its image on the compose stack"
	@echo "make test   install what the tests need and run them"
	@echo "make bench  speed ratios: codec, REST decode, embedded server, load generator, gRPC vs REST, batching, the embedded server beside its peers, the gateway's cost"
	@echo "make images local stand-in images (TF Serving, exporter base, nginx, Prometheus) for make up IMAGES=local"
	@echo "make certs  local CA, gateway certificates and API keys for the compose gateway ($(GATEWAY_SECRETS))"
	@echo "make gpu-report  on an NVIDIA GPU host with Docker: preflight, trt-fp16 export, tuner and fp32/xla/trt-fp16 sweep (out/gpu-report/)"
	@echo "make monitor  Prometheus with the stack's rules on 127.0.0.1:9090 (scrapes 127.0.0.1:8501)"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps "$(SERVING_API)"
	$(PY) -c "import tensorflow_serving.apis, tensorflow"
	touch $(STAMP)

venv install: $(STAMP)

# Debian packages the tests use. Installs only what is missing. Debian starts an nginx it installs as
# a service on port 80; the tests start their own, so a service that this target installed is stopped.
debs:
	@missing=""; \
	for pair in $(DEBIAN_PACKAGES); do \
	  PATH="$$PATH:/usr/sbin" command -v $${pair#*:} >/dev/null 2>&1 || missing="$$missing $${pair%%:*}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  case "$$missing" in *nginx*) \
	    if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q nginx 2>/dev/null; then \
	      $$SUDO systemctl disable --now nginx; fi;; \
	  esac; \
	fi

# A Docker engine for the compose tests: the one that answers, else Debian's docker.io installed and
# started here (and stopped again when the run ends); then the local images (cached by content).
# Without an engine the tests still run, and the compose tests skip with the reason.
# The suite runs on TEST_WORKERS pytest-xdist workers (default 2, one per core here; 1 runs it in one process);
# tests/conftest.py keeps all that drive the engine on one worker, and runs the tests marked alone by themselves.
TEST_WORKERS ?= 2
test: $(STAMP) debs
	$(PY) -m deploy.images run -- $(PY) -m pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)

# The stand-in images docker-compose.local.yml names, built from Debian's packages (no registry needed;
# python -m deploy.images --help). Starts dockerd where none answers, and leaves it running.
images: $(STAMP)
	$(PY) -m deploy.images build

# MODELS=resnet50,digits_xla (or all) also exports those zoo models when missing (default: digits,
# text and ranker, only into an empty model repository).
# IMAGES=local: the CPU stack on the stand-in images of `make images` (built first when they changed).
# VERBOSE=1: the embedded server's log on the terminal (default: .cache/serving/server.log).
# BACKEND=embedded (or compose-cpu, compose-gpu): that backend, whatever `docker info` says.
up: $(STAMP) $(if $(filter local,$(IMAGES)),images)
	$(PY) -m serving.stack $(if $(MODELS),--models $(MODELS)) $(if $(IMAGES),--images $(IMAGES)) $(if $(VERBOSE),--verbose) $(if $(BACKEND),--backend $(BACKEND))

# Stops whichever backend make up started (compose down, or the embedded make up and its server),
# from the stack.json make up wrote; says so when nothing runs.
down: $(STAMP)
	$(PY) -m serving.stack down

# The logs of what make up started, with the compose files, profiles, project and variables it recorded
# in .cache/serving/stack.json (the embedded stack: its server's log). SERVICE=tfserving for one service.
logs: $(STAMP)
	$(PY) -m serving.stack logs $(if $(FOLLOW),--follow) $(SERVICE)

# One export in the exporter's image on the recorded compose stack (its model repository and user), e.g.
# make export ARGS="export --model resnet50 --variant xla". On the embedded stack: python -m exporter ... here.
export: $(STAMP)
	$(PY) -m serving.stack run exporter "python -m exporter $(ARGS) --model-repo /models"

# The compose gateway's secrets: a local CA, the server certificate, client and admin certificates and
# API keys (openssl; python -m gateway.certs --help). Never overwrites: `python -m gateway.certs
# --out DIR --force` makes them anew, `python -m gateway.certs --out DIR issue NAME [--admin]` adds a client.
certs:
	@if [ -f $(GATEWAY_SECRETS)/ca.crt ]; then \
	  echo "$(GATEWAY_SECRETS) already has a CA; python -m gateway.certs --help to renew or add clients"; \
	else \
	  $(PYTHON) -m gateway.certs --out $(GATEWAY_SECRETS) init $(foreach n,$(SERVER_NAMES),--server-name $(n)); \
	fi

# Speed checks: each script prints ratios measured side by side in one run (minutes; use a quiet machine).
bench: $(STAMP)
	$(PY) -m exporter ensure --model-repo models digits resnet50
	@status=0; \
	for cmd in "benchmarks.codec --imports" "benchmarks.rest_decode" "benchmarks.server --model-repo models" \
	           "benchmarks.loadgen --model-repo models" "benchmarks.protocols --model-repo models" \
	           "benchmarks.batching --model-repo models" \
	           "benchmarks.peers --model-repo models" "benchmarks.gateway --start"; do \
	  echo "== python -m $$cmd"; $(PY) -m $$cmd || { echo "!! python -m $$cmd missed a target"; status=1; }; \
	done; exit $$status

# On a host with an NVIDIA GPU and Docker: preflight (driver, compute capability, NVIDIA container runtime;
# exit 3 with the fix when one fails), then the trt-fp16 export, the compose stack, the fp32/xla/trt-fp16
# sweep and the tuner on resnet50, written to out/gpu-report/ (python -m benchmarks.gpu --help).
gpu-report: $(STAMP)
	$(PY) -m benchmarks.gpu $(GPU_REPORT_ARGS)

# Prometheus (Debian's package) with the stack's rules on 127.0.0.1:9090, scraping TF Serving or
# the embedded server on 127.0.0.1:8501 (e.g. make monitor MONITOR_ARGS="--rest=http://HOST:PORT").
monitor: $(STAMP) debs
	$(PY) -m monitoring.local $(MONITOR_ARGS)

clean:
	rm -rf $(VENV) .cache
