"""Simulated processes that come and go, the foreign-process scenario, and GPM on Hopper only."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorwatch.exporter.simulate.backend import SimulatedBackend, SimulatedGpu
from mirrorwatch.exporter.simulate.scenario import ScenarioError, load_scenario

GIB = 1024.0**3


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def gpus_of(name: str, clock: FakeClock) -> tuple[SimulatedGpu, ...]:
    return tuple(SimulatedBackend(load_scenario(name), clock=clock).gpus())


def pids(gpu: SimulatedGpu) -> list[int]:
    reading = gpu.processes()
    assert reading is not None
    return [process.pid for process in reading.processes]


def test_the_foreign_process_arrives_on_gpu_1_at_10_s_and_stays() -> None:
    clock = FakeClock(9.0)
    first, second = gpus_of("foreign-process", clock)
    assert pids(second) == []
    clock.now = 10.0
    reading = second.processes()
    assert reading is not None
    assert reading.counts == {"compute": 1, "graphics": 0}
    (process,) = reading.processes
    assert (process.pid, process.name, process.type) == (4194817, "python3", "compute")
    assert process.used_memory_bytes == 12 * GIB
    assert process.sm_utilization_ratio == 0.35
    clock.now = 3600.0
    assert pids(second) == [4194817]
    assert pids(first) == []


def test_the_probe_on_gpu_0_comes_and_goes_within_3_s() -> None:
    clock = FakeClock(39.9)
    first, _ = gpus_of("foreign-process", clock)
    assert pids(first) == []
    clock.now = 40.0
    assert pids(first) == [4194900]
    clock.now = 42.9
    assert pids(first) == [4194900]
    clock.now = 43.0
    assert pids(first) == []


def test_the_foreign_process_memory_shows_in_the_gpus_memory_in_use() -> None:
    clock = FakeClock(5.0)
    _, second = gpus_of("foreign-process", clock)
    before = second.memory_bytes()
    clock.now = 20.0
    after = second.memory_bytes()
    assert before is not None
    assert after is not None
    assert after.used - before.used == pytest.approx(12 * GIB, rel=0.01)


def test_gpm_is_read_on_the_simulated_hopper_gpus_as_ratios() -> None:
    clock = FakeClock(30.0)
    activity = []
    for gpu in gpus_of("foreign-process", clock):
        reading = gpu.gpm()
        assert reading is not None
        utilization = gpu.utilization_ratio()
        assert utilization is not None
        # SM activity counts computing SMs; utilisation counts the all-reduce's wait too.
        assert reading.sm_activity_ratio is not None
        assert reading.sm_activity_ratio <= 0.85 * utilization + 1e-9
        activity.append(reading.sm_activity_ratio / utilization)
        for value in (
            reading.sm_occupancy_ratio,
            reading.tensor_activity_ratio,
            reading.dram_activity_ratio,
        ):
            assert value is not None
            assert 0.0 < value < 1.0
    # GPU 1 shares its SMs with the notebook: GPU 0 spends part of each step waiting for it.
    waiting, computing = activity
    assert computing == pytest.approx(0.85, abs=0.01)
    assert waiting < 0.75


def test_an_older_gpu_without_gpm_has_no_gpm_readings(tmp_path: Path) -> None:
    path = tmp_path / "ampere.yaml"
    path.write_text(
        "description: an A100 host\ngpus: {name: NVIDIA A100-SXM4-80GB}\n"
        "workload: {utilization: 0.9}\n",
        encoding="utf-8",
    )
    clock = FakeClock(30.0)
    for gpu in SimulatedBackend(load_scenario(str(path)), clock=clock).gpus():
        assert gpu.gpm() is None


@pytest.mark.parametrize("name", ["healthy", "imbalance", "thermal-throttle"])
def test_built_ins_without_processes_list_none_and_have_no_gpm(name: str) -> None:
    clock = FakeClock(30.0)
    for gpu in gpus_of(name, clock):
        assert gpu.processes() is None
        assert gpu.gpm() is None


def test_an_empty_process_list_counts_zero(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("description: d\nprocesses: []\n", encoding="utf-8")
    gpu = SimulatedBackend(load_scenario(str(path)), clock=FakeClock(1.0)).gpus()[0]
    reading = gpu.processes()
    assert reading is not None
    assert reading.counts == {"compute": 0, "graphics": 0}


def test_a_lost_gpu_lists_no_processes(tmp_path: Path) -> None:
    path = tmp_path / "lost.yaml"
    path.write_text(
        "description: d\nprocesses: [{gpu: 0, pid: 4194400, name: p}]\n"
        "events: [{type: gpu_lost, gpu: 0, at: 1s}]\n",
        encoding="utf-8",
    )
    gpu = SimulatedBackend(load_scenario(str(path)), clock=FakeClock(2.0)).gpus()[0]
    assert gpu.processes() is None


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param(
            "{gpu: 2, pid: 4194400, name: p}",
            "processes[0].gpu: GPU 2 does not exist on a 2-GPU host",
            id="missing-gpu",
        ),
        pytest.param(
            "{gpu: 0, pid: 4242, name: p}",
            "processes[0].pid: input should be greater than or equal to 4194305 (got 4242)",
            id="pid-a-real-process-could-have",
        ),
        pytest.param(
            "{gpu: 0, pid: 4194400, name: p, sm_utilization: 1.5}",
            "processes[0].sm_utilization: input should be less than or equal to 1 (got 1.5)",
            id="share-above-1",
        ),
    ],
)
def test_a_bad_process_is_one_line_naming_its_field(
    tmp_path: Path, entry: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"description: d\nprocesses:\n  - {entry}\n", encoding="utf-8")
    with pytest.raises(ScenarioError) as raised:
        load_scenario(str(path))
    assert str(raised.value) == f"scenario file {path}: {expected}"
