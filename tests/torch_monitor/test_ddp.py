"""A two-process DistributedDataParallel job on CPU (gloo) against the real exporter process.

One job is run for the module (ddp_fit.py: two ranks from torch.multiprocessing, each with its
monitor, its all-reduces timed); each test reads one thing the exporter publishes of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.exporter_process import running_exporter
from tests.hang import HANG_SECONDS
from tests.torch_monitor.ddp_fit import BATCH

STEPS = 40
RANKS = 2


@dataclass(frozen=True)
class DdpRun:
    results: list[dict[str, Any]]  # what each rank says it did
    samples: list[tuple[str, dict[str, str], float]]  # the exporter's training samples
    gpus: list[dict[str, Any]]

    def values(self, name: str) -> dict[tuple[str, str], float]:
        """``{(run, worker): value}`` of the samples called ``name``."""
        return {
            (labels["run"], labels["worker"]): value
            for sample, labels, value in self.samples
            if sample == name
        }


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> DdpRun:
    out = tmp_path_factory.mktemp("ddp")
    with running_exporter(
        ["--simulate", "healthy", "--log-level", "warning"], wait_for="/readyz"
    ) as ex:
        gpus: list[dict[str, Any]] = httpx.get(f"{ex.url}/api/v1/gpus", timeout=5).json()["gpus"]
        bus_ids = ",".join(gpu["pci_bus_id"] for gpu in gpus[:RANKS])
        command = [sys.executable, "-m", "tests.torch_monitor.ddp_fit", "--url", ex.url]
        command += ["--bus-ids", bus_ids, "--steps", str(STEPS), "--out", str(out)]
        job = subprocess.run(command, capture_output=True, text=True, timeout=HANG_SECONDS)
        assert job.returncode == 0, job.stderr[-4000:]
        text = httpx.get(f"{ex.url}/metrics", timeout=5).text
    samples = [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("mirrorwatch_training_")
    ]
    results = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(RANKS)]
    return DdpRun(results, samples, gpus)


def test_two_ranks_are_one_run_of_two_workers_under_rank_0s_run_id(ddp_run: DdpRun) -> None:
    runs = {result["run"] for result in ddp_run.results}
    assert len(runs) == 1  # no run id was given: rank 0's fresh one, broadcast
    [run] = runs
    assert run.startswith("run-")
    workers = ddp_run.values("mirrorwatch_training_steps_total")
    assert sorted(workers) == [(run, "0"), (run, "1")]
    info = {
        labels["worker"]: labels["strategy"]
        for name, labels, _ in ddp_run.samples
        if name == "mirrorwatch_training_info"
    }
    assert info == {"0": "DistributedDataParallel", "1": "DistributedDataParallel"}


def test_each_worker_reports_exact_steps_and_its_own_examples(ddp_run: DdpRun) -> None:
    run = ddp_run.results[0]["run"]
    steps = ddp_run.values("mirrorwatch_training_steps_total")
    examples = ddp_run.values("mirrorwatch_training_examples_total")
    for rank in range(RANKS):
        assert steps[(run, str(rank))] == STEPS
        assert examples[(run, str(rank))] == STEPS * (BATCH + rank)  # rank r: BATCH + r a step


def test_each_worker_has_its_all_reduce_time_and_it_is_below_its_step_time(
    ddp_run: DdpRun,
) -> None:
    count = ddp_run.values("mirrorwatch_training_allreduce_seconds_count")
    total = ddp_run.values("mirrorwatch_training_allreduce_seconds_sum")
    step_count = ddp_run.values("mirrorwatch_training_step_duration_seconds_count")
    step_total = ddp_run.values("mirrorwatch_training_step_duration_seconds_sum")
    assert len(count) == RANKS
    for key in count:
        # Every step all-reduced, and the same steps are timed (the first is in neither).
        assert count[key] == step_count[key] == STEPS - 1
        assert 0 < total[key] / count[key] < step_total[key] / step_count[key]


def test_each_worker_publishes_its_gradients_size(ddp_run: DdpRun) -> None:
    """ddp_fit's model: Linear(32, 64) and Linear(64, 1), weights and biases, float32."""
    sizes = ddp_run.values("mirrorwatch_training_gradient_bytes")
    assert sorted(sizes.values()) == [4 * ((32 * 64 + 64) + (64 * 1 + 1))] * RANKS


def test_each_workers_replica_joins_the_gpu_it_stands_on(ddp_run: DdpRun) -> None:
    joined = {
        labels["worker"]: (labels["replica"], labels["uuid"])
        for name, labels, _ in ddp_run.samples
        if name == "mirrorwatch_training_replica_info"
    }
    assert joined == {str(rank): ("0", ddp_run.gpus[rank]["uuid"]) for rank in range(RANKS)}
