# gpubench: every target sets up what it needs (the virtual environment included).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOG := $(VENV)/install.log
SHOW_LOG = { tail -n 40 $(LOG); echo "install failed: the whole log is $(LOG)"; exit 1; }
PYTEST_ARGS ?=

.PHONY: help install proto test test-docker test-gpu demo bench chaos docs lint typecheck clean

help:
	@echo "make demo         a benchmark run sent to a local collector, compared (.demo/)"
	@echo "make test         the default test suite (CPU only, a tiny training per backend)"
	@echo "make test-e2e     the long runs: training, out of memory, the demo, chaos, tools"
	@echo "make test-docker  build the images and run agent + collector containers"
	@echo "make bench        collector and sampler benchmarks (figures and ratios)"
	@echo "make chaos        the collector's fault campaign at full size (tests/chaos)"
	@echo "make haproxy      Debian's HAProxy unpacked into .tools/ for the edge's tests"
	@echo "make chromium     Debian's Chromium unpacked into .tools/ for the browser test"
	@echo "make install      the virtual environment with every extra ($(VENV))"
	@echo "make proto        regenerate the wire code from protos/"
	@echo "make docs         regenerate api.md, cli.md and the docs' command transcripts"
	@echo "make lint         ruff, generated docs, actionlint + zizmor, hadolint"
	@echo "make typecheck    mypy over gpubench/, agent/ and collector/"

# Each step says what it does; pip's own output goes to $(LOG), shown when a step fails.
$(STAMP): pyproject.toml setup.py
	@echo "setting up $(VENV) from PyPI (about 2 minutes; log: $(LOG))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@: > $(LOG)
	@echo "  [1/4] pip, setuptools, wheel"
	@$(PY) -m pip install --upgrade pip setuptools wheel >>$(LOG) 2>&1 || $(SHOW_LOG)
	@echo "  [2/4] grpcio-tools (the protobuf compiler)"
	@$(PY) -m pip install grpcio-tools >>$(LOG) 2>&1 || $(SHOW_LOG)
	@echo "  [3/4] the wire code from protos/"
	@$(PY) -c "import setup; setup.generate_wire_code()" >>$(LOG) 2>&1 || $(SHOW_LOG)
	@echo "  [4/4] gpubench and what it needs: TensorFlow, torch, DuckDB... (the long step)"
	@# A copy installed as "gpubench" (this project's name before gpubench-keras, or PyPI's
	@# unrelated gpubench) would own the same package and commands: it goes first.
	@$(PY) -m pip uninstall -y gpubench >>$(LOG) 2>&1 || true
	@$(PY) -m pip install -e '.[dev]' >>$(LOG) 2>&1 || $(SHOW_LOG)
	@touch $(STAMP)
	@echo "  $(VENV) is ready"

install: $(STAMP)

proto: $(STAMP)
	$(PY) -c "import setup; setup.generate_wire_code()"

# The default suite, spread over the cores (pytest-xdist; PYTEST_WORKERS=0 runs it in this
# process), with its 25 slowest steps at the end. Each file's tests run in one worker, so
# that a module's fixtures (a training run, a collector) are made once. Of the tests that
# start a framework (marked slow) it keeps one tiny training per backend (marked smoke);
# it needs no fetched tool. tests/gpu, every test of it marked gpu, is not even collected:
# its modules import torch and Keras as they load (4 s in each worker).
PYTEST_WORKERS ?= auto
DEFAULT_TESTS := not docker and not gpu and not e2e and (smoke or not slow)
NOT_GPU := --ignore=tests/gpu
test: proto
	$(PY) -m pytest -m "$(DEFAULT_TESTS)" $(NOT_GPU) -n $(PYTEST_WORKERS) \
	  --dist loadfile --slowest 25 $(PYTEST_ARGS)

# Everything `make test` leaves out but docker and GPU: the other trainings, real
# out-of-memory runs, `make demo` from a clean checkout, the fault campaign at its short
# size (tests/chaos) and the tests of the fetched Debian tools: one at a time, as each
# loads the machine.
E2E_TESTS := not docker and not gpu and (e2e or slow and not smoke)
.PHONY: test-e2e
test-e2e: proto chromium promtool haproxy
	$(PY) -m pytest -m "$(E2E_TESTS)" $(NOT_GPU) --slowest 25 $(PYTEST_ARGS)

# Tools the tests run, fetched into the project (git-ignored), never installed system-wide:
# Debian's packages with the libraries this system lacks, downloaded and unpacked into
# $(TOOLS)/PACKAGE by tests/fetch_debian.sh (apt-get download, dpkg -x; apt's package lists
# in $(TOOLS)/apt, not /var/lib/apt). No maintainer script runs and no service is enabled,
# as root or not. Where one cannot be fetched, the tests that need it are skipped and say
# why.
TOOLS := .tools
# $(call fetch,PACKAGE,the tests that need it): fetch PACKAGE, or say what is skipped.
# Each line it prints fits 80 columns: PACKAGE and the tests' words are kept short.
fetch = echo "fetching Debian's $(1) into $(TOOLS)/$(1) for $(2)"; mkdir -p $(dir $(LOG)); \
  bash tests/fetch_debian.sh $(TOOLS) $(1) >>$(LOG) 2>&1 \
    || { echo "could not fetch $(1) (see $(LOG)):"; echo "  $(2) will be skipped"; }

# promtool (from the prometheus package) checks docs/monitoring's alert rules and dashboard
# queries (tests/integration/test_monitoring.py); no Prometheus server is run.
PROMTOOL := $(TOOLS)/prometheus/usr/bin/promtool
.PHONY: promtool
promtool:
	@command -v promtool >/dev/null 2>&1 || test -x $(PROMTOOL) || { \
	  $(call fetch,prometheus,the promtool checks); }

# Headless Chromium drives the results site's browser test (tests/web/test_browser.py, in
# make test-e2e); about 190 MB to fetch.
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null 2>&1 || test -x $(TOOLS)/chromium/usr/lib/chromium/chromium || { \
	  $(call fetch,chromium,the site's browser test); }

# HAProxy, the proxy of docker/edge/, for the edge proxy's tests
# (tests/integration/test_edge_proxy.py) and the fault campaign's edge parts
# (tests/chaos/chaos_edge.py): Debian's own, the version the edge image installs, even
# where another is on PATH.
HAPROXY := $(TOOLS)/haproxy/usr/sbin/haproxy
.PHONY: haproxy
haproxy:
	@test -x $(HAPROXY) || { $(call fetch,haproxy,the edge proxy's tests); }

test-docker: proto
	$(PY) -m pytest -m docker tests/docker tests/agent $(PYTEST_ARGS)

test-gpu: proto
	$(PY) -m pytest -m gpu tests/gpu $(PYTEST_ARGS)

demo: proto
	$(PY) scripts/demo.py

bench: proto
	$(PY) bench/collector_bench.py
	$(PY) bench/sampler_overhead.py

# The collector's fault campaign (tests/chaos/test_campaign.py): kill -9 under load, a
# full disk, fuzzing, tokens, poisoned records, a killed push, floods, tampered backups,
# fabricated runs, the edge. make test-e2e runs it at its short size; this, at full size,
# with its table at the end. CHAOS_ARGS: more pytest options, e.g. "-k fabrication
# --chaos-seed 20261202", or "--chaos-size short" (a minute or two).
CHAOS_ARGS ?=
chaos: proto haproxy
	$(PY) -m pytest tests/chaos -m chaos --chaos-size full $(CHAOS_ARGS)

# The pages generated from the code (docs/api.md from the docstrings, docs/cli.md from
# each command's --help) and the command transcripts of README.md and docs/*.md (what
# each prints against a collector of the reference runs): `make lint` checks them.
.PHONY: docs
docs: proto
	$(PY) scripts/api_reference.py
	$(PY) scripts/cli_reference.py
	$(PY) scripts/transcripts.py

# ruff; docs/api.md, docs/cli.md and the transcripts are current; the workflows with
# actionlint and zizmor (offline: no look-up of the actions' latest versions); the
# Dockerfiles with hadolint.
# Each a binary from the dev extra.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) scripts/api_reference.py --check
	$(PY) scripts/cli_reference.py --check
	$(PY) scripts/transcripts.py --check
	$(VENV)/bin/actionlint .github/workflows/*.yml
	$(VENV)/bin/zizmor --offline --quiet .github/workflows/
	$(VENV)/bin/hadolint docker/*.Dockerfile

# pyproject.toml's [tool.mypy] names the three source roots; the count of what it still
# reports is in docs/results/typecheck.md.
typecheck: proto
	$(VENV)/bin/mypy

# .demo/ holds what `make demo` left: its collector database, spool and token.
clean:
	rm -rf build dist *.egg-info .pytest_cache gpubench/v1/*_pb2*.py*
	@if [ -e .demo ]; then rm -rf .demo && echo "removed .demo/ (make demo's database, spool and token)"; fi
