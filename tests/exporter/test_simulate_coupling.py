"""The coupled simulator: the GPUs of one synchronous run, as NVML reads them second by second.

What the tests hold the simulator to is the contract's physics ("Synchronous training"): a
GPU that arrives first waits inside the all-reduce kernel and reads busy at near-idle power
(NVIDIA/nccl#968, cupy#3557, nccl#257), so a GPU slow at compute keeps its peers "busy" and
a starved GPU is the one whose utilisation falls.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from mirrorwatch.exporter.simulate.backend import SimulatedBackend
from mirrorwatch.exporter.simulate.scenario import Scenario, ScenarioError, load_scenario


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def readings(scenario: str | Scenario, seconds: range) -> list[list[tuple[float, float]]]:
    """(utilisation, power) of each GPU at the middle of each second of ``seconds``."""
    loaded = load_scenario(scenario) if isinstance(scenario, str) else scenario
    clock = FakeClock(0.0)
    gpus = SimulatedBackend(loaded, clock=clock).gpus()
    rows = []
    for second in seconds:
        clock.now = second + 0.5
        row = []
        for gpu in gpus:
            utilization, power = gpu.utilization_ratio(), gpu.power_watts()
            assert utilization is not None
            assert power is not None
            row.append((utilization, power))
        rows.append(row)
    return rows


def means(rows: list[list[tuple[float, float]]], gpu: int) -> tuple[float, float]:
    return (
        statistics.fmean(row[gpu][0] for row in rows),
        statistics.fmean(row[gpu][1] for row in rows),
    )


def test_under_thermal_throttle_gpu_0_waits_busy_at_clearly_less_power() -> None:
    before = readings("thermal-throttle", range(0, 5))
    after = readings("thermal-throttle", range(60, 120))
    _, power_before = means(before, 0)
    busy_after, power_after = means(after, 0)
    assert busy_after >= 0.9
    assert power_after <= 0.9 * power_before
    # Utilisation stays balanced: the throttled GPU is not the one that lags.
    assert abs(means(after, 1)[0] - busy_after) < 0.05


def test_a_straggler_keeps_utilisation_balanced_while_its_peer_draws_less() -> None:
    rows = readings("straggler", range(60, 120))
    (busy_0, power_0), (busy_1, power_1) = means(rows, 0), means(rows, 1)
    assert abs(busy_0 - busy_1) < 0.05
    assert min(busy_0, busy_1) >= 0.9
    assert power_0 < 0.95 * power_1


def test_a_starved_gpu_lags_while_its_peer_waits_busy() -> None:
    rows = readings("imbalance", range(60, 120))
    (busy_0, _), (busy_1, _) = means(rows, 0), means(rows, 1)
    assert busy_0 >= 0.9
    assert busy_0 - busy_1 > 0.05


def test_in_a_hung_collective_the_culprit_is_idle_and_its_peer_waits_at_idle_power() -> None:
    scenario = load_scenario("collective-hang")
    limit = scenario.gpus.power_limit_watts
    for row in readings(scenario, range(61, 70)):
        (busy_0, power_0), (busy_1, _) = row
        assert busy_0 >= 0.9
        assert power_0 <= 0.3 * limit
        assert busy_1 == 0.0
    for row in readings(scenario, range(0, 5)):
        assert row[0][1] > 0.5 * limit


def test_a_healthy_pair_reads_as_before_coupling() -> None:
    rows = readings("healthy", range(0, 120))
    for gpu in (0, 1):
        busy, power = means(rows, gpu)
        assert busy == pytest.approx(0.95, abs=0.01)
        assert power == pytest.approx(0.92 * 700 * 0.95 + 70 * 0.05, rel=0.03)


def test_training_null_leaves_the_gpus_independent() -> None:
    coupled = load_scenario("thermal-throttle")
    independent = coupled.model_copy(update={"training": None})
    rows = readings(independent, range(60, 120))
    assert means(rows, 0)[1] == pytest.approx(means(readings(coupled, range(0, 5)), 0)[1], rel=0.03)


def test_a_run_gpu_the_host_lacks_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("description: d\ntraining: {gpus: [0, 5]}\n")
    with pytest.raises(ScenarioError, match=r"training\.gpus\[1\]"):
        SimulatedBackend(load_scenario(str(path)))
