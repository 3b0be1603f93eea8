"""Every dashboard query answers with data from a real Prometheus scraping simulated hosts.

One Prometheus (Debian's binary) scrapes two simulated dual-GPU exporters every second, one
job per scenario, with the project's recording and alerting rules evaluated every second.
Each exporter gets a training run through the ingest API, pushed every second. Panels that
are legitimately empty on a healthy host are listed in FILLED_BY with the scenario that fills
them, and checked there.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE
from mirrorwatch.exporter.ingest.schema import (
    Scaling,
)
from tests.dashboards.queries import (
    ANNOTATION,
    RULES,
    Target,
    all_targets,
    expand,
    label_values,
    load_dashboards,
    query_variables,
)
from tests.exporter.exporter_process import RunningExporter, running_exporter
from tests.exporter.ingest_snapshots import steady_training
from tests.ports import free_port

SCENARIOS = ("healthy", "xid", "foreign-process", "mig")
# $__rate_interval as Grafana computes it for a 1 s scrape interval is 4 s; a little more
# keeps the check independent of scrape jitter.
RATE_INTERVAL = "10s"
RATE_INTERVAL_MS = "10000"
# What a healthy host leaves empty, and the scenario that fills it.
FILLED_BY: dict[tuple[str, str], str] = {
    ("GPU host", "XID errors"): "xid",
    # MIG devices: an A100 with MIG on (sparse GPU instances) beside a GPU with MIG off.
    ("GPU host", "MIG devices"): "mig",
    ("GPU host", "Firing alerts"): "xid",
    ("Training balance", "Firing alerts"): "xid",
    ("Fleet", "Firing alerts"): "xid",
    ("GPU host", ANNOTATION): "xid",
    ("Training balance", ANNOTATION): "xid",
    ("Fleet", ANNOTATION): "xid",
    # GPM and process lists: a simulated Hopper host with a stray process from 10 s.
    **{
        ("GPU host", panel): "foreign-process"
        for panel in (
            "Processes per GPU",
            "Process memory (top N)",
            "Process SM share",
            "SM activity against utilisation (GPM)",
            "SM occupancy, tensor and DRAM activity (GPM)",
        )
    },
    **{
        ("Training balance", panel): "foreign-process"
        for panel in (
            "SM activity against utilisation (GPM)",
            "Foreign processes on the run's GPUs",
            "Foreign process memory",
        )
    },
}
STEP_SECONDS = 0.04
PROMETHEUS_START_SECONDS = 30
# XID 43 comes 20 s after the xid exporter starts; GpuXidError fires on it at once.
DATA_DEADLINE_SECONDS = 60


def job(scenario: str) -> str:
    return f"mirrorwatch-{scenario}"


def run_name(scenario: str) -> str:
    return f"run-{scenario}"


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail(
            "prometheus is not installed: run `make tools` (Debian package prometheus)",
            pytrace=False,
        )
    return path


@dataclass
class Stack:
    prometheus: str
    exporters: dict[str, RunningExporter]
    # When the exporters started: a range from then holds every event of their scenarios.
    began: float

    def query_range(self, expr: str, seconds: int = 20) -> list[dict[str, Any]]:
        end = time.time()
        response = httpx.get(
            f"{self.prometheus}/api/v1/query_range",
            params={"query": expr, "start": end - seconds, "end": end, "step": 1},
            timeout=10,
        )
        body = response.json()
        assert response.status_code == 200, f"{expr}: {body}"
        assert body["status"] == "success", f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def series(self, selector: str) -> list[dict[str, str]]:
        response = httpx.get(
            f"{self.prometheus}/api/v1/series",
            params={"match[]": selector, "start": time.time() - 60},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        result: list[dict[str, str]] = response.json()["data"]
        return result


def snapshot(exporter: RunningExporter, sequence: int) -> str:
    """A worker's cumulative state after ``sequence`` seconds of 25 steps/s on both GPUs, from
    a host-namespace pid no simulated process has (so a scenario's processes are foreign)."""
    body = json.loads(training(exporter, sequence))
    return json.dumps({**body, "pid": os.getpid(), "pid_namespace": INIT_PID_NAMESPACE})


def training(exporter: RunningExporter, sequence: int) -> str:
    gpus = httpx.get(f"{exporter.url}/api/v1/gpus", timeout=5).json()["gpus"]
    return steady_training(
        gpus,
        sequence,
        session="dashboards-test",
        model="resnet50",
        steps_per_second=25,
        step_seconds=STEP_SECONDS,
        epoch=1,
        loss=0.5,
        scaling=Scaling(
            speedup=1.7,
            efficiency_ratio=0.85,
            baseline_examples_per_second=940.0,
            examples_per_second=1600.0,
        ),
    )


def push(exporters: dict[str, RunningExporter], sequence: int) -> None:
    for scenario, exporter in exporters.items():
        response = httpx.put(
            f"{exporter.url}/api/v1/runs/{run_name(scenario)}/workers/0",
            content=snapshot(exporter, sequence),
            headers={"Content-Type": "application/json"},
            timeout=5,
        )
        assert response.status_code == 200, response.text


def prometheus_config(tmp: Path, exporters: dict[str, RunningExporter]) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": job(scenario),
                "static_configs": [{"targets": [exporter.url.removeprefix("http://")]}],
            }
            for scenario, exporter in exporters.items()
        ],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def start_prometheus(binary: str, tmp: Path, config: Path, stack: ExitStack) -> str:
    port = free_port()
    log = (tmp / "prometheus.log").open("w", encoding="utf-8")
    stack.callback(log.close)
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)

    stack.callback(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + PROMETHEUS_START_SECONDS
    while True:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited: {(tmp / 'prometheus.log').read_text()}")
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"prometheus not ready in {PROMETHEUS_START_SECONDS} s")
        time.sleep(0.2)


def has_data(stack: Stack) -> bool:
    checks = [
        # The recording rules have run on the training pushes of both hosts...
        'run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m{job="mirrorwatch-healthy"}',
        'run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m{job="mirrorwatch-xid"}',
        # ...the step counter has several samples...
        'rate(mirrorwatch_training_steps_total{job="mirrorwatch-healthy"}[10s]) > 0',
        # ...and the xid host's XID has fired its alert.
        'ALERTS{alertname="GpuXidError", alertstate="firing", job="mirrorwatch-xid"}',
        # ...and the foreign-process host's stray process (from 10 s) is scraped.
        'mirrorwatch_gpu_foreign_processes{job="mirrorwatch-foreign-process"} > 0',
        'run_gpu:mirrorwatch_gpu_sm_activity_ratio:avg1m{job="mirrorwatch-foreign-process"}',
    ]
    return all(stack.query_range(expr, seconds=2) for expr in checks)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binary = prometheus_binary()
    tmp = tmp_path_factory.mktemp("prometheus")
    began = time.time()
    with ExitStack() as exit_stack:
        exporters = {
            scenario: exit_stack.enter_context(running_exporter(["--simulate", scenario]))
            for scenario in SCENARIOS
        }
        sequence = 1
        push(exporters, sequence)
        url = start_prometheus(binary, tmp, prometheus_config(tmp, exporters), exit_stack)
        running = Stack(url, exporters, began)
        deadline = time.monotonic() + DATA_DEADLINE_SECONDS
        while not has_data(running):
            if time.monotonic() > deadline:
                pytest.fail(f"no data in {DATA_DEADLINE_SECONDS} s; see {tmp}/prometheus.log")
            time.sleep(1)
            sequence += 1
            push(exporters, sequence)
        # One more scrape after the last push, so every rate has moved.
        push(exporters, sequence + 1)
        time.sleep(2)
        yield running


def scenario_of(target: Target) -> str:
    return FILLED_BY.get((target.dashboard, target.panel), "healthy")


def values(scenario: str) -> dict[str, str]:
    """The variables as a user would select them to look at that scenario's host."""
    return {
        "__rate_interval": RATE_INTERVAL,
        "__rate_interval_ms": RATE_INTERVAL_MS,
        "job": job(scenario),
        "host": ".*",
        "instance": ".+",
        "run": run_name(scenario),
        "gpu": ".+",
    }


TARGETS = all_targets()


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_every_query_returns_data(stack: Stack, target: Target) -> None:
    scenario = scenario_of(target)
    # Over everything since the exporters started, not the last seconds: a panel that draws
    # an event for a rate interval after it (XID errors) has nothing to draw a minute later,
    # and on a loaded machine this test may run that much after the event.
    since = math.ceil(time.time() - stack.began) + 1
    result = stack.query_range(expand(target.expr, values(scenario)), seconds=since)
    assert result, f"no series under scenario {scenario!r}"


def test_every_filled_by_entry_names_a_real_panel() -> None:
    known = {(t.dashboard, t.panel) for t in TARGETS}
    assert set(FILLED_BY) <= known
    assert set(FILLED_BY.values()) <= set(SCENARIOS)


VARIABLES = [
    (dashboard["title"], variable["name"], variable["query"])
    for dashboard in load_dashboards().values()
    for variable in query_variables(dashboard)
]


@pytest.mark.parametrize(("dashboard", "name", "query"), VARIABLES)
def test_every_variable_offers_values(stack: Stack, dashboard: str, name: str, query: str) -> None:
    selector, label = label_values(query)
    found = {s[label] for s in stack.series(expand(selector, values("healthy"))) if label in s}
    if name == "host":
        # One Prometheus scraping its exporters adds no `host` (only agents' external labels
        # do: tests/fleet/test_shared_instance.py), so the variable offers no value here and
        # its All, `.*`, must match the label's absence: every query above ran with it.
        assert not found, found
        (variable,) = [
            v
            for d in load_dashboards().values()
            if d["title"] == dashboard
            for v in query_variables(d)
            if v["name"] == "host"
        ]
        assert (variable["includeAll"], variable["allValue"]) == (True, ".*")
        return
    assert found, f"{dashboard} ${name}: no values"


def test_the_run_variable_lists_the_pushed_run(stack: Stack) -> None:
    selector = 'mirrorwatch_training_info{job="mirrorwatch-healthy"}'
    assert {s["run"] for s in stack.series(selector)} == {run_name("healthy")}


def test_the_run_joins_its_gpus(stack: Stack) -> None:
    expr = 'run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m{run="run-healthy"}'
    assert {s["metric"]["gpu"] for s in stack.query_range(expr)} == {"0", "1"}
