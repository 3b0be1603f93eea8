"""A Lightning DDP fit on CPU with accumulation and validation, against the real exporter.

One two-rank fit (tests/torch_monitor/lightning_ddp_fit.py) for the module; each test reads one
thing the exporter publishes of it, exactly.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.exporter.exporter_process import running_exporter
from tests.hang import HANG_SECONDS
from tests.telemetry.published import Samples, training_samples, value
from tests.torch_monitor import lightning_ddp_fit as job

RUN = "lightning-ddp"
PER_RANK = job.EXAMPLES // job.RANKS  # 50: six batches of 8 and one of 2
BATCHES = math.ceil(PER_RANK / job.BATCH)
# Lightning steps the optimizer after every ACCUMULATE batches and at the epoch's last batch.
STEPS = job.EPOCHS * math.ceil(BATCHES / job.ACCUMULATE)


GPUS: list[dict[str, Any]] = []  # the simulated GPUs the ranks stand on, rank by rank


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Samples]]:
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    with running_exporter(
        ["--simulate", "healthy", "--log-level", "warning"], wait_for="/readyz"
    ) as exporter:
        GPUS[:] = httpx.get(f"{exporter.url}/api/v1/gpus", timeout=5).json()["gpus"][: job.RANKS]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MIRRORWATCH_")}
        # One id per rank, the same list on every rank, as the README tells torchrun users.
        env["MIRRORWATCH_REPLICA_PCI_BUS_IDS"] = ",".join(gpu["pci_bus_id"] for gpu in GPUS)
        fit = subprocess.run(
            [sys.executable, "-m", "tests.torch_monitor.lightning_ddp_fit", exporter.url, RUN,
             str(checkpoints)],
            capture_output=True, text=True, timeout=HANG_SECONDS, cwd=Path(__file__).parents[2],
            env=env,
        )  # fmt: skip
        assert fit.returncode == 0, fit.stderr[-4000:]
        yield {
            str(rank): training_samples(exporter.url, RUN, str(rank)) for rank in range(job.RANKS)
        }


def test_each_rank_is_a_worker_of_one_run_and_ends_inactive(workers: dict[str, Samples]) -> None:
    assert all(value(samples, "mirrorwatch_training_active") == 0 for samples in workers.values())
    assert sorted(workers) == ["0", "1"]


def test_each_rank_reports_its_optimizer_steps_and_the_examples_of_every_batch(
    workers: dict[str, Samples],
) -> None:
    for samples in workers.values():
        assert value(samples, "mirrorwatch_training_steps_total") == STEPS
        assert value(samples, "mirrorwatch_training_examples_total") == job.EPOCHS * PER_RANK
    total = sum(value(s, "mirrorwatch_training_examples_total") for s in workers.values())
    assert total == job.EPOCHS * job.EXAMPLES


def test_the_global_batch_is_per_device_batch_times_world_size_times_accumulation(
    workers: dict[str, Samples],
) -> None:
    for samples in workers.values():
        batch = value(samples, "mirrorwatch_training_global_batch_size")
        assert batch == job.BATCH * job.RANKS * job.ACCUMULATE
        assert value(samples, "mirrorwatch_training_epoch") == job.EPOCHS - 1


def test_validation_sanity_check_and_checkpoint_time_are_in_no_step(
    workers: dict[str, Samples],
) -> None:
    for samples in workers.values():
        count = value(samples, "mirrorwatch_training_step_duration_seconds_count")
        # Every step timed, from its first batch's start; none held a 1.2 s pause.
        under = {dict(labels)["le"]: v for (name, labels), v in samples.items()
                 if name == "mirrorwatch_training_step_duration_seconds_bucket"}  # fmt: skip
        assert count == STEPS
        assert under["1.0"] == STEPS


def test_each_rank_stands_on_the_gpu_its_local_rank_picks_from_the_list(
    workers: dict[str, Samples],
) -> None:
    for rank, samples in workers.items():
        [joined] = [dict(labels) for (name, labels), _ in samples.items()
                    if name == "mirrorwatch_training_replica_info"]  # fmt: skip
        assert (joined["replica"], joined["uuid"]) == ("0", GPUS[int(rank)]["uuid"])
