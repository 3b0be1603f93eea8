"""`straggler`: GPU 1 computes slower for no reason the driver reports. In the synchronous step
GPU 0 waits for it inside the all-reduce and reads busy too, so utilisation stays balanced and
GpuUtilizationImbalance stays quiet, while TrainingHeldBack names GPU 1 and what it costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorwatch.alerts import recorded
from mirrorwatch.alerts.rules.costs import COST_5M
from tests.e2e.drill import FastRules, running_drill, synthetic_training

RUN = "e2e-straggler"
# GPU 1 slows from 10 s; the 1-minute power means settle within a minute; `for:` 10 s.
DEADLINE_SECONDS = 150


def test_a_straggler_pages_training_held_back_while_utilisation_stays_balanced(
    fast_rules: FastRules, tmp_path: Path
) -> None:
    with running_drill("straggler", fast_rules, tmp_path) as drill:
        gpus = drill.gpus()
        with synthetic_training(drill, RUN):
            _, alert = drill.wait_alert(
                "TrainingHeldBack", DEADLINE_SECONDS, run=RUN, cause="straggler"
            )
            spread = drill.query(f'{recorded.RUN_SPREAD}{{run="{RUN}"}}')
            costs = drill.query(f'{COST_5M}{{run="{RUN}",cause="straggler",gpu="1"}}')
            # The report at one instant reads the alert's own series: the same figure.
            reported = drill.report_live_cost(RUN, "straggler", "1", tmp_path / "report")

        assert (alert.labels["gpu"], alert.labels["uuid"]) == ("1", gpus[1]["uuid"])
        assert spread, "no utilisation spread recorded for the run"
        assert float(spread[0]["value"][1]) <= 0.05, spread
        assert costs, "no live straggler cost for GPU 1"
        assert 0.05 <= float(costs[0]["value"][1]) < 0.2, costs
        imbalance = [a for a in drill.summary() if "GpuUtilizationImbalance" in a]
        assert imbalance == []
        assert reported.finding["gpu"] == "1"
        assert reported.recorded is not None
        assert reported.quoted == pytest.approx(reported.recorded, abs=1e-3)
