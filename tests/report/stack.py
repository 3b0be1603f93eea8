"""Simulated hosts, one per scenario, scraped every second by one real Prometheus, each with a
synthetic training run (training.py) pushed every second, or more than one (``Run``): the
ground the report tests stand on."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.processes import Process, Processes, StackError
from demo.stack import RULES, exporter_process, find_binary, prometheus_process
from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.exporter.ingest.schema import Scaling
from tests.ports import free_port
from tests.report.training import SyncTraining, reading

# A second GPU that gives 1.6x and not 1.9x: what the trainer reports against its baseline.
SPEEDUP = 1.6
EFFICIENCY = 0.8


def run_of(scenario: str) -> str:
    return f"report-{scenario}"


@dataclass(frozen=True)
class Run:
    """A synthetic run on ``host``: one MirroredStrategy worker, or (``ddp``) one DDP worker per
    GPU that publishes its all-reduce time, as the torch monitor does."""

    host: str
    ddp: bool = False


@dataclass
class Hosts:
    prometheus: str
    exporters: dict[str, Address]
    started: float
    trainings: dict[str, SyncTraining]

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.prometheus}/api/v1/query", params={"query": expr, "time": at}, timeout=10
        )
        body = response.json()
        assert response.status_code == 200, f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


SCALING = Scaling(
    speedup=SPEEDUP,
    efficiency_ratio=EFFICIENCY,
    baseline_examples_per_second=800.0,
    examples_per_second=800.0 * SPEEDUP,
)


def worker_scaling(replicas: int, of: int) -> Scaling:
    """What one worker of ``replicas`` of the run's ``of`` reports: its share of the run's
    throughput against one replica's (the telemetry's `_scaling`), so the workers' speed-ups
    add up to the run's."""
    share = replicas / of
    return Scaling(
        speedup=SPEEDUP * share,
        efficiency_ratio=SPEEDUP * share / replicas,
        baseline_examples_per_second=SCALING.baseline_examples_per_second,
        examples_per_second=SCALING.examples_per_second * share,
    )


# A worker in the host PID namespace with this test's pid: no simulated process has it, so a
# scenario's processes are all foreign to the run (docs/api.md).
WORKER_PID = {"pid": os.getpid(), "pid_namespace": INIT_PID_NAMESPACE}


@dataclass(frozen=True)
class Pause:
    """The exporter process ``pid`` stopped (SIGSTOP) ``at`` seconds into the run, for
    ``seconds``: Prometheus's scrapes of it fail meanwhile, a gap in its telemetry."""

    pid: int
    at: float
    seconds: float


class Pusher(threading.Thread):
    """Trains on each host once a second, as the pace of its GPUs allows, and pushes the run
    as the callback would, until stopped."""

    def __init__(
        self, exporters: dict[str, Address], pauses: Mapping[str, Pause], runs: Mapping[str, Run]
    ) -> None:
        super().__init__(daemon=True)
        self.exporters = exporters
        self.pauses = pauses
        self.runs = runs
        self.halt = threading.Event()
        self.errors: list[str] = []
        self.trainings = {name: SyncTraining(ddp=run.ddp) for name, run in runs.items()}

    def _paused(self, name: str, elapsed: float) -> bool:
        pause = self.pauses.get(name)
        if pause is None:
            return False
        stopped = pause.at <= elapsed < pause.at + pause.seconds
        os.kill(pause.pid, signal.SIGSTOP if stopped else signal.SIGCONT)
        return stopped

    def _push(
        self,
        client: httpx.Client,
        address: Address,
        run: str,
        training: SyncTraining,
        gpus: list[dict[str, Any]],
        sequence: int,
    ) -> None:
        step = training.advance(time.time(), [reading(g) for g in gpus])
        for worker, mine in training.workers(gpus):
            response = client.put(
                f"{address.url}/api/v1/runs/{run_of(run)}/workers/{worker}",
                content=training.snapshot(
                    gpus, sequence, step, worker_scaling(len(mine), len(gpus)), WORKER_PID, worker
                ),
                headers={"Content-Type": "application/json"},
            )
            if response.status_code != 200:
                self.errors.append(response.text)

    def run(self) -> None:
        began = time.time()
        with httpx.Client(timeout=5) as client:
            sequence = 1
            while not self.halt.is_set():
                for name, address in self.exporters.items():
                    if self._paused(name, time.time() - began):
                        continue
                    gpus = client.get(f"{address.url}/api/v1/gpus").json()["gpus"]
                    for run, training in self.trainings.items():
                        if self.runs[run].host == name:
                            self._push(client, address, run, training, gpus, sequence)
                sequence += 1
                # Once a second on the second, however long the pushes took.
                self.halt.wait(1.0 - (time.time() - began) % 1.0)
        for pause in self.pauses.values():
            os.kill(pause.pid, signal.SIGCONT)


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
def running_hosts(
    scenarios: Mapping[str, str],
    workdir: Path,
    seconds: float,
    gaps: Mapping[str, tuple[float, float]] | None = None,
    runs: Mapping[str, Run] | None = None,
) -> Iterator[Hosts]:
    """The hosts (name: built-in scenario or file) and Prometheus, after ``seconds`` of
    training on every host; ``gaps`` stop a host's exporter (name: (at, seconds)). Each host
    has one run of its name (``run_of``), besides ``runs`` (name: where and how it trains)."""
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
            pauses = {}
            for (process, _), name in zip(started, exporters, strict=True):
                if name in (gaps or {}) and process.pid is not None:
                    pauses[name] = Pause(process.pid, *(gaps or {})[name])
            config = prometheus_config(exporters)
            processes.start(
                prometheus_process(binary, workdir, prometheus, config),
                f"{prometheus.url}/-/ready",
            )
        except StackError as error:
            pytest.fail(str(error), pytrace=False)
        began = time.time()
        every = {name: Run(name) for name in scenarios} | dict(runs or {})
        pusher = Pusher(exporters, pauses, every)
        pusher.start()
        try:
            time.sleep(seconds)
        finally:
            pusher.halt.set()
            pusher.join()
        assert not pusher.errors, pusher.errors[:3]
        time.sleep(1.5)  # one more scrape after the last push
        yield Hosts(prometheus.url, exporters, began, pusher.trainings)
