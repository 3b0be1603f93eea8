"""A real two-rank DistributedDataParallel run on CPU (gloo) and a real two-worker
MultiWorkerMirroredStrategy run (tf_keras), through the real exporter and Prometheus, into
reports: ideal speed-up over every worker's replicas, exact steps and examples, and no GPU
finding pinned on a run that reported no GPUs.

The ranks' replicas carry a bus id that no GPU of the simulated host has: the exporter maps
them to no GPU, as for CPU ranks or a missing mapping. The run is a few hundred steps of a tiny
model, seconds long: its first pushes and its last must all be counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.processes import Processes, StackError
from demo.stack import exporter_process, find_binary, prometheus_process
from mirrorwatch.contract.vocabulary import Address
from tests.ports import free_port
from tests.report.stack import prometheus_config

STEPS = 300
RANKS = 2
NO_GPU_BUS_ID = "0000:ff:1f.7"  # no simulated GPU sits there
REPORT = str(Path(sys.executable).with_name("mirrorwatch-report"))


@dataclass(frozen=True)
class RunReport:
    ranks: list[dict[str, Any]]  # what each rank (worker) says it did
    data: dict[str, Any]
    out: Path

    @property
    def headline(self) -> dict[str, Any]:
        headline: dict[str, Any] = self.data["headline"]
        return headline


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _wait_for_final_scrapes(prometheus: str, run: str, steps: int, deadline: float) -> None:
    """Until Prometheus holds each rank's final totals and four samples of each (a range
    of over two seconds): polled, so the test waits as long as the scrapes take."""
    selector = f'mirrorwatch_training_steps_total{{run="{run}"}}'
    while time.monotonic() < deadline:
        finals = _query(prometheus, f"max_over_time({selector}[5m]) == {steps}")
        counts = _query(prometheus, f"count_over_time({selector}[5m]) >= 4")
        if len(finals) == RANKS and len(counts) == RANKS:
            return
        time.sleep(0.2)
    pytest.fail(f"Prometheus never held {steps} steps of both ranks of {run}")


@dataclass(frozen=True)
class Stack:
    exporter: str
    prometheus: str
    workdir: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One simulated host's exporter, scraped every second by a real Prometheus."""
    workdir = tmp_path_factory.mktemp("framework-report")
    binary = find_binary("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run `make tools`", pytrace=False)
    exporter, prometheus = Address("127.0.0.1", free_port()), Address("127.0.0.1", free_port())
    with Processes() as processes:
        try:
            processes.start(
                exporter_process(workdir / "host", "healthy", exporter), f"{exporter.url}/readyz"
            )
            processes.start(
                prometheus_process(
                    binary, workdir, prometheus, prometheus_config({"host": exporter})
                ),
                f"{prometheus.url}/-/ready",
            )
        except StackError as error:
            pytest.fail(str(error), pytrace=False)
        yield Stack(exporter.url, prometheus.url, workdir)


def _report(stack: Stack, run: str, steps: int, ranks: list[dict[str, Any]]) -> RunReport:
    _wait_for_final_scrapes(stack.prometheus, run, steps, time.monotonic() + 60)
    out = stack.workdir / f"report-{run}"
    args = ["--prometheus", stack.prometheus, "--run", run, "--since", "10m", "--out", str(out)]
    result = subprocess.run([REPORT, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return RunReport(ranks, json.loads((out / "findings.json").read_text()), out)


@pytest.fixture(scope="module")
def ddp_report(stack: Stack) -> RunReport:
    out = stack.workdir / "ddp"
    out.mkdir()
    command = [sys.executable, "-m", "tests.torch_monitor.ddp_fit", "--url", stack.exporter]
    command += ["--bus-ids", NO_GPU_BUS_ID, "--steps", str(STEPS), "--out", str(out)]
    job = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert job.returncode == 0, job.stderr[-4000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(RANKS)]
    return _report(stack, ranks[0]["run"], STEPS, ranks)


@pytest.fixture(scope="module")
def slow_rank_report(stack: Stack) -> RunReport:
    """Two DDP ranks on the simulated host's GPUs 0 and 1, rank 1 slower to compute each step:
    rank 0 waits for it in every all-reduce, which its monitor times."""
    out = stack.workdir / "slow-rank"
    out.mkdir()
    gpus = httpx.get(f"{stack.exporter}/api/v1/gpus", timeout=5).json()["gpus"]
    bus_ids = ",".join(gpu["pci_bus_id"] for gpu in gpus[:RANKS])
    command = [sys.executable, "-m", "tests.torch_monitor.ddp_fit", "--url", stack.exporter]
    command += ["--bus-ids", bus_ids, "--steps", str(STEPS), "--out", str(out)]
    command += ["--slow-rank", "1", "--slow-seconds", "0.02"]
    job = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert job.returncode == 0, job.stderr[-4000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(RANKS)]
    return _report(stack, ranks[0]["run"], STEPS, ranks)


@pytest.fixture(scope="module")
def mwms_report(stack: Stack) -> RunReport:
    """Two MultiWorkerMirroredStrategy workers (tf_keras, loopback gRPC) of one CPU replica
    each, both pushing to the host's exporter (tests/trainer/multi_worker_fit.py)."""
    from tests.trainer.multi_worker_fit import BATCH
    from tests.trainer.multi_worker_fit import STEPS as FIT_STEPS

    cluster = [f"127.0.0.1:{free_port()}" for _ in range(RANKS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIRRORWATCH_", "TF_"))}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.trainer.multi_worker_fit", stack.exporter],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env
            | {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": i}}
                )
            },
        )
        for i in range(RANKS)
    ]
    outputs = [worker.communicate(timeout=180) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]
    ranks = [{"steps": FIT_STEPS, "examples": FIT_STEPS * BATCH // RANKS} for _ in range(RANKS)]
    return _report(stack, "multi-worker", FIT_STEPS, ranks)


def test_a_two_rank_ddp_run_has_an_ideal_of_2x(ddp_report: RunReport) -> None:
    assert ddp_report.headline["ideal_speedup"] == 2
    page = (ddp_report.out / "report.html").read_text(encoding="utf-8")
    assert "speed-up of 2x ideal" in page
    assert f"<b>{STEPS}</b><span>steps</span>" in page


def test_its_steps_are_counted_once_per_synchronous_step_exactly(ddp_report: RunReport) -> None:
    assert [r["steps"] for r in ddp_report.ranks] == [STEPS] * RANKS
    assert ddp_report.headline["steps"] == STEPS


def test_its_examples_are_summed_over_the_ranks_exactly(ddp_report: RunReport) -> None:
    assert ddp_report.headline["examples"] == sum(r["examples"] for r in ddp_report.ranks)


def test_a_run_without_gpus_has_no_gpu_finding_pinned_on_it(ddp_report: RunReport) -> None:
    headline = ddp_report.headline
    assert headline["gpus_reported"] is False
    assert "mean_utilization" not in headline["queries"]
    # The simulated host's GPUs were looked at, and their findings kept apart.
    assert [g["gpu"] for g in headline["gpus"]]
    assert all(f["kind"] in ("none", "telemetry_gap") for f in ddp_report.data["findings"])
    page = unescape((ddp_report.out / "report.html").read_text(encoding="utf-8"))
    assert "No GPUs reported:" in page
    assert "reported no GPU of its own" in page
    assert "Nothing wrong found" not in page


def test_a_two_worker_multi_worker_run_has_an_ideal_of_2x(mwms_report: RunReport) -> None:
    assert mwms_report.headline["ideal_speedup"] == 2


def test_a_multi_worker_run_counts_its_steps_once_and_sums_its_examples(
    mwms_report: RunReport,
) -> None:
    steps = mwms_report.ranks[0]["steps"]
    assert mwms_report.headline["steps"] == steps
    assert mwms_report.headline["examples"] == sum(r["examples"] for r in mwms_report.ranks)


def test_a_multi_worker_run_on_cpus_has_no_gpu_pinned_on_it(mwms_report: RunReport) -> None:
    assert mwms_report.headline["gpus_reported"] is False
    assert all(f["kind"] in ("none", "telemetry_gap") for f in mwms_report.data["findings"])


def test_a_ddp_rank_slower_to_compute_is_the_straggler_by_its_measured_all_reduce_wait(
    slow_rank_report: RunReport,
) -> None:
    """Rank 1 (GPU 1) computes 20 ms longer a step; rank 0 waits that long in each all-reduce.
    The live straggler cost names GPU 1 by the workers' measured all-reduce shares (the rules'
    measured method: the others' share beyond the straggler's), and the report reads it."""
    found = [f for f in slow_rank_report.data["findings"] if f["kind"] == "straggler"]
    assert [f["gpu"] for f in found] == ["1"], slow_rank_report.data["findings"]
    cost = found[0]["cost"]
    assert cost is not None
    assert cost["fraction"] >= 0.05
    assert cost["low"] <= cost["fraction"] <= cost["high"] <= 1
    assert "waited for in the all-reduce" in found[0]["summary"]
    # The measured share, not the power estimate: no simulated GPU of a healthy pair draws
    # anywhere near the 5% it would take.
    figures = {f["name"]: f["value"] for f in found[0]["evidence"]["figures"]}
    assert figures["mean straggler cost"] == pytest.approx(cost["fraction"], abs=1e-4)
