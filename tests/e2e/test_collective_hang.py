"""`collective-hang`: from 60 s GPU 1 never reaches the all-reduce and GPU 0 waits in it at
100 % busy and near-idle power. A stand-in worker keeps pushing with its steps frozen there,
as a hung process's telemetry thread does: TrainingHungInCollective names GPU 1 within four
minutes of the start, and TrainingStalled (10 minutes without a step) has not come."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.drill import FastRules, running_drill, synthetic_training

RUN = "e2e-hang"
HANG_AT_SECONDS = 60
DEADLINE_SECONDS = 240


def test_a_hung_collective_pages_naming_the_gpu_that_does_not_wait(
    fast_rules: FastRules, tmp_path: Path
) -> None:
    with running_drill("collective-hang", fast_rules, tmp_path) as drill:
        gpus = drill.gpus()
        with synthetic_training(drill, RUN, frozen_after=HANG_AT_SECONDS):
            _, alert = drill.wait_alert("TrainingHungInCollective", DEADLINE_SECONDS, run=RUN)

        assert alert.labels["severity"] == "critical"
        assert (alert.labels["gpu"], alert.labels["uuid"]) == ("1", gpus[1]["uuid"])
        assert not [a for a in drill.summary() if "TrainingStalled" in a]
