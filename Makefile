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
# The demo's run id (demo/cli.py names it after the scenario) and where `make report` writes.
RUN ?= demo-$(basename $(notdir $(SCENARIO)))
REPORT_OUT ?= build/demo/report
SINCE ?= 1h

.PHONY: setup tools install test lint typecheck pytest bench demo report alerts dashboards compatibility clean

## setup: the virtual environment with the project and its test tools, plus promtool/amtool
setup: install tools

# tf-keras of the installed tensorflow-cpu's release, without its `tensorflow` requirement (a
# second TensorFlow): the multi-worker trainer and its tests run on it (see pyproject.toml).
$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip "setuptools>=69" wheel
	$(PIP) install -e '.[test]' --config-settings editable_mode=strict
	$(PIP) install --no-deps "tf-keras==$$($(PY) -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')"
	touch $@

# The strict editable install links each source file, so it is refreshed to pick up new modules.
install: $(VENV)/.deps
	$(PIP) install --no-deps -e . --config-settings editable_mode=strict

## tools: Prometheus, Alertmanager (with promtool, amtool), docker-compose, chromium and
## victoria-metrics (vmagent, vmalert: tests/fleet) from Debian, when missing. docker-compose
## (v1, Python) only validates the compose files here: no Docker engine. Chromium renders the
## run report in tests/report.
tools:
	@if ! command -v promtool >/dev/null || ! command -v amtool >/dev/null \
	    || ! command -v prometheus >/dev/null || ! command -v prometheus-alertmanager >/dev/null \
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

## test: lint, type checks and every test (CI runs this)
test: setup lint typecheck pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy -p mirrorwatch.exporter -p mirrorwatch.trainer -p mirrorwatch.alerts \
	  -p mirrorwatch.report -p mirrorwatch.doctor
	$(VENV)/bin/mypy tests bench dashboards demo

pytest: install tools
	$(VENV)/bin/pytest

## alerts: regenerate alerts/mirrorwatch.rules.yml from alerts/thresholds.yml and alerts/rules/,
## and its PrometheusRule (deploy/kubernetes/prometheusrule.yaml)
alerts: install
	$(PY) -m mirrorwatch.alerts.build
	$(PY) -m mirrorwatch.alerts.kubernetes

## dashboards: regenerate dashboards/json/*.json from the Python sources in dashboards/
dashboards: install
	$(PY) -m dashboards.build

## compatibility: regenerate docs/compatibility.md from the driver x board matrix cells
compatibility: install
	$(PY) -m tests.exporter.nvml_standin.compatibility

## bench: benchmarks; results land in bench/results/*.json. The side-by-side with
## nvitop-exporter installs it into its own environment (never .venv) and runs Debian's
## Prometheus against both.
NVITOP_VENV ?= build/bench/nvitop-venv
bench: install tools
	$(PY) bench/exporter_bench.py --out bench/results/exporter.json
	@test -x $(NVITOP_VENV)/bin/nvitop-exporter || { $(PYTHON) -m venv $(NVITOP_VENV) \
	  && $(NVITOP_VENV)/bin/python -m pip --disable-pip-version-check -q install \
	  nvitop-exporter==1.7.2; }
	$(PY) bench/peers_bench.py --nvitop $(NVITOP_VENV)/bin/nvitop-exporter \
	  --out bench/results/peers.json
	$(PY) bench/nvml_calls.py --nvitop $(NVITOP_VENV)/bin/nvitop-exporter \
	  --out bench/results/nvml-calls.json
	$(PY) bench/trainer_bench.py --out bench/results/trainer.json
	$(PY) bench/ingest_bench.py --out bench/results/ingest.json
	$(PY) bench/limits_bench.py --out bench/results/limits.json
	$(PY) bench/soak_bench.py --out bench/results/soak.json
	$(PY) bench/scale_bench.py --out bench/results/scale.json
	$(PY) bench/doctor_bench.py --out bench/results/doctor.json

## demo: exporter (simulated dual-GPU host), trainer on 2 CPU replicas, Prometheus, Alertmanager
## and a receiver printing each notification; SCENARIO=name picks the scenario; Ctrl-C stops it
demo: install tools
	$(PY) -m demo --scenario $(SCENARIO) --exporter $(EXPORTER_LISTEN) \
	  --prometheus $(PROMETHEUS_LISTEN) --alertmanager $(ALERTMANAGER_LISTEN) \
	  --receiver $(RECEIVER_LISTEN)

## report: the run report of the demo's run, from the demo's Prometheus (while `make demo` runs;
## RUN=, SINCE= and REPORT_OUT= change what and where)
report: install
	$(VENV)/bin/mirrorwatch-report --prometheus http://$(PROMETHEUS_LISTEN) --run $(RUN) \
	  --since $(SINCE) --out $(REPORT_OUT)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
