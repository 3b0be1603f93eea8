"""Each built-in scenario shows the fault it is named for, early enough for an alert drill."""

from __future__ import annotations

import statistics

import pytest

from mirrorwatch.exporter.simulate.backend import SimulatedBackend, SimulatedGpu
from mirrorwatch.exporter.simulate.scenario import load_scenario


class FakeClock:
    """Seconds since the scenario started, set by the test."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def host(name: str, now: float) -> tuple[SimulatedGpu, SimulatedGpu, FakeClock]:
    clock = FakeClock(now)
    first, second = SimulatedBackend(load_scenario(name), clock=clock).gpus()
    return first, second, clock


def active_reasons(gpu: SimulatedGpu) -> list[str]:
    reasons = gpu.clocks_event_reasons()
    assert reasons is not None
    return [name for name, active in reasons.items() if active]


def mean_utilization(gpu: SimulatedGpu, clock: FakeClock, start: int, seconds: int) -> float:
    values = []
    for second in range(start, start + seconds):
        clock.now = float(second)
        values.append(gpu.utilization_ratio() or 0.0)
    return statistics.fmean(values)


# --- healthy --------------------------------------------------------------------------------


def test_healthy_gpus_are_busy_and_balanced() -> None:
    first, second, clock = host("healthy", 0)
    means = [mean_utilization(gpu, clock, 0, 60) for gpu in (first, second)]
    assert all(0.9 < mean < 1.0 for mean in means)
    assert abs(means[0] - means[1]) < 0.02


def test_healthy_gpus_run_cool_and_unthrottled() -> None:
    first, second, _ = host("healthy", 300.0)
    for gpu in (first, second):
        assert (gpu.temperature_celsius() or 99.0) < 75.0
        assert active_reasons(gpu) == []
        assert sum(gpu.throttle_seconds_total().values()) == 0.0
        assert gpu.clock_hertz("graphics") == 1980e6


# --- imbalance ------------------------------------------------------------------------------


def test_imbalance_gpu_1_lags_by_well_over_five_points() -> None:
    first, second, clock = host("imbalance", 60.0)
    assert (first.utilization_ratio() or 0.0) - (second.utilization_ratio() or 0.0) > 0.05
    spread = mean_utilization(first, clock, 0, 60) - mean_utilization(second, clock, 0, 60)
    assert 0.1 < spread < 0.2


# --- thermal-throttle -----------------------------------------------------------------------


def test_thermal_throttle_gpu_1_is_cool_before_the_event() -> None:
    _, second, _ = host("thermal-throttle", 4.0)
    assert active_reasons(second) == []


def test_thermal_throttle_gpu_1_passes_slowdown_within_30_seconds() -> None:
    first, second, _ = host("thermal-throttle", 30.0)
    assert (second.temperature_celsius() or 0.0) >= 87.0
    assert active_reasons(second) == ["sw_thermal_slowdown"]
    assert active_reasons(first) == []


def test_thermal_throttle_accrues_thermal_time_and_drops_clocks() -> None:
    first, second, _ = host("thermal-throttle", 60.0)
    throttled = second.throttle_seconds_total()
    assert throttled["thermal"] > 30.0
    assert first.throttle_seconds_total()["thermal"] == 0.0
    assert (second.clock_hertz("graphics") or 0.0) < (first.clock_hertz("graphics") or 0.0)
    assert (second.clock_hertz("sm") or 0.0) < 1980e6


# --- pcie-degraded --------------------------------------------------------------------------


def test_pcie_degraded_gpu_1_runs_at_x8_after_10_seconds() -> None:
    first, second, clock = host("pcie-degraded", 9.0)
    link = second.pcie_link()
    assert link is not None
    assert (link.generation, link.width) == (5, 16)
    clock.now = 10.0
    link, healthy = second.pcie_link(), first.pcie_link()
    assert link is not None
    assert healthy is not None
    assert (link.generation, link.width, link.width_max) == (5, 8, 16)
    assert (healthy.generation, healthy.width) == (5, 16)


# --- nvlink-errors --------------------------------------------------------------------------


def test_nvlink_errors_grow_on_gpu_0_link_1() -> None:
    first, second, clock = host("nvlink-errors", 9.0)
    assert sum(first.nvlinks()[1].errors.values()) == 0.0
    clock.now = 30.0
    early = dict(first.nvlinks()[1].errors)
    clock.now = 120.0
    later = dict(first.nvlinks()[1].errors)
    assert early["crc_flit"] > 0
    for kind in ("crc_flit", "crc_data", "replay"):
        assert later[kind] > early[kind]
    assert all(sum(link.errors.values()) == 0.0 for link in second.nvlinks().values())


def test_nvlink_errors_link_3_goes_down_and_its_traffic_stops() -> None:
    first, second, clock = host("nvlink-errors", 19.0)
    assert first.nvlinks()[3].up
    clock.now = 20.0
    stalled_at = first.nvlinks()[3].transmit_bytes
    assert not first.nvlinks()[3].up
    clock.now = 90.0
    links = first.nvlinks()
    assert links[3].transmit_bytes == stalled_at
    assert [link.up for link in links.values()] == [True, True, True, False]
    assert all(link.up for link in second.nvlinks().values())


# --- xid ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "xids", "uncorrected"),
    [
        (19.0, {43: 0.0, 48: 0.0}, 0.0),
        (20.0, {43: 1.0, 48: 0.0}, 0.0),
        (25.0, {43: 1.0, 48: 1.0}, 1.0),
    ],
)
def test_xid_gpu_1_reports_xid_43_then_48_with_its_ecc_error(
    now: float, xids: dict[int, float], uncorrected: float
) -> None:
    first, second, _ = host("xid", now)
    assert second.xid_errors_total() == xids
    # An XID has a latest-event time once it happened, not while its counter waits at 0.
    assert set(second.xid_last_event_timestamp_seconds()) == {x for x, n in xids.items() if n}
    assert (second.ecc_errors_total() or {}).get("uncorrected") == uncorrected
    assert first.xid_errors_total() == {}


# --- gpu-lost -------------------------------------------------------------------------------


def test_gpu_lost_gpu_1_answers_until_20_seconds() -> None:
    _, second, _ = host("gpu-lost", 19.9)
    assert second.alive()
    assert second.utilization_ratio() is not None


def test_gpu_lost_gpu_1_answers_nothing_after_20_seconds() -> None:
    first, second, _ = host("gpu-lost", 20.0)
    assert not second.alive()
    nothing = [
        second.utilization_ratio(),
        second.memory_utilization_ratio(),
        second.memory_bytes(),
        second.temperature_celsius(),
        second.temperature_threshold_celsius("slowdown"),
        second.power_watts(),
        second.power_limit_watts(),
        second.energy_joules_total(),
        second.clock_hertz("graphics"),
        second.clock_max_hertz("graphics"),
        second.clocks_event_reasons(),
        second.pcie_link(),
        second.pcie_bytes_total(),
        second.pcie_replays_total(),
        second.ecc_errors_total(),
    ]
    assert nothing == [None] * len(nothing)
    empty = [
        second.fan_speed_ratios(),
        second.throttle_seconds_total(),
        second.nvlinks(),
        second.xid_errors_total(),
        second.xid_last_event_timestamp_seconds(),
        second.peers(),
    ]
    assert [len(value) for value in empty] == [0] * len(empty)
    assert first.alive()
    assert first.utilization_ratio() is not None
