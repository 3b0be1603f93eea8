"""A real two-rank DistributedDataParallel run on CPU (gloo), through the real exporter and
Prometheus, into a report: ideal speed-up over both ranks, exact steps and examples, and no
GPU finding pinned on a run that reported no GPUs.

The ranks' replicas carry a bus id that no GPU of the simulated host has: the exporter maps
them to no GPU, as for CPU ranks or a missing mapping. The run is a few hundred steps of a tiny
model, seconds long: its first pushes and its last must all be counted.
"""

from __future__ import annotations

import json
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
from mirrorwatch.exporter.vocabulary import Address
from tests.ports import free_port
from tests.report.stack import prometheus_config

STEPS = 300
RANKS = 2
NO_GPU_BUS_ID = "0000:ff:1f.7"  # no simulated GPU sits there
REPORT = str(Path(sys.executable).with_name("mirrorwatch-report"))


@dataclass(frozen=True)
class DdpReport:
    ranks: list[dict[str, Any]]  # what each rank says it did
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


@pytest.fixture(scope="module")
def ddp_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DdpReport]:
    workdir = tmp_path_factory.mktemp("ddp-report")
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
        command = [sys.executable, "-m", "tests.torch_monitor.ddp_fit", "--url", exporter.url]
        command += ["--bus-ids", NO_GPU_BUS_ID, "--steps", str(STEPS), "--out", str(workdir)]
        job = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert job.returncode == 0, job.stderr[-4000:]
        ranks = [json.loads((workdir / f"rank-{r}.json").read_text()) for r in range(RANKS)]
        run = ranks[0]["run"]
        _wait_for_final_scrapes(prometheus.url, run, STEPS, time.monotonic() + 60)
        out = workdir / "report"
        args = ["--prometheus", prometheus.url, "--run", run, "--since", "10m", "--out", str(out)]
        result = subprocess.run(
            [REPORT, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        yield DdpReport(ranks, json.loads((out / "findings.json").read_text()), out)


def test_a_two_rank_ddp_run_has_an_ideal_of_2x(ddp_report: DdpReport) -> None:
    assert ddp_report.headline["ideal_speedup"] == 2
    page = (ddp_report.out / "report.html").read_text(encoding="utf-8")
    assert "speed-up of 2x ideal" in page
    assert f"<b>{STEPS}</b><span>steps</span>" in page


def test_its_steps_are_counted_once_per_synchronous_step_exactly(ddp_report: DdpReport) -> None:
    assert [r["steps"] for r in ddp_report.ranks] == [STEPS] * RANKS
    assert ddp_report.headline["steps"] == STEPS


def test_its_examples_are_summed_over_the_ranks_exactly(ddp_report: DdpReport) -> None:
    assert ddp_report.headline["examples"] == sum(r["examples"] for r in ddp_report.ranks)


def test_a_run_without_gpus_has_no_gpu_finding_pinned_on_it(ddp_report: DdpReport) -> None:
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
