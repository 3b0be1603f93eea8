"""The simulated backend: NVML's interface, deterministic readings, and integrating counters."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mirrorwatch.contract import causes
from mirrorwatch.exporter.backend import (
    CLOCKS,
    CLOCKS_EVENT_REASONS,
    ECC_ERROR_TYPES,
    NVLINK_ERROR_TYPES,
    TEMPERATURE_THRESHOLDS,
    THROTTLE_REASONS,
    GpuBackend,
    GpuDevice,
    MemoryBytes,
    PcieLink,
)
from mirrorwatch.exporter.simulate.backend import SimulatedBackend, SimulatedGpu
from mirrorwatch.exporter.simulate.physics import GpuPhysics
from mirrorwatch.exporter.simulate.scenario import Scenario, ScenarioError, load_scenario


class FakeClock:
    """Seconds since the scenario started, set by the test."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def scenario_from(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return load_scenario(str(path))


def backend_at(scenario: Scenario | str, now: float = 0.0) -> tuple[SimulatedBackend, FakeClock]:
    clock = FakeClock(now)
    loaded = load_scenario(scenario) if isinstance(scenario, str) else scenario
    return SimulatedBackend(loaded, clock=clock), clock


def readings(gpu: GpuDevice) -> dict[str, Any]:
    """Every reading of the GpuDevice interface, by method (and argument)."""
    values: dict[str, Any] = {
        "alive": gpu.alive(),
        "utilization_ratio": gpu.utilization_ratio(),
        "memory_utilization_ratio": gpu.memory_utilization_ratio(),
        "memory_bytes": gpu.memory_bytes(),
        "temperature_celsius": gpu.temperature_celsius(),
        "fan_speed_ratios": gpu.fan_speed_ratios(),
        "power_watts": gpu.power_watts(),
        "power_limit_watts": gpu.power_limit_watts(),
        "energy_joules_total": gpu.energy_joules_total(),
        "clocks_event_reasons": gpu.clocks_event_reasons(),
        "throttle_seconds_total": gpu.throttle_seconds_total(),
        "pcie_link": gpu.pcie_link(),
        "pcie_bytes_total": gpu.pcie_bytes_total(),
        "pcie_replays_total": gpu.pcie_replays_total(),
        "nvlinks": gpu.nvlinks(),
        "ecc_errors_total": gpu.ecc_errors_total(),
        "xid_errors_total": gpu.xid_errors_total(),
        "xid_last_event_timestamp_seconds": gpu.xid_last_event_timestamp_seconds(),
        "peers": gpu.peers(),
    }
    for threshold in TEMPERATURE_THRESHOLDS:
        values[f"temperature_threshold_celsius({threshold})"] = gpu.temperature_threshold_celsius(
            threshold
        )
    for clock in CLOCKS:
        values[f"clock_hertz({clock})"] = gpu.clock_hertz(clock)
        values[f"clock_max_hertz({clock})"] = gpu.clock_max_hertz(clock)
    return values


def comparable(values: dict[str, Any]) -> dict[str, Any]:
    """Readings with mappings turned into plain dicts, so that equal readings compare equal."""
    return {name: dict(v) if hasattr(v, "items") else v for name, v in values.items()}


# --- the interface --------------------------------------------------------------------------


def test_it_is_a_gpu_backend_of_gpu_devices() -> None:
    backend: GpuBackend = SimulatedBackend(load_scenario("healthy"), clock=FakeClock())
    devices: list[GpuDevice] = list(backend.gpus())
    assert backend.kind == "simulated"
    assert len(devices) == 2


def test_it_is_always_up_with_a_simulated_driver() -> None:
    backend, _ = backend_at("healthy")
    assert backend.status().up
    assert backend.driver_version() == "simulated-550.90.07"


def test_gpus_are_numbered_in_order() -> None:
    backend, _ = backend_at(load_scenario("healthy", gpus=8))
    assert [gpu.index for gpu in backend.gpus()] == list(range(8))


def test_identity_looks_like_an_h100_host() -> None:
    backend, _ = backend_at("healthy")
    first, second = backend.gpus()
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert (first.pci_bus_id, second.pci_bus_id) == ("0000:1b:00.0", "0000:43:00.0")


def test_uuids_and_bus_ids_are_distinct_and_well_formed_on_64_gpus() -> None:
    backend, _ = backend_at(load_scenario("healthy", gpus=64))
    uuids = [gpu.uuid for gpu in backend.gpus()]
    bus_ids = [gpu.pci_bus_id for gpu in backend.gpus()]
    assert len(set(uuids)) == len(set(bus_ids)) == 64
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u) for u in uuids)
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", b) for b in bus_ids)


def test_uuids_follow_the_seed() -> None:
    one, _ = backend_at("healthy")
    again, _ = backend_at("healthy")
    other, _ = backend_at("imbalance")
    assert [g.uuid for g in one.gpus()] == [g.uuid for g in again.gpus()]
    assert one.gpus()[0].uuid != other.gpus()[0].uuid


def test_a_healthy_two_gpu_host_answers_every_reading() -> None:
    backend, _ = backend_at("healthy", now=42.5)
    for gpu in backend.gpus():
        values = readings(gpu)
        assert [name for name, value in values.items() if value is None] == []
        for name in ("fan_speed_ratios", "nvlinks", "peers", "throttle_seconds_total"):
            assert values[name], f"{name} is empty"


def test_every_reason_and_error_type_is_reported() -> None:
    backend, _ = backend_at("healthy", now=42.5)
    gpu = backend.gpus()[0]
    reasons = gpu.clocks_event_reasons()
    ecc = gpu.ecc_errors_total()
    assert reasons is not None
    assert ecc is not None
    assert list(reasons) == [name for name, _ in CLOCKS_EVENT_REASONS]
    assert list(gpu.throttle_seconds_total()) == list(THROTTLE_REASONS)
    assert list(ecc) == list(ECC_ERROR_TYPES)
    for link in gpu.nvlinks().values():
        assert list(link.errors) == list(NVLINK_ERROR_TYPES)


def test_default_hardware_limits_are_an_h100s() -> None:
    backend, _ = backend_at("healthy", now=42.5)
    values = readings(backend.gpus()[0])
    assert values["memory_bytes"].total == 80 * 2**30
    assert values["power_limit_watts"] == 700.0
    assert values["temperature_threshold_celsius(slowdown)"] == 87.0
    assert values["temperature_threshold_celsius(shutdown)"] == 92.0
    assert values["temperature_threshold_celsius(gpu_max)"] == 87.0
    assert values["temperature_threshold_celsius(memory_max)"] == 95.0
    assert values["clock_max_hertz(graphics)"] == values["clock_max_hertz(sm)"] == 1980e6
    assert values["clock_max_hertz(memory)"] == 2619e6
    assert values["pcie_link"] == PcieLink(5, 5, 16, 16)
    assert sorted(values["nvlinks"]) == [0, 1, 2, 3]
    assert values["xid_errors_total"] == {}
    assert values["xid_last_event_timestamp_seconds"] == {}
    assert values["ecc_errors_total"] == {"corrected": 0.0, "uncorrected": 0.0}


def test_peers_are_all_nvlink_when_gpus_have_nvlink() -> None:
    backend, _ = backend_at(load_scenario("healthy", gpus=4))
    for gpu in backend.gpus():
        peers = gpu.peers()
        assert sorted(p.peer_index for p in peers) == [i for i in range(4) if i != gpu.index]
        assert {p.link for p in peers} == {"nvlink"}


def test_without_nvlink_the_topology_decides_the_peer_links(tmp_path: Path) -> None:
    scenario = scenario_from(tmp_path, "description: d\ngpus: {nvlinks: 0, topology: numa_node}\n")
    backend, _ = backend_at(scenario, now=5)
    gpu = backend.gpus()[0]
    assert gpu.nvlinks() == {}
    assert [(p.peer_index, p.link) for p in gpu.peers()] == [(1, "numa_node")]


def test_without_nvlink_or_topology_peers_share_a_pcie_switch(tmp_path: Path) -> None:
    backend, _ = backend_at(scenario_from(tmp_path, "description: d\ngpus: {nvlinks: 0}\n"))
    assert [p.link for p in backend.gpus()[1].peers()] == ["pcie_switch"]


def test_a_fanless_board_reports_no_fans(tmp_path: Path) -> None:
    backend, _ = backend_at(scenario_from(tmp_path, "description: d\ngpus: {fans: 0}\n"))
    assert list(backend.gpus()[0].fan_speed_ratios()) == []


def test_ecc_off_reports_no_ecc_counts(tmp_path: Path) -> None:
    backend, _ = backend_at(scenario_from(tmp_path, "description: d\ngpus: {ecc: false}\n"))
    assert backend.gpus()[0].ecc_errors_total() is None


def test_a_scenario_built_in_code_is_checked_too() -> None:
    scenario = Scenario.model_validate(
        {"description": "d", "events": [{"type": "gpu_lost", "gpu": 2, "at": 1}]}
    )
    with pytest.raises(ScenarioError, match=r"^scenario: events\[0\]\.gpu: GPU 2 does not exist"):
        SimulatedBackend(scenario)


# --- determinism ----------------------------------------------------------------------------


TIMES = (3.0, 47.25, 47.75, 120.5, 600.0)


def test_two_backends_at_the_same_clock_agree_whatever_order_they_are_read_in() -> None:
    forwards, forwards_clock = backend_at("thermal-throttle")
    backwards, backwards_clock = backend_at("thermal-throttle")
    seen: dict[tuple[float, int], dict[str, Any]] = {}
    for t in TIMES:
        forwards_clock.now = t
        for gpu in forwards.gpus():
            seen[t, gpu.index] = comparable(readings(gpu))
    for t in reversed(TIMES):
        backwards_clock.now = t
        for gpu in reversed(backwards.gpus()):
            assert comparable(readings(gpu)) == seen[t, gpu.index]


def test_a_backend_that_jumps_straight_to_a_time_agrees_with_one_that_walked_there() -> None:
    walked, walked_clock = backend_at("healthy")
    for step in range(0, 3001, 7):
        walked_clock.now = step / 10
        walked.gpus()[0].energy_joules_total()
    jumped, _ = backend_at("healthy", now=300.0)
    walked_clock.now = 300.0
    assert comparable(readings(jumped.gpus()[0])) == comparable(readings(walked.gpus()[0]))


def test_gauges_hold_for_a_whole_second() -> None:
    backend, clock = backend_at("healthy", now=10.1)
    gpu = backend.gpus()[0]
    first = (gpu.utilization_ratio(), gpu.temperature_celsius(), gpu.power_watts())
    clock.now = 10.9
    assert (gpu.utilization_ratio(), gpu.temperature_celsius(), gpu.power_watts()) == first


# --- counters -------------------------------------------------------------------------------


def test_constant_power_integrates_to_energy(tmp_path: Path) -> None:
    scenario = scenario_from(tmp_path, "description: d\nworkload: {power_watts: 300}\n")
    backend, clock = backend_at(scenario)
    gpu = backend.gpus()[0]
    assert gpu.energy_joules_total() == 0.0
    clock.now = 10.0
    assert gpu.energy_joules_total() == pytest.approx(3000.0)
    clock.now = 10.5
    assert gpu.energy_joules_total() == pytest.approx(3150.0)


def test_traffic_integrates_to_bytes(tmp_path: Path) -> None:
    scenario = scenario_from(
        tmp_path,
        "description: d\nworkload:\n  pcie_transmit_bytes_per_second: 1e9\n"
        "  pcie_receive_bytes_per_second: 2e9\n  nvlink_bytes_per_second: 5e8\n",
    )
    backend, _ = backend_at(scenario, now=60.0)
    gpu = backend.gpus()[0]
    assert gpu.pcie_bytes_total() == pytest.approx((60e9, 120e9))
    assert gpu.nvlinks()[2].transmit_bytes == pytest.approx(30e9)
    assert gpu.nvlinks()[2].receive_bytes == pytest.approx(30e9)


def counter_values(gpu: SimulatedGpu) -> list[float]:
    throttle = gpu.throttle_seconds_total()
    pcie = gpu.pcie_bytes_total()
    energy = gpu.energy_joules_total()
    assert pcie is not None
    assert energy is not None
    values = [energy, *throttle.values(), *pcie]
    for link in gpu.nvlinks().values():
        assert link.transmit_bytes is not None
        assert link.receive_bytes is not None
        values += [link.transmit_bytes, link.receive_bytes, *link.errors.values()]
    return values


@pytest.mark.parametrize("name", ["healthy", "thermal-throttle", "nvlink-errors"])
def test_counters_never_go_down(name: str) -> None:
    backend, clock = backend_at(name)
    previous = [counter_values(gpu) for gpu in backend.gpus()]
    for step in range(1, 400):
        clock.now = step * 0.37
        current = [counter_values(gpu) for gpu in backend.gpus()]
        for before, after in zip(previous, current, strict=True):
            assert all(a >= b for a, b in zip(after, before, strict=True))
        previous = current


def test_a_clock_going_backwards_recomputes_from_the_start() -> None:
    backend, clock = backend_at("thermal-throttle", now=100.0)
    gpu = backend.gpus()[1]
    at_100 = counter_values(gpu)
    clock.now = 50.0
    fresh, _ = backend_at("thermal-throttle", now=50.0)
    assert counter_values(gpu) == counter_values(fresh.gpus()[1])
    clock.now = 100.0
    assert counter_values(gpu) == at_100


def test_a_clock_before_the_start_reads_as_the_start() -> None:
    backend, _ = backend_at("healthy", now=-5.0)
    gpu = backend.gpus()[0]
    assert gpu.energy_joules_total() == 0.0
    assert gpu.utilization_ratio() is not None


def count_samples(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seconds GPU 0 is evaluated for (its run's coupling evaluates its peers with it)."""
    evaluated: list[int] = []
    original = GpuPhysics.sample

    def counting(self: GpuPhysics, second: int) -> Any:
        if self.index == 0:
            evaluated.append(second)
        return original(self, second)

    monkeypatch.setattr(GpuPhysics, "sample", counting)
    return evaluated


def test_each_second_is_evaluated_once_however_often_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evaluated = count_samples(monkeypatch)
    backend, clock = backend_at("healthy", now=100.2)
    gpu = backend.gpus()[0]
    readings(gpu)
    assert sorted(evaluated) == list(range(101))
    evaluated.clear()
    clock.now = 100.9
    readings(gpu)
    assert evaluated == []
    clock.now = 101.1
    readings(gpu)
    assert evaluated == [101]


def test_catching_up_leaves_nothing_for_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluated = count_samples(monkeypatch)
    backend, _ = backend_at("healthy", now=30.5)
    gpu = backend.gpus()[0]
    gpu.catch_up()
    evaluated.clear()
    readings(gpu)
    assert evaluated == []


def test_concurrent_readers_see_the_same_counters() -> None:
    backend, _ = backend_at(load_scenario("healthy", gpus=8), now=250.5)
    results: list[list[list[float]]] = []
    lock = threading.Lock()

    def scrape() -> None:
        values = [counter_values(gpu) for gpu in backend.gpus()]
        with lock:
            results.append(values)

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fresh, _ = backend_at(load_scenario("healthy", gpus=8), now=250.5)
    expected = [counter_values(gpu) for gpu in fresh.gpus()]
    assert results == [expected] * 8


# --- derived behaviour ----------------------------------------------------------------------


@pytest.fixture
def busy_then_idle(tmp_path: Path) -> Scenario:
    """Busy for the first 30 s of each minute, idle for the rest."""
    return scenario_from(
        tmp_path,
        "description: d\nworkload:\n  utilization: {square: {low: 0.0, high: 0.9, period: 1m, "
        "duty: 0.5}}\n",
    )


def test_an_idle_gpu_downshifts_its_pcie_link_and_restores_it_when_busy(
    busy_then_idle: Scenario,
) -> None:
    backend, clock = backend_at(busy_then_idle, now=10.0)
    gpu = backend.gpus()[0]
    assert gpu.pcie_link() == PcieLink(5, 5, 16, 16)
    clock.now = 40.0
    assert gpu.pcie_link() == PcieLink(1, 5, 16, 16)
    clock.now = 70.0
    assert gpu.pcie_link() == PcieLink(5, 5, 16, 16)


def test_an_idle_gpu_reports_gpu_idle_low_clocks_and_low_power(busy_then_idle: Scenario) -> None:
    backend, clock = backend_at(busy_then_idle, now=10.0)
    gpu = backend.gpus()[0]
    busy_power = gpu.power_watts()
    assert gpu.clock_hertz("graphics") == 1980e6
    clock.now = 40.0
    reasons = gpu.clocks_event_reasons()
    power = gpu.power_watts()
    assert reasons is not None
    assert reasons["gpu_idle"]
    assert power is not None
    assert busy_power is not None
    assert gpu.clock_hertz("graphics") == 345e6
    assert power < 100 < busy_power
    assert gpu.throttle_seconds_total()["low_utilization"] == pytest.approx(10.0)


def test_power_and_traffic_follow_utilization(busy_then_idle: Scenario) -> None:
    backend, clock = backend_at(busy_then_idle, now=0.0)
    gpu = backend.gpus()[0]

    def rates_over(start: float) -> tuple[float, float, float]:
        clock.now = start
        before_energy, before_pcie, before_nvlink = (
            gpu.energy_joules_total() or 0.0,
            (gpu.pcie_bytes_total() or (0.0, 0.0))[1],
            gpu.nvlinks()[0].transmit_bytes or 0.0,
        )
        clock.now = start + 10
        return (
            ((gpu.energy_joules_total() or 0.0) - before_energy) / 10,
            ((gpu.pcie_bytes_total() or (0.0, 0.0))[1] - before_pcie) / 10,
            ((gpu.nvlinks()[0].transmit_bytes or 0.0) - before_nvlink) / 10,
        )

    busy, idle = rates_over(5.0), rates_over(35.0)
    assert all(b > 5 * i for b, i in zip(busy, idle, strict=True))


def test_a_power_cap_pins_power_at_the_cap(tmp_path: Path) -> None:
    scenario = scenario_from(
        tmp_path,
        "description: d\nworkload: {utilization: 0.95}\n"
        "events: [{type: power_cap, gpu: 0, at: 10, duration: 20, watts: 400}]\n",
    )
    backend, clock = backend_at(scenario, now=15.0)
    gpu = backend.gpus()[0]
    reasons = gpu.clocks_event_reasons()
    assert reasons is not None
    assert reasons["sw_power_cap"]
    assert gpu.power_watts() == gpu.power_limit_watts() == 400.0
    assert (gpu.clock_hertz("graphics") or 0) < 1980e6
    assert gpu.throttle_seconds_total()["power"] == pytest.approx(5.0)
    clock.now = 35.0
    assert gpu.power_limit_watts() == 700.0
    assert gpu.throttle_seconds_total()["power"] == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("reason", "accrues"),
    [
        ("hw_slowdown", "board_limit"),
        ("hw_thermal_slowdown", "thermal"),
        ("sync_boost", "sync_boost"),
        ("hw_power_brake_slowdown", "board_limit"),
    ],
)
def test_a_throttle_event_sets_its_reason_and_accrues_violation_time(
    tmp_path: Path, reason: str, accrues: str
) -> None:
    scenario = scenario_from(
        tmp_path,
        "description: d\nworkload: {utilization: 0.95}\n"
        f"events: [{{type: throttle, gpu: 1, reason: {reason}, at: 5s, duration: 10s}}]\n",
    )
    backend, clock = backend_at(scenario, now=8.0)
    gpu = backend.gpus()[1]
    reasons = gpu.clocks_event_reasons()
    assert reasons is not None
    assert [name for name, active in reasons.items() if active] == [reason]
    assert (gpu.clock_hertz("sm") or 0) < 1980e6
    clock.now = 100.0
    throttled = gpu.throttle_seconds_total()
    assert throttled[accrues] == pytest.approx(10.0)
    assert sum(throttled.values()) == pytest.approx(10.0)
    reasons = gpu.clocks_event_reasons()
    assert reasons is not None
    assert not any(reasons.values())


# (clocks-event reason, its cause) for every reason of a throttling cause of the cause table.
CAUSE_REASONS = [(reason, c) for c in causes.THROTTLES for reason in c.clock_reasons]


@pytest.mark.parametrize(
    ("reason", "cause"), CAUSE_REASONS, ids=[f"{r}-{c.kind}" for r, c in CAUSE_REASONS]
)
def test_a_throttle_reason_accrues_only_under_its_own_causes_counter(
    tmp_path: Path, reason: str, cause: causes.Cause
) -> None:
    """The rules and the report read a cause's violation counter (contract/causes.py): a reason
    of one cause never times another's, so a power brake is a hardware slowdown, not a cap."""
    scenario = scenario_from(
        tmp_path,
        "description: d\nworkload: {utilization: 0.95}\n"
        f"events: [{{type: throttle, gpu: 0, reason: {reason}, at: 5s, duration: 10s}}]\n",
    )
    backend, _ = backend_at(scenario, now=100.0)
    throttled = backend.gpus()[0].throttle_seconds_total()
    for other in causes.THROTTLES:
        if other.violation is not None:
            want = 10.0 if other is cause else 0.0
            assert throttled[other.violation] == pytest.approx(want), (other.kind, throttled)


def test_a_lost_gpu_can_come_back(tmp_path: Path) -> None:
    scenario = scenario_from(
        tmp_path, "description: d\nevents: [{type: gpu_lost, gpu: 0, at: 10, duration: 5}]\n"
    )
    backend, clock = backend_at(scenario, now=12.0)
    gpu = backend.gpus()[0]
    assert not gpu.alive()
    clock.now = 15.0
    assert gpu.alive()
    assert isinstance(gpu.memory_bytes(), MemoryBytes)


def test_pcie_replays_and_corrected_ecc_spread_over_their_duration(tmp_path: Path) -> None:
    scenario = scenario_from(
        tmp_path,
        "description: d\nevents:\n"
        "  - {type: pcie_replays, gpu: 0, count: 100, at: 10, duration: 100}\n"
        "  - {type: ecc, gpu: 0, error: corrected, count: 10, at: 10, duration: 100}\n",
    )
    backend, clock = backend_at(scenario, now=60.0)
    gpu = backend.gpus()[0]
    assert gpu.pcie_replays_total() == 50.0
    assert gpu.ecc_errors_total() == {"corrected": 5.0, "uncorrected": 0.0}
    clock.now = 1000.0
    assert gpu.pcie_replays_total() == 100.0


EPOCH = 1_722_850_000.0


@pytest.mark.parametrize(
    ("now", "counts", "latest"),
    [
        (9.0, {13: 0.0, 48: 0.0}, {}),
        (10.0, {13: 1.0, 48: 0.0}, {13: 10.0}),
        # XID 48's four events spread over 20..60 s come at 30, 40, 50 and 60 s.
        (39.5, {13: 1.0, 48: 1.0}, {13: 10.0, 48: 30.0}),
        (45.0, {13: 1.0, 48: 2.0}, {13: 10.0, 48: 40.0}),
        (99.0, {13: 1.0, 48: 4.0}, {13: 10.0, 48: 60.0}),
        (100.0, {13: 2.0, 48: 4.0}, {13: 100.0, 48: 60.0}),
    ],
)
def test_xid_latest_event_times_are_the_scenarios_events_in_unix_time(
    tmp_path: Path, now: float, counts: dict[int, float], latest: dict[int, float]
) -> None:
    scenario = scenario_from(
        tmp_path,
        "description: d\nevents:\n"
        "  - {type: xid, gpu: 0, xid: 13, at: 10}\n"
        "  - {type: xid, gpu: 0, xid: 48, count: 4, at: 20, duration: 40}\n"
        "  - {type: xid, gpu: 0, xid: 13, at: 100}\n",
    )
    gpu = SimulatedBackend(scenario, clock=FakeClock(now), epoch=EPOCH).gpus()[0]
    assert gpu.xid_errors_total() == counts
    # Only XIDs seen so far have a time; the counter is there at 0 from the start.
    assert gpu.xid_last_event_timestamp_seconds() == {xid: EPOCH + at for xid, at in latest.items()}


def test_with_a_fake_clock_scenario_second_0_is_the_wall_time_at_construction(
    tmp_path: Path,
) -> None:
    scenario = scenario_from(
        tmp_path, "description: d\nevents: [{type: xid, gpu: 1, xid: 43, at: 20}]\n"
    )
    before = time.time()
    backend, _ = backend_at(scenario, now=50.0)
    after = time.time()
    at = backend.gpus()[1].xid_last_event_timestamp_seconds()[43]
    assert before - 30.0 <= at <= after - 30.0


def test_a_lost_gpu_reports_no_xid_times(tmp_path: Path) -> None:
    scenario = scenario_from(
        tmp_path,
        "description: d\nevents:\n"
        "  - {type: xid, gpu: 0, xid: 79, at: 10}\n"
        "  - {type: gpu_lost, gpu: 0, at: 10, duration: 5}\n",
    )
    backend, clock = backend_at(scenario, now=12.0)
    gpu = backend.gpus()[0]
    assert gpu.xid_last_event_timestamp_seconds() == {}
    clock.now = 15.0
    assert list(gpu.xid_last_event_timestamp_seconds()) == [79]


# --- the default clock ----------------------------------------------------------------------


def test_with_the_real_clock_time_starts_at_start() -> None:
    backend = SimulatedBackend(load_scenario("healthy"))
    backend.start()
    try:
        energy = backend.gpus()[0].energy_joules_total()
        assert energy is not None
        assert 0.0 <= energy < 700.0
    finally:
        backend.shutdown()


def simulator_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "mirrorwatch-simulator"}


def test_start_runs_one_background_thread_and_shutdown_stops_it() -> None:
    before = simulator_threads()
    backend = SimulatedBackend(load_scenario("healthy"))
    backend.start()
    backend.start()
    started = simulator_threads() - before
    backend.shutdown()
    assert len(started) == 1
    assert not started & simulator_threads()


def test_with_the_real_clock_scenario_second_0_is_the_wall_time_at_start(tmp_path: Path) -> None:
    scenario = scenario_from(
        tmp_path, "description: d\nevents: [{type: xid, gpu: 0, xid: 13, at: 0}]\n"
    )
    backend = SimulatedBackend(scenario)
    time.sleep(0.05)  # construction and start() differ: the time is taken at start()
    before = time.time()
    backend.start()
    after = time.time()
    try:
        at = backend.gpus()[0].xid_last_event_timestamp_seconds()[13]
        assert before <= at <= after
    finally:
        backend.shutdown()


def test_a_fake_clock_runs_no_background_thread() -> None:
    before = simulator_threads()
    backend, _ = backend_at("healthy")
    backend.start()
    assert simulator_threads() == before
    backend.shutdown()
