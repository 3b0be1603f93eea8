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
  demo-check report report-check last-report alerts dashboards compatibility metrics clean

# A setup step, quiet unless it fails: its output goes to build/setup.log and only the log's end
# is shown, with where the rest is, when the step fails.
SETUP_LOG := build/setup.log
quietly = mkdir -p build && { $(1) ; } >>$(SETUP_LOG) 2>&1 || { tail -n 25 $(SETUP_LOG); \
  echo "make: setup step failed; the whole log is $(SETUP_LOG)"; exit 1; }

## help: this list: one line per target, its first `##` line
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); split($$0, part, ": "); \
	  printf "  make %-14s %s\n", part[1], substr($$0, length(part[1]) + 3) }' $(MAKEFILE_LIST)

## setup: .venv with the project and its test tools, then `make tools`
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
	@echo "demo setup: Python environment $(VENV) with TensorFlow for CPUs (first run only:" \
	  "about 1.6 GB, mostly TensorFlow; minutes; log: $(SETUP_LOG))"
	@$(call quietly,$(PYTHON) -m venv $(VENV))
	@$(call quietly,$(PIP) install --upgrade pip "setuptools>=77" wheel)
	@$(call quietly,$(PIP) install -e '.[demo]' --config-settings editable_mode=strict)
	@touch $@ $(VENV)/.editable  # that install was the editable one: no second refresh

# The strict editable install links each file of the packages, so the demo refreshes it only when
# that set of files changes (a module added or removed), not at every start. The list is
# rewritten only when it differs, so its date says when the set last changed.
PACKAGE_FILES := build/package-files
ifneq ($(filter demo report last-report demo-install,$(MAKECMDGOALS)),)
$(shell mkdir -p build && find exporter trainer alerts report doctor telemetry torch_monitor \
  -type f ! -path '*/__pycache__/*' | LC_ALL=C sort >$(PACKAGE_FILES).new \
  && { cmp -s $(PACKAGE_FILES).new $(PACKAGE_FILES) && rm $(PACKAGE_FILES).new \
  || mv $(PACKAGE_FILES).new $(PACKAGE_FILES); })
endif
$(VENV)/.editable: pyproject.toml $(PACKAGE_FILES) \
  $(if $(wildcard $(VENV)/.deps),$(VENV)/.deps,$(VENV)/.demo-deps)
	@$(call quietly,$(PIP) install --no-deps -e . --config-settings editable_mode=strict)
	@touch $@

demo-install: $(VENV)/.editable

## tools: the Debian packages the tests run (Prometheus, Alertmanager, ...), if missing
# Prometheus, Alertmanager (with promtool, amtool), docker-compose, chromium and victoria-metrics
# (vmagent, vmalert: tests/fleet). docker-compose (v1, Python) only validates the compose files
# here: no Docker engine. Chromium renders the run report in tests/report.
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
	  echo "demo setup: Debian packages prometheus and prometheus-alertmanager (first run only)"; \
	  $(call quietly,apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus prometheus-alertmanager); \
	fi

## test: lint, type checks and every test (CI runs this)
test: setup lint typecheck pytest

## lint: ruff check and ruff format --check over the whole checkout
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

## typecheck: mypy --strict over the packages, tests, bench, dashboards and demo
typecheck: install
	$(VENV)/bin/mypy -p mirrorwatch.contract -p mirrorwatch.exporter -p mirrorwatch.trainer \
	  -p mirrorwatch.alerts -p mirrorwatch.report -p mirrorwatch.doctor -p mirrorwatch.telemetry \
	  -p mirrorwatch.torch
	$(VENV)/bin/mypy tests bench dashboards demo

## pytest: every test (pytest -n 4); .venv/bin/pytest FILE runs one file
pytest: install tools
	$(VENV)/bin/pytest

## alerts: regenerate the rules, their PrometheusRule and Alertmanager's inhibit rules
# alerts/mirrorwatch.rules.yml from alerts/thresholds.yml and alerts/rules/, its PrometheusRule
# (deploy/kubernetes/prometheusrule.yaml), and the inhibit rules of the Alertmanager
# configurations from alerts/inhibitions.py.
alerts: install
	$(PY) -m mirrorwatch.alerts.build
	$(PY) -m mirrorwatch.alerts.kubernetes
	$(PY) -m mirrorwatch.alerts.alertmanager

## dashboards: regenerate dashboards/json/*.json from dashboards/*.py
dashboards: install
	$(PY) -m dashboards.build

## compatibility: regenerate docs/compatibility.md (driver x board matrix)
compatibility: install
	$(PY) -m tests.exporter.nvml_standin.compatibility

## metrics: regenerate docs/metrics.md's table of every series from contract/metrics.py
metrics: install
	$(PY) -m tests.contract.metrics_doc

## bench: benchmarks; results in build/bench/results/ (BENCH_OUT= elsewhere)
# The side-by-side with nvitop-exporter installs it into its own environment (never .venv) and
# runs Debian's Prometheus against both.
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
	$(PY) bench/writer_bench.py --out $(BENCH_OUT)/writer.json
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
	$(PY) bench/doctor_probe_bench.py --out $(BENCH_OUT)/doctor-probe.json

DEMO_ARGS = --scenario=$(SCENARIO) --exporter=$(EXPORTER_LISTEN) \
  --prometheus=$(PROMETHEUS_LISTEN) --alertmanager=$(ALERTMANAGER_LISTEN) \
  --receiver=$(RECEIVER_LISTEN)
REPORT_ARGS = $(if $(RUN),--run=$(RUN)) $(if $(SINCE),--since=$(SINCE)) \
  $(if $(REPORT_OUT),--out=$(REPORT_OUT)) \
  $(if $(filter command line environment,$(origin PROMETHEUS_LISTEN)),--prometheus=$(PROMETHEUS_LISTEN))

# The arguments are checked before anything installs, so a mistake is said in seconds: with the
# .venv of an earlier run (exit 2: a bad argument, said as the user typed it). On the first run
# there is nothing to check with yet, and the command checks them again itself.
check_first = if [ -x $(PY) ]; then said=$$($(PY) -m $(1) --check $(2) 2>&1); \
  if [ $$? -eq 2 ]; then echo "$$said" >&2; exit 2; fi; fi

demo-check:
	@$(call check_first,demo,$(DEMO_ARGS))

report-check:
	@$(call check_first,demo.report,$(REPORT_ARGS))

## demo: the whole pipeline on a simulated dual-GPU host (SCENARIO=name); Ctrl-C stops it
# Exporter, trainer on 2 CPU replicas, Prometheus, Alertmanager and a receiver printing each
# notification (README, "make demo"). The prerequisites run in this order: check, then install.
demo: demo-check demo-install demo-tools
	@echo "demo: starting the pipeline"
	@$(PY) -m demo $(DEMO_ARGS)

## report: a run report of the running demo, now (RUN=, SINCE=, REPORT_OUT= change it)
# The run, its Prometheus and the range come from the running demo (build/demo/state.json);
# RUN=, SINCE=, REPORT_OUT= and PROMETHEUS_LISTEN= replace them.
report: report-check demo-install
	@$(PY) -m demo.report $(REPORT_ARGS)

## last-report: where the newest run report is (the demo's on Ctrl-C, or make report's)
last-report: demo-install
	@$(PY) -m demo.last_report

## clean: remove .venv, build/ and the tools' caches
clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
