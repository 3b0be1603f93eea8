# mirrorwatch: every developer and CI entry point. `make test` needs nothing but Python 3.11+
# and root (for apt) on Debian/Ubuntu: it builds .venv and installs promtool/amtool itself.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
SCENARIO ?= healthy
EXPORTER_LISTEN ?= 127.0.0.1:9848
PROMETHEUS_LISTEN ?= 127.0.0.1:9090
ALERTMANAGER_LISTEN ?= 127.0.0.1:9093
RECEIVER_LISTEN ?= 127.0.0.1:9095
# `make report` takes the run, Prometheus and range from the running demo (build/demo/state.json);
# RUN=, SINCE=, REPORT_OUT= or PROMETHEUS_LISTEN= on the command line replace them.
RUN ?=
REPORT_OUT ?=
SINCE ?=

.PHONY: help setup tools demo-tools install demo-install test lint typecheck pytest bench demo \
  report alerts dashboards compatibility metrics clean

# A setup step, quiet unless it fails: its output goes to build/setup.log and only the log's end
# is shown, with where the rest is, when the step fails.
SETUP_LOG := build/setup.log
quietly = mkdir -p build && { $(1) ; } >>$(SETUP_LOG) 2>&1 || { tail -n 25 $(SETUP_LOG); \
  echo "make: setup step failed; the whole log is $(SETUP_LOG)"; exit 1; }

## help: this list (each target's `##` comment)
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); split($$0, part, ": "); \
	  printf "  make %-11s %s\n", part[1], substr($$0, length(part[1]) + 3); next } \
	  /^## / { sub(/^## /, ""); printf "  %-16s %s\n", "", $$0 }' $(MAKEFILE_LIST)

## setup: the virtual environment with the project and its test tools, plus promtool/amtool
setup: install tools

# The torch monitor's tests (tests/torch_monitor) run on this torch, pinned: the `[torch]` extra's
# range would let pip fetch a newer release's CUDA build (several GB); this one is a CPU build.
# Lightning (its callback's test) installs beside it without asking for another torch.
TORCH_VERSION ?= 2.13.0
LIGHTNING_VERSION ?= 2.6.6

# tf-keras of the installed tensorflow-cpu's release, without its `tensorflow` requirement (a
# second TensorFlow): the multi-worker trainer and its tests run on it (see pyproject.toml).
$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip "setuptools>=77" wheel
	$(PIP) install -e '.[test]' --config-settings editable_mode=strict
	$(PIP) install --no-deps "tf-keras==$$($(PY) -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')"
	$(PIP) install "torch==$(TORCH_VERSION)" "lightning==$(LIGHTNING_VERSION)"
	touch $@

# The strict editable install links each source file, so it is refreshed to pick up new modules.
install: $(VENV)/.deps
	@$(call quietly,$(PIP) install --no-deps -e . --config-settings editable_mode=strict)

# What `make demo` needs and no more: the project with TensorFlow for CPUs (the `demo` extra),
# not the test tools. A .venv that `make setup` built has it already.
$(VENV)/.demo-deps: pyproject.toml
	@echo "demo setup 1/3: Python environment $(VENV) with TensorFlow for CPUs (first run only:" \
	  "about 1.6 GB, mostly TensorFlow; minutes; log: $(SETUP_LOG))"
	@$(call quietly,$(PYTHON) -m venv $(VENV))
	@$(call quietly,$(PIP) install --upgrade pip "setuptools>=77" wheel)
	@$(call quietly,$(PIP) install -e '.[demo]' --config-settings editable_mode=strict)
	@touch $@

demo-install: $(if $(wildcard $(VENV)/.deps),$(VENV)/.deps,$(VENV)/.demo-deps)
	@$(call quietly,$(PIP) install --no-deps -e . --config-settings editable_mode=strict)

## tools: Prometheus, Alertmanager (with promtool, amtool), docker-compose, chromium and
## victoria-metrics (vmagent, vmalert: tests/fleet) from Debian, when missing. docker-compose
## (v1, Python) only validates the compose files here: no Docker engine. Chromium renders the
## run report in tests/report.
tools: demo-tools
	@if ! command -v promtool >/dev/null || ! command -v amtool >/dev/null \
	    || ! command -v docker-compose >/dev/null; then \
	  echo "installing Debian packages prometheus, prometheus-alertmanager and docker-compose"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus prometheus-alertmanager docker-compose >/dev/null; \
	fi
	@if ! command -v chromium >/dev/null; then \
	  echo "installing Debian package chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends chromium >/dev/null; \
	fi
	@if ! command -v victoria-metrics >/dev/null || ! command -v vmagent >/dev/null \
	    || ! command -v vmalert >/dev/null; then \
	  echo "installing Debian package victoria-metrics"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends victoria-metrics >/dev/null; \
	fi

# The demo's only system packages: Debian's Prometheus and Alertmanager.
demo-tools:
	@if ! command -v prometheus >/dev/null || ! command -v prometheus-alertmanager >/dev/null; then \
	  echo "demo setup 2/3: Debian packages prometheus and prometheus-alertmanager (first run only)"; \
	  $(call quietly,apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus prometheus-alertmanager); \
	fi

## test: lint, type checks and every test (CI runs this)
test: setup lint typecheck pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy -p mirrorwatch.contract -p mirrorwatch.exporter -p mirrorwatch.trainer \
	  -p mirrorwatch.alerts -p mirrorwatch.report -p mirrorwatch.doctor -p mirrorwatch.telemetry \
	  -p mirrorwatch.torch
	$(VENV)/bin/mypy tests bench dashboards demo

pytest: install tools
	$(VENV)/bin/pytest

## alerts: regenerate alerts/mirrorwatch.rules.yml from alerts/thresholds.yml and alerts/rules/,
## its PrometheusRule (deploy/kubernetes/prometheusrule.yaml), and the inhibit rules of the
## Alertmanager configurations from alerts/inhibitions.py
alerts: install
	$(PY) -m mirrorwatch.alerts.build
	$(PY) -m mirrorwatch.alerts.kubernetes
	$(PY) -m mirrorwatch.alerts.alertmanager

## dashboards: regenerate dashboards/json/*.json from the Python sources in dashboards/
dashboards: install
	$(PY) -m dashboards.build

## compatibility: regenerate docs/compatibility.md from the driver x board matrix cells
compatibility: install
	$(PY) -m tests.exporter.nvml_standin.compatibility

## metrics: regenerate docs/metrics.md's table of every series from contract/metrics.py
metrics: install
	$(PY) -m tests.contract.metrics_doc

## bench: benchmarks; results land in build/bench/results/*.json (BENCH_OUT=bench/results
## replaces the committed ones). The side-by-side with nvitop-exporter installs it into its own
## environment (never .venv) and runs Debian's Prometheus against both.
NVITOP_VENV ?= build/bench/nvitop-venv
BENCH_OUT ?= build/bench/results
bench: install tools
	@mkdir -p $(BENCH_OUT)
	$(PY) bench/exporter_bench.py --out $(BENCH_OUT)/exporter.json
	$(PY) bench/tls_bench.py --out $(BENCH_OUT)/tls.json
	@test -x $(NVITOP_VENV)/bin/nvitop-exporter || { $(PYTHON) -m venv $(NVITOP_VENV) \
	  && $(NVITOP_VENV)/bin/python -m pip --disable-pip-version-check -q install \
	  nvitop-exporter==1.7.2; }
	$(PY) bench/peers_bench.py --nvitop $(NVITOP_VENV)/bin/nvitop-exporter \
	  --out $(BENCH_OUT)/peers.json
	$(PY) bench/rss_bench.py --out $(BENCH_OUT)/rss.json
	$(PY) bench/nvml_calls.py --nvitop $(NVITOP_VENV)/bin/nvitop-exporter \
	  --out $(BENCH_OUT)/nvml-calls.json
	$(PY) bench/trainer_bench.py --out $(BENCH_OUT)/trainer.json
	$(PY) bench/torch_bench.py --out $(BENCH_OUT)/torch.json
	$(PY) bench/import_bench.py --out $(BENCH_OUT)/import.json
	$(PY) bench/ingest_bench.py --out $(BENCH_OUT)/ingest.json
	$(PY) bench/limits_bench.py --out $(BENCH_OUT)/limits.json
	$(PY) bench/soak_bench.py --out $(BENCH_OUT)/soak.json
	$(PY) bench/scale_bench.py --out $(BENCH_OUT)/scale.json
	$(PY) bench/doctor_bench.py --out $(BENCH_OUT)/doctor.json

## demo: exporter (simulated dual-GPU host), trainer on 2 CPU replicas, Prometheus, Alertmanager
## and a receiver printing each notification; SCENARIO=name picks the scenario; Ctrl-C stops it
demo: demo-install demo-tools
	@echo "demo setup 3/3: starting the pipeline"
	@$(PY) -m demo --scenario $(SCENARIO) --exporter $(EXPORTER_LISTEN) \
	  --prometheus $(PROMETHEUS_LISTEN) --alertmanager $(ALERTMANAGER_LISTEN) \
	  --receiver $(RECEIVER_LISTEN)

## report: the run report of the running demo's run, from its Prometheus (found by itself;
## RUN=, SINCE=, REPORT_OUT= and PROMETHEUS_LISTEN= change what and where)
report: demo-install
	@$(PY) -m demo.report $(if $(RUN),--run=$(RUN)) $(if $(SINCE),--since=$(SINCE)) \
	  $(if $(REPORT_OUT),--out=$(REPORT_OUT)) \
	  $(if $(filter command line environment,$(origin PROMETHEUS_LISTEN)),--prometheus=http://$(PROMETHEUS_LISTEN))

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
