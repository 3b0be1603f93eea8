"""The collectors turn backend readings into exact series; unsupported values stay absent."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from mirrorwatch.exporter.backend import BackendStatus, PeerLink
from mirrorwatch.exporter.collectors.base import ScrapeView
from mirrorwatch.exporter.collectors.registry import COLLECTOR_NAMES, ExporterInfo, GpuMetrics
from tests.exporter.static_gpu import GIB, StaticBackend, StaticGpu

UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"


def series(backend: StaticBackend, collectors: Sequence[str] = COLLECTOR_NAMES) -> list[str]:
    """The exposition's sample lines, without HELP/TYPE and without collector durations."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        GpuMetrics(backend, ExporterInfo("1.2.3", run_ttl_seconds=90, expected_gpus=2), collectors)
    )
    text = generate_latest(registry).decode()
    return [
        line
        for line in text.splitlines()
        if not line.startswith("#") and "collector_duration_seconds" not in line
    ]


def gpu_series(lines: list[str], gpu: int) -> list[str]:
    return [line for line in lines if f'gpu="{gpu}"' in line]


def samples(backend: StaticBackend) -> dict[tuple[str, str], float]:
    """GPU 0's samples as {(name, "label=value,...") : value}, labels beyond gpu and uuid only."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuMetrics(backend, ExporterInfo("1.2.3", run_ttl_seconds=300)))
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("gpu", None) != "0":
                continue
            assert labels.pop("uuid") == UUID0
            found[(sample.name, ",".join(f"{k}={v}" for k, v in sorted(labels.items())))] = (
                sample.value
            )
    return found


def test_every_reading_becomes_its_series_in_base_units() -> None:
    assert samples(StaticBackend([StaticGpu()])) == {
        ("mirrorwatch_gpu_info", "name=NVIDIA H100 80GB HBM3,pci_bus_id=0000:1b:00.0"): 1.0,
        ("mirrorwatch_gpu_up", ""): 1.0,
        ("mirrorwatch_gpu_utilization_ratio", ""): 0.97,
        ("mirrorwatch_gpu_memory_utilization_ratio", ""): 0.41,
        ("mirrorwatch_gpu_memory_used_bytes", ""): 60.0 * GIB,
        ("mirrorwatch_gpu_memory_total_bytes", ""): 80.0 * GIB,
        ("mirrorwatch_gpu_temperature_celsius", ""): 64.0,
        ("mirrorwatch_gpu_temperature_threshold_celsius", "threshold=slowdown"): 87.0,
        ("mirrorwatch_gpu_temperature_threshold_celsius", "threshold=shutdown"): 92.0,
        ("mirrorwatch_gpu_temperature_threshold_celsius", "threshold=gpu_max"): 87.0,
        ("mirrorwatch_gpu_fan_speed_ratio", "fan=0"): 0.45,
        ("mirrorwatch_gpu_power_watts", ""): 612.5,
        ("mirrorwatch_gpu_power_limit_watts", ""): 700.0,
        ("mirrorwatch_gpu_energy_joules_total", ""): 123456.789,
        ("mirrorwatch_gpu_clock_hertz", "clock=graphics"): 1.98e9,
        ("mirrorwatch_gpu_clock_hertz", "clock=sm"): 1.98e9,
        ("mirrorwatch_gpu_clock_hertz", "clock=memory"): 2.619e9,
        ("mirrorwatch_gpu_clock_max_hertz", "clock=graphics"): 1.98e9,
        ("mirrorwatch_gpu_clock_max_hertz", "clock=sm"): 1.98e9,
        ("mirrorwatch_gpu_clock_max_hertz", "clock=memory"): 2.619e9,
        ("mirrorwatch_gpu_clocks_event_active", "reason=gpu_idle"): 0.0,
        ("mirrorwatch_gpu_clocks_event_active", "reason=sw_thermal_slowdown"): 1.0,
        ("mirrorwatch_gpu_throttle_seconds_total", "reason=thermal"): 12.5,
        ("mirrorwatch_gpu_throttle_seconds_total", "reason=power"): 0.0,
        ("mirrorwatch_gpu_pcie_link_generation", ""): 5.0,
        ("mirrorwatch_gpu_pcie_link_generation_max", ""): 5.0,
        ("mirrorwatch_gpu_pcie_link_width", ""): 16.0,
        ("mirrorwatch_gpu_pcie_link_width_max", ""): 16.0,
        ("mirrorwatch_gpu_pcie_transmit_bytes_total", ""): 1e9,
        ("mirrorwatch_gpu_pcie_receive_bytes_total", ""): 2e9,
        ("mirrorwatch_gpu_pcie_replays_total", ""): 0.0,
        ("mirrorwatch_gpu_nvlink_up", "link=0"): 1.0,
        ("mirrorwatch_gpu_nvlink_transmit_bytes_total", "link=0"): 5e9,
        ("mirrorwatch_gpu_nvlink_receive_bytes_total", "link=0"): 6e9,
        ("mirrorwatch_gpu_nvlink_errors_total", "link=0,type=replay"): 0.0,
        ("mirrorwatch_gpu_nvlink_errors_total", "link=0,type=recovery"): 0.0,
        ("mirrorwatch_gpu_nvlink_errors_total", "link=0,type=crc_flit"): 3.0,
        ("mirrorwatch_gpu_ecc_errors_total", "type=corrected"): 2.0,
        ("mirrorwatch_gpu_ecc_errors_total", "type=uncorrected"): 0.0,
    }


def test_unsupported_readings_are_absent_never_zero() -> None:
    gpu = StaticGpu(
        utilization=None,
        power=None,
        energy=None,
        fans=(),
        ecc=None,
        event_reasons=None,
        pcie_bytes=None,
        thresholds={"slowdown": 87.0},
    )
    lines = series(StaticBackend([gpu]))
    for absent in (
        "mirrorwatch_gpu_utilization_ratio",
        "mirrorwatch_gpu_power_watts",
        "mirrorwatch_gpu_energy_joules_total",
        "mirrorwatch_gpu_fan_speed_ratio",
        "mirrorwatch_gpu_ecc_errors_total",
        "mirrorwatch_gpu_clocks_event_active",
        "mirrorwatch_gpu_pcie_transmit_bytes_total",
        'threshold="shutdown"',
    ):
        assert not [line for line in lines if absent in line], absent
    assert any(line.startswith("mirrorwatch_gpu_power_limit_watts") for line in lines)


def test_a_lost_gpu_reports_up_zero_while_the_other_keeps_reporting() -> None:
    healthy = StaticGpu(index=0, uuid=UUID0)
    lost = StaticGpu(
        index=1,
        uuid=UUID1,
        pci_bus_id="0000:43:00.0",
        is_alive=False,
        xids={79: 1},
        xid_last_events={79: 1.7e9},
    )
    lines = series(StaticBackend([healthy, lost]))
    assert f'mirrorwatch_gpu_up{{gpu="0",uuid="{UUID0}"}} 1.0' in lines
    assert f'mirrorwatch_gpu_up{{gpu="1",uuid="{UUID1}"}} 0.0' in lines
    assert gpu_series(lines, 0) == gpu_series(series(StaticBackend([healthy])), 0)
    assert sorted(line.split("{")[0] for line in gpu_series(lines, 1)) == [
        "mirrorwatch_gpu_info",
        "mirrorwatch_gpu_up",
        "mirrorwatch_gpu_xid_errors_total",
        "mirrorwatch_gpu_xid_last_event_timestamp_seconds",
    ]


def test_xid_counts_and_latest_event_times_are_served_per_xid_number() -> None:
    gpu = StaticGpu(xids={13: 2.0, 48: 1.0}, xid_last_events={13: 1722850000.5, 48: 1722849000.0})
    found = samples(StaticBackend([gpu]))
    assert {key: value for key, value in found.items() if "_xid_" in key[0]} == {
        ("mirrorwatch_gpu_xid_errors_total", "xid=13"): 2.0,
        ("mirrorwatch_gpu_xid_errors_total", "xid=48"): 1.0,
        ("mirrorwatch_gpu_xid_last_event_timestamp_seconds", "xid=13"): 1722850000.5,
        ("mirrorwatch_gpu_xid_last_event_timestamp_seconds", "xid=48"): 1722849000.0,
    }
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        GpuMetrics(StaticBackend([gpu]), ExporterInfo("1.2.3", run_ttl_seconds=300), ["xid"])
    )
    types = {
        family.name: family.type
        for family in text_string_to_metric_families(generate_latest(registry).decode())
    }
    assert types["mirrorwatch_gpu_xid_last_event_timestamp_seconds"] == "gauge"
    assert types["mirrorwatch_gpu_xid_errors"] == "counter"
    # No XID yet: neither family is served.
    assert not [line for line in series(StaticBackend([StaticGpu()])) if "_xid_" in line]


def test_backend_down_serves_up_zero_and_no_gpu_series() -> None:
    backend = StaticBackend([StaticGpu()], BackendStatus(up=False, reason="NVML library not found"))
    lines = series(backend)
    assert "mirrorwatch_up 0.0" in lines
    assert "mirrorwatch_exporter_gpus 0.0" in lines
    assert not [line for line in lines if line.startswith("mirrorwatch_gpu_")]


def test_exporter_metrics_describe_the_exporter() -> None:
    lines = series(StaticBackend([StaticGpu()]), collectors=["device"])
    assert "mirrorwatch_up 1.0" in lines
    assert (
        'mirrorwatch_exporter_build_info{backend="nvml",driver_version="550.90.07",'
        'version="1.2.3"} 1.0'
    ) in lines
    assert "mirrorwatch_exporter_gpus 1.0" in lines
    assert "mirrorwatch_exporter_expected_gpus 2.0" in lines
    assert "mirrorwatch_exporter_run_ttl_seconds 90.0" in lines
    assert 'mirrorwatch_exporter_collector_success{collector="device"} 1.0' in lines


def test_topology_names_each_peer_and_link() -> None:
    gpu0 = StaticGpu(index=0, uuid=UUID0, peer_links=[PeerLink(1, "nvlink")])
    gpu1 = StaticGpu(index=1, uuid=UUID1, peer_links=[PeerLink(0, "nvlink")])
    lines = series(StaticBackend([gpu0, gpu1]), collectors=["topology"])
    assert [line for line in lines if line.startswith("mirrorwatch_gpu_p2p")] == [
        f'mirrorwatch_gpu_p2p_link_info{{gpu="0",link="nvlink",peer_gpu="1",uuid="{UUID0}"}} 1.0',
        f'mirrorwatch_gpu_p2p_link_info{{gpu="1",link="nvlink",peer_gpu="0",uuid="{UUID1}"}} 1.0',
    ]


class ExplodingGpu(StaticGpu):
    def temperature_celsius(self) -> float | None:
        raise RuntimeError("driver returned garbage")


def test_one_failing_collector_never_fails_the_scrape(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        GpuMetrics(StaticBackend([ExplodingGpu()]), ExporterInfo("1", run_ttl_seconds=300))
    )
    generate_latest(registry)  # a first scrape; the failure is logged once, not per scrape
    lines = generate_latest(registry).decode().splitlines()
    assert 'mirrorwatch_exporter_collector_success{collector="thermal"} 0.0' in lines
    assert 'mirrorwatch_exporter_collector_success{collector="power"} 1.0' in lines
    assert not [line for line in lines if "temperature" in line]
    assert any(line.startswith("mirrorwatch_gpu_power_watts") for line in lines)
    assert [r.collector for r in caplog.records if hasattr(r, "collector")] == ["thermal"]


def test_only_the_chosen_collectors_run() -> None:
    lines = series(StaticBackend([StaticGpu()]), collectors=["power"])
    names = {line.split("{")[0].split(" ")[0] for line in lines}
    assert {name for name in names if name.startswith("mirrorwatch_gpu_")} == {
        "mirrorwatch_gpu_power_watts",
        "mirrorwatch_gpu_power_limit_watts",
        "mirrorwatch_gpu_energy_joules_total",
    }


class CountingGpu(StaticGpu):
    probes: int = 0

    def alive(self) -> bool:
        self.probes += 1
        return True


def test_each_gpu_is_probed_once_per_scrape() -> None:
    gpu = CountingGpu()
    series(StaticBackend([gpu]))
    assert gpu.probes == 1


def test_view_of_a_down_backend_is_empty() -> None:
    metrics = GpuMetrics(
        StaticBackend([StaticGpu()], BackendStatus(up=False, reason="x")),
        ExporterInfo("1", run_ttl_seconds=300),
    )
    assert metrics.view() == ScrapeView(gpus=(), alive=())


def _names(families: Iterator[Metric]) -> list[str]:
    return [family.name for family in families]


def test_families_are_fresh_on_every_scrape() -> None:
    gpu = StaticGpu(utilization=0.5)
    metrics = GpuMetrics(
        StaticBackend([gpu]), ExporterInfo("1", run_ttl_seconds=300), ["utilization"]
    )
    first = list(metrics.collect())
    gpu.utilization = None
    second = list(metrics.collect())
    assert "mirrorwatch_gpu_utilization_ratio" in _names(iter(first))
    assert "mirrorwatch_gpu_utilization_ratio" not in _names(iter(second))


STATIC_FAMILIES = (
    "mirrorwatch_gpu_info",
    "mirrorwatch_gpu_temperature_threshold_celsius",
    "mirrorwatch_gpu_clock_max_hertz",
    "mirrorwatch_gpu_pcie_link_generation_max",
    "mirrorwatch_gpu_pcie_link_width_max",
    "mirrorwatch_gpu_p2p_link_info",
)


def _by_name(families: Iterator[Metric]) -> dict[str, Metric]:
    return {family.name: family for family in families}


def test_static_families_are_built_once_while_their_readings_hold() -> None:
    gpu0 = StaticGpu(index=0, uuid=UUID0, peer_links=[PeerLink(1, "pcie_switch")])
    gpu1 = StaticGpu(index=1, uuid=UUID1, peer_links=[PeerLink(0, "pcie_switch")])
    metrics = GpuMetrics(StaticBackend([gpu0, gpu1]), ExporterInfo("1", run_ttl_seconds=300))
    first, second = _by_name(metrics.collect()), _by_name(metrics.collect())
    assert [first[name] is second[name] for name in STATIC_FAMILIES] == [True] * 6
    assert (
        first["mirrorwatch_gpu_utilization_ratio"]
        is not second["mirrorwatch_gpu_utilization_ratio"]
    )


def test_static_families_follow_a_changed_reading_or_set_of_gpus() -> None:
    gpu0 = StaticGpu(index=0, uuid=UUID0, peer_links=[PeerLink(1, "nvlink")])
    gpu1 = StaticGpu(index=1, uuid=UUID1, peer_links=[PeerLink(0, "nvlink")])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        GpuMetrics(StaticBackend([gpu0, gpu1]), ExporterInfo("1", run_ttl_seconds=300))
    )

    def scrape() -> list[str]:
        return generate_latest(registry).decode().splitlines()

    sm_max = f'mirrorwatch_gpu_clock_max_hertz{{clock="sm",gpu="0",uuid="{UUID0}"}}'
    assert f"{sm_max} 1.98e+09" in scrape()
    gpu0.clocks_max = {**gpu0.clocks_max, "sm": 2.1e9}
    gpu0.peer_links = [PeerLink(1, "pcie_host_bridge")]
    gpu1.is_alive = False
    lines = scrape()
    assert f"{sm_max} 2.1e+09" in lines
    assert not [line for line in gpu_series(lines, 1) if "clock_max_hertz" in line]
    assert next(line for line in lines if line.startswith("mirrorwatch_gpu_p2p")) == (
        f'mirrorwatch_gpu_p2p_link_info{{gpu="0",link="pcie_host_bridge",peer_gpu="1",'
        f'uuid="{UUID0}"}} 1.0'
    )
