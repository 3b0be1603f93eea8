"""Simulated hosts, one per scenario, scraped every second by one real Prometheus, each with a
training run pushed every second: the ground the report tests stand on."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.stack import (
    RULES,
    Address,
    Process,
    Processes,
    StackError,
    exporter_process,
    find_binary,
    free_port,
    prometheus_process,
)
from mirrorwatch.exporter.ingest.schema import Scaling
from mirrorwatch.exporter.procfs import INIT_PID_NAMESPACE
from tests.exporter.ingest_snapshots import steady_training

# A second GPU that gives 1.6x and not 1.9x: what the trainer reports against its baseline.
SPEEDUP = 1.6
EFFICIENCY = 0.8
STEPS_PER_SECOND = 20
STEP_SECONDS = 0.05


def run_of(scenario: str) -> str:
    return f"report-{scenario}"


@dataclass
class Hosts:
    prometheus: str
    exporters: dict[str, Address]
    started: float

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.prometheus}/api/v1/query", params={"query": expr, "time": at}, timeout=10
        )
        body = response.json()
        assert response.status_code == 200, f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def _snapshot(gpus: Sequence[dict[str, Any]], sequence: int) -> str:
    body = _training(gpus, sequence)
    # A worker in the host PID namespace with this test's pid: no simulated process has it,
    # so a scenario's processes are all foreign to the run (docs/api.md).
    return json.dumps({**json.loads(body), "pid": os.getpid(), "pid_namespace": INIT_PID_NAMESPACE})


def _training(gpus: Sequence[dict[str, Any]], sequence: int) -> str:
    return steady_training(
        gpus,
        sequence,
        session="report-test",
        model="cnn",
        steps_per_second=STEPS_PER_SECOND,
        step_seconds=STEP_SECONDS,
        epoch=1,
        loss=0.4,
        scaling=Scaling(
            speedup=SPEEDUP,
            efficiency_ratio=EFFICIENCY,
            baseline_examples_per_second=800.0,
            examples_per_second=800.0 * SPEEDUP,
        ),
    )


class Pusher(threading.Thread):
    """Pushes each host's run once a second, as the callback would, until stopped."""

    def __init__(self, exporters: dict[str, Address]) -> None:
        super().__init__(daemon=True)
        self.exporters = exporters
        self.halt = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            gpus = {
                name: client.get(f"{a.url}/api/v1/gpus").json()["gpus"]
                for name, a in self.exporters.items()
            }
            sequence = 1
            while not self.halt.is_set():
                for name, address in self.exporters.items():
                    response = client.put(
                        f"{address.url}/api/v1/runs/{run_of(name)}/workers/0",
                        content=_snapshot(gpus[name], sequence),
                        headers={"Content-Type": "application/json"},
                    )
                    if response.status_code != 200:
                        self.errors.append(response.text)
                sequence += 1
                self.halt.wait(1.0)


def prometheus_config(exporters: dict[str, Address]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": f"mirrorwatch-{name}", "static_configs": [{"targets": [str(a)]}]}
            for name, a in exporters.items()
        ],
    }


@contextmanager
def running_hosts(scenarios: Mapping[str, str], workdir: Path, seconds: float) -> Iterator[Hosts]:
    """The hosts (name: built-in scenario or file) and Prometheus, after ``seconds`` of
    training on every host."""
    binary = find_binary("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run `make tools`", pytrace=False)
    exporters = {name: Address("127.0.0.1", free_port()) for name in scenarios}
    prometheus = Address("127.0.0.1", free_port())
    with Processes() as processes:
        try:
            # Started together and waited for after: four exporters start in the time of one.
            started: list[tuple[Process, str]] = []
            for name, address in exporters.items():
                process = exporter_process(workdir / name, scenarios[name], address)
                processes.start(process)
                started.append((process, f"{address.url}/readyz"))
            for process, ready in started:
                process.wait_ready(ready)
            config = prometheus_config(exporters)
            processes.start(
                prometheus_process(binary, workdir, prometheus, config),
                f"{prometheus.url}/-/ready",
            )
        except StackError as error:
            pytest.fail(str(error), pytrace=False)
        began = time.time()
        pusher = Pusher(exporters)
        pusher.start()
        try:
            time.sleep(seconds)
        finally:
            pusher.halt.set()
            pusher.join()
        assert not pusher.errors, pusher.errors[:3]
        time.sleep(1.5)  # one more scrape after the last push
        yield Hosts(prometheus.url, exporters, began)
