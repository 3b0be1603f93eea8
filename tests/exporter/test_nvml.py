"""The NVML backend, against a fake pynvml module: units, failure outcomes, recovery, events."""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import pynvml
import pytest
from prometheus_client.samples import Sample

from mirrorwatch.exporter.backend import (
    CLOCKS,
    TEMPERATURE_THRESHOLDS,
    GpuBackend,
    GpuDevice,
    MemoryBytes,
    NvlinkCounters,
    PcieLink,
    PeerLink,
)
from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.nvml import (
    DRIVER_HINT,
    HEALTH_CHECK_INTERVAL_S,
    NvmlBackend,
    NvmlDevice,
)
from tests.exporter.fake_pynvml import FakeGpu, FakeLink, FakeNvml

GIB = 2.0**30


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(uuid="GPU-aaaa", pci_bus_id="00000000:17:00.0"),
        FakeGpu(uuid="GPU-bbbb", pci_bus_id="00000000:65:00.0"),
    ]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml(two_gpus())


@pytest.fixture
def make_backend(clock: FakeClock) -> Iterator[Callable[[FakeNvml], NvmlBackend]]:
    """Backends driven by explicit ``poll()`` calls on a fake clock; shut down afterwards."""
    made: list[NvmlBackend] = []

    def make(nvml: FakeNvml, **options: Any) -> NvmlBackend:
        options = {"retry_initial_s": 1.0, "retry_max_s": 8.0, **options}
        backend = NvmlBackend(nvml=nvml, background=False, clock=clock, **options)
        made.append(backend)
        backend.start()
        return backend

    yield make
    for backend in made:
        backend.shutdown()


def readings(gpu: NvmlDevice) -> dict[str, object]:
    """Every reading of one GPU, by method (and argument)."""
    return {
        "utilization_ratio": gpu.utilization_ratio(),
        "memory_utilization_ratio": gpu.memory_utilization_ratio(),
        "memory_bytes": gpu.memory_bytes(),
        "temperature_celsius": gpu.temperature_celsius(),
        **{
            f"temperature_threshold_celsius[{t}]": gpu.temperature_threshold_celsius(t)
            for t in TEMPERATURE_THRESHOLDS
        },
        "fan_speed_ratios": list(gpu.fan_speed_ratios()),
        "power_watts": gpu.power_watts(),
        "power_limit_watts": gpu.power_limit_watts(),
        "energy_joules_total": gpu.energy_joules_total(),
        **{f"clock_hertz[{c}]": gpu.clock_hertz(c) for c in CLOCKS},
        **{f"clock_max_hertz[{c}]": gpu.clock_max_hertz(c) for c in CLOCKS},
        "clocks_event_reasons": gpu.clocks_event_reasons(),
        "throttle_seconds_total": dict(gpu.throttle_seconds_total()),
        "pcie_link": gpu.pcie_link(),
        "pcie_bytes_total": gpu.pcie_bytes_total(),
        "pcie_replays_total": gpu.pcie_replays_total(),
        "nvlinks": dict(gpu.nvlinks()),
        "ecc_errors_total": gpu.ecc_errors_total(),
    }


FULL_READINGS: dict[str, object] = {
    "utilization_ratio": 0.87,
    "memory_utilization_ratio": 0.41,
    "memory_bytes": MemoryBytes(used=30 * GIB, total=80 * GIB),
    "temperature_celsius": 64.0,
    "temperature_threshold_celsius[slowdown]": 90.0,
    "temperature_threshold_celsius[shutdown]": 95.0,
    "temperature_threshold_celsius[gpu_max]": 88.0,
    "temperature_threshold_celsius[memory_max]": 95.0,
    "fan_speed_ratios": [0.30, 0.55],
    "power_watts": 250.5,
    "power_limit_watts": 400.0,
    "energy_joules_total": 123_456.789,
    "clock_hertz[graphics]": 1.41e9,
    "clock_hertz[sm]": 1.41e9,
    "clock_hertz[memory]": 1.593e9,
    "clock_max_hertz[graphics]": 1.41e9,
    "clock_max_hertz[sm]": 1.41e9,
    "clock_max_hertz[memory]": 1.593e9,
    "clocks_event_reasons": {
        "gpu_idle": False,
        "applications_clocks_setting": False,
        "sw_power_cap": True,
        "hw_slowdown": False,
        "sync_boost": False,
        "sw_thermal_slowdown": False,
        "hw_thermal_slowdown": True,
        "hw_power_brake_slowdown": False,
    },
    "throttle_seconds_total": {
        "power": 2.5,
        "thermal": 1.0,
        "sync_boost": 0.0,
        "board_limit": 0.5,
        "low_utilization": 7.0,
        "reliability": 0.0,
    },
    "pcie_link": PcieLink(generation=4, generation_max=4, width=16, width_max=16),
    "pcie_bytes_total": (5_000_000.0, 9_000_000.0),
    "pcie_replays_total": 3.0,
    "nvlinks": {},
    "ecc_errors_total": {"corrected": 12.0, "uncorrected": 1.0},
}

ABSENT_READINGS: dict[str, object] = {
    key: []
    if key == "fan_speed_ratios"
    else {}
    if key in ("throttle_seconds_total", "nvlinks")
    else None
    for key in FULL_READINGS
}


def log_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


# Identity and readings.


def as_protocols(backend: NvmlBackend) -> tuple[GpuBackend, Sequence[GpuDevice]]:
    """mypy checks here that the NVML classes satisfy the backend Protocols."""
    return backend, backend.gpus()


def test_backend_is_a_gpu_backend_of_kind_nvml(fake: FakeNvml, make_backend: Any) -> None:
    backend, gpus = as_protocols(make_backend(fake))
    assert len(gpus) == 2
    assert backend.kind == "nvml"
    assert backend.status().up
    assert backend.status().reason is None
    assert backend.driver_version() == "550.54.15"


def test_identity_is_read_once_with_the_pci_bus_id_normalised(
    fake: FakeNvml, make_backend: Any
) -> None:
    fake.gpus[1].pci_bus_id = "00000000:B3:00.0"
    gpus = make_backend(fake).gpus()
    assert [(g.index, g.uuid, g.name, g.pci_bus_id) for g in gpus] == [
        (0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", "0000:17:00.0"),
        (1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", "0000:b3:00.0"),
    ]
    uuid_calls = fake.calls["nvmlDeviceGetUUID"]
    assert [g.uuid for g in gpus] == ["GPU-aaaa", "GPU-bbbb"]
    assert fake.calls["nvmlDeviceGetUUID"] == uuid_calls


@pytest.mark.parametrize(
    ("nvml_form", "canonical"),
    [
        ("00000000:17:00.0", "0000:17:00.0"),
        ("00000000:B3:00.0", "0000:b3:00.0"),
        ("0001:3B:00.1", "0001:3b:00.1"),
        ("17:00.0", "0000:17:00.0"),
        # Not a bus id: kept as NVML wrote it, lower-cased, rather than failing the GPU.
        (" Not-A-Bus-Id ", "not-a-bus-id"),
    ],
)
def test_pci_bus_id_is_normalised_to_the_sysfs_form(
    fake: FakeNvml, make_backend: Any, nvml_form: str, canonical: str
) -> None:
    fake.gpus[0].pci_bus_id = nvml_form
    assert make_backend(fake).gpus()[0].pci_bus_id == canonical


def test_every_reading_is_converted_to_base_units(fake: FakeNvml, make_backend: Any) -> None:
    gpu = make_backend(fake).gpus()[0]
    assert gpu.alive()
    assert readings(gpu) == FULL_READINGS
    assert gpu.xid_errors_total() == {}
    assert gpu.peers() == ()


def test_nvlink_links_report_state_bytes_and_errors(fake: FakeNvml, make_backend: Any) -> None:
    fake.gpus[0].nvlinks = {
        0: FakeLink(
            errors={
                pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 1,
                pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 2,
                pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 3,
                pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: 4,
            },
            transmit_kib=10,
            receive_kib=20,
        ),
        # Link 1 does not exist (InvalidArgument); link 2 is down and has no error counters.
        2: FakeLink(active=False),
    }
    gpu = make_backend(fake).gpus()[0]
    assert gpu.nvlinks() == {
        0: NvlinkCounters(
            up=True,
            transmit_bytes=10_240.0,
            receive_bytes=20_480.0,
            errors={"replay": 1.0, "recovery": 2.0, "crc_flit": 3.0, "crc_data": 4.0},
        ),
        2: NvlinkCounters(up=False, transmit_bytes=0.0, receive_bytes=0.0, errors={}),
    }


# Per-call outcomes.

NOT_SUPPORTED_CASES: list[tuple[str, Callable[[NvmlDevice], object], object]] = [
    ("nvmlDeviceGetUtilizationRates", lambda g: g.utilization_ratio(), None),
    ("nvmlDeviceGetUtilizationRates", lambda g: g.memory_utilization_ratio(), None),
    ("nvmlDeviceGetMemoryInfo", lambda g: g.memory_bytes(), None),
    ("nvmlDeviceGetTemperature", lambda g: g.temperature_celsius(), None),
    (
        "nvmlDeviceGetTemperatureThreshold",
        lambda g: g.temperature_threshold_celsius("memory_max"),
        None,
    ),
    ("nvmlDeviceGetNumFans", lambda g: g.fan_speed_ratios(), []),
    ("nvmlDeviceGetFanSpeed_v2", lambda g: g.fan_speed_ratios(), [None, None]),
    ("nvmlDeviceGetPowerUsage", lambda g: g.power_watts(), None),
    ("nvmlDeviceGetEnforcedPowerLimit", lambda g: g.power_limit_watts(), None),
    ("nvmlDeviceGetClockInfo", lambda g: g.clock_hertz("sm"), None),
    ("nvmlDeviceGetMaxClockInfo", lambda g: g.clock_max_hertz("memory"), None),
    ("nvmlDeviceGetCurrentClocksEventReasons", lambda g: g.clocks_event_reasons(), None),
    ("nvmlDeviceGetSupportedClocksEventReasons", lambda g: g.clocks_event_reasons(), None),
    (
        "nvmlDeviceGetCurrPcieLinkWidth",
        lambda g: g.pcie_link(),
        PcieLink(generation=4, generation_max=4, width=None, width_max=16),
    ),
]


@pytest.mark.parametrize(("function", "read", "expected"), NOT_SUPPORTED_CASES)
def test_not_supported_reads_as_absent_not_zero(
    fake: FakeNvml,
    make_backend: Any,
    caplog: pytest.LogCaptureFixture,
    function: str,
    read: Callable[[NvmlDevice], object],
    expected: object,
) -> None:
    fake.gpus[0].errors[function] = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu = make_backend(fake).gpus()[0]
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        assert read(gpu) == expected
    assert gpu.alive()
    assert caplog.records == []


def test_function_not_found_is_absent_and_logged_once_with_a_hint(
    fake: FakeNvml, make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake.function_errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    gpus = make_backend(fake).gpus()
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        assert [gpu.power_watts() for gpu in gpus] == [None, None]
        assert [gpu.power_watts() for gpu in gpus] == [None, None]
    [record] = log_lines(caplog, "nvmlDeviceGetPowerUsage")
    assert DRIVER_HINT in record.getMessage()
    assert record.__dict__["nvml_function"] == "nvmlDeviceGetPowerUsage"
    assert all(gpu.alive() for gpu in gpus)


def test_no_permission_is_absent_and_logged_once(
    fake: FakeNvml, make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake.function_errors["nvmlDeviceGetEnforcedPowerLimit"] = pynvml.NVML_ERROR_NO_PERMISSION
    gpus = make_backend(fake).gpus()
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        for _ in range(2):
            assert [gpu.power_limit_watts() for gpu in gpus] == [None, None]
    [record] = log_lines(caplog, "nvmlDeviceGetEnforcedPowerLimit")
    assert "permission" in record.getMessage().lower()
    assert record.__dict__["nvml_error"] == "NVML_ERROR_NO_PERMISSION"


def test_gpu_is_lost_on_one_gpu_while_the_other_keeps_reporting(
    fake: FakeNvml, make_backend: Any
) -> None:
    gpu0, gpu1 = make_backend(fake).gpus()
    fake.gpus[1].lost = True
    assert not gpu1.alive()
    assert readings(gpu1) == ABSENT_READINGS
    assert gpu0.alive()
    assert readings(gpu0) == FULL_READINGS


def test_scrapes_never_ask_a_lost_gpu_again(fake: FakeNvml, make_backend: Any) -> None:
    # Only the background probe asks it (below): a GPU off the bus can make each call slow.
    gpu1 = make_backend(fake).gpus()[1]
    fake.gpus[1].lost = True
    assert gpu1.temperature_celsius() is None
    fake.gpus[1].lost = False
    calls = sum(fake.calls.values())
    assert not gpu1.alive()
    assert readings(gpu1) == ABSENT_READINGS
    assert sum(fake.calls.values()) == calls


def test_unknown_error_marks_that_gpu_lost(fake: FakeNvml, make_backend: Any) -> None:
    fake.gpus[1].errors["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_UNKNOWN
    gpu0, gpu1 = make_backend(fake).gpus()
    assert gpu1.temperature_celsius() is None
    assert not gpu1.alive()
    assert readings(gpu1) == ABSENT_READINGS
    assert gpu0.alive()
    assert readings(gpu0) == FULL_READINGS


# Lost GPUs coming back.


def scrape(backend: NvmlBackend) -> list[Sample]:
    """One scrape of every collector, as the /metrics route makes it."""
    metrics = GpuMetrics(backend, ExporterInfo("test", run_ttl_seconds=300))
    return [sample for family in metrics.collect() for sample in family.samples]


def gpu_up(backend: NvmlBackend) -> dict[str, float]:
    return {s.labels["uuid"]: s.value for s in scrape(backend) if s.name == "mirrorwatch_gpu_up"}


def temperature_series(backend: NvmlBackend) -> set[str]:
    """The UUIDs that have a temperature series in a scrape."""
    return {
        s.labels["uuid"] for s in scrape(backend) if s.name == "mirrorwatch_gpu_temperature_celsius"
    }


def probes(fake: FakeNvml) -> int:
    """Probes so far: after init, only a probe asks NVML for a handle."""
    return fake.calls["nvmlDeviceGetHandleByIndex"]


def test_a_lost_gpu_comes_back_by_itself_when_nvml_answers_for_it_again(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake)
    gpu0, gpu1 = backend.gpus()
    fake.gpus[1].errors["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_GPU_IS_LOST
    assert gpu1.temperature_celsius() is None
    assert gpu_up(backend) == {"GPU-aaaa": 1.0, "GPU-bbbb": 0.0}
    assert temperature_series(backend) == {"GPU-aaaa"}
    assert readings(gpu0) == FULL_READINGS

    del fake.gpus[1].errors["nvmlDeviceGetTemperature"]  # e.g. after `nvidia-smi -r -i 1`
    clock.advance(4.0)
    backend.poll()
    assert gpu_up(backend)["GPU-bbbb"] == 0.0  # the first probe is 5 s after the loss
    clock.advance(1.0)
    backend.poll()
    assert gpu_up(backend) == {"GPU-aaaa": 1.0, "GPU-bbbb": 1.0}
    assert temperature_series(backend) == {"GPU-aaaa", "GPU-bbbb"}
    assert readings(gpu1) == FULL_READINGS
    assert backend.gpus() == (gpu0, gpu1)  # the same GPUs, without a re-init
    assert fake.calls["nvmlInit"] == 1


def test_a_lost_gpu_is_probed_from_5_s_doubling_up_to_the_retry_maximum(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake, retry_max_s=30.0)
    gpu1 = backend.gpus()[1]
    fake.gpus[1].lost = True
    assert not gpu1.alive()
    lost_at, before = clock.now, probes(fake)
    probed_at: list[float] = []
    for _ in range(130):
        clock.advance(1.0)
        backend.poll()
        if probes(fake) > before + len(probed_at):
            probed_at.append(clock.now - lost_at)
    assert probed_at == [5.0, 15.0, 35.0, 65.0, 95.0, 125.0]  # waits 5, 10, 20, 30, 30, 30
    assert not gpu1.alive()
    assert backend.status().up
    assert fake.calls["nvmlInit"] == 1


def test_a_gpu_lost_again_after_coming_back_is_probed_from_5_s_again(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake, retry_max_s=30.0)
    gpu1 = backend.gpus()[1]
    fake.gpus[1].lost = True
    assert not gpu1.alive()
    for _ in range(3):  # probes at 5 and 15 s fail
        clock.advance(5.0)
        backend.poll()
    fake.gpus[1].lost = False
    clock.advance(20.0)
    backend.poll()
    assert gpu1.alive()
    fake.gpus[1].lost = True
    assert not gpu1.alive()
    fake.gpus[1].lost = False
    clock.advance(5.0)
    backend.poll()
    assert gpu1.alive()


@pytest.mark.parametrize(
    ("error", "back"),
    [
        ("NVML_ERROR_NOT_SUPPORTED", True),  # a reading it cannot give: it answers
        ("NVML_ERROR_NO_PERMISSION", True),
        ("NVML_ERROR_RESET_REQUIRED", False),
        ("NVML_ERROR_UNKNOWN", False),
        ("NVML_ERROR_TIMEOUT", False),
    ],
)
def test_a_lost_gpu_comes_back_only_when_its_probe_reading_answers(
    fake: FakeNvml, make_backend: Any, clock: FakeClock, error: str, back: bool
) -> None:
    backend = make_backend(fake)
    gpu1 = backend.gpus()[1]
    fake.gpus[1].lost = True
    assert not gpu1.alive()
    fake.gpus[1].lost = False
    fake.gpus[1].errors["nvmlDeviceGetMemoryInfo"] = getattr(pynvml, error)
    before = probes(fake)
    clock.advance(5.0)
    backend.poll()
    assert probes(fake) == before + 1
    assert gpu1.alive() is back


def test_loss_and_recovery_are_logged_once_each_with_the_uuid_and_time_lost(
    fake: FakeNvml, make_backend: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = make_backend(fake)
    gpu1 = backend.gpus()[1]
    with caplog.at_level(logging.INFO, logger="mirrorwatch.exporter.nvml"):
        fake.gpus[1].lost = True
        for _ in range(3):
            assert not gpu1.alive()
            assert gpu1.power_watts() is None
        clock.advance(5.0)
        backend.poll()  # still lost
        fake.gpus[1].lost = False
        clock.advance(10.0)
        backend.poll()
        assert gpu1.alive()
    [lost] = log_lines(caplog, "is lost")
    assert lost.levelno == logging.WARNING
    assert lost.__dict__["uuid"] == "GPU-bbbb"
    [back] = log_lines(caplog, "is back")
    assert back.getMessage() == (
        "GPU 1 (GPU-bbbb) is back after 15 s lost: NVML answers for it again"
    )
    assert back.__dict__["uuid"] == "GPU-bbbb"
    assert back.__dict__["lost_seconds"] == 15.0


def test_a_different_gpu_at_a_lost_gpus_index_keeps_it_lost_and_is_logged_once(
    fake: FakeNvml, make_backend: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = make_backend(fake, retry_max_s=30.0)
    gpu1 = backend.gpus()[1]
    fake.gpus[1].lost = True
    assert not gpu1.alive()
    fake.gpus[1] = FakeGpu(uuid="GPU-cccc", pci_bus_id="00000000:65:00.0")
    before = probes(fake)
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        for _ in range(8):
            clock.advance(5.0)
            backend.poll()
    assert probes(fake) == before + 3  # at 5, 15 and 35 s: it keeps backing off
    assert not gpu1.alive()
    assert gpu_up(backend) == {"GPU-aaaa": 1.0, "GPU-bbbb": 0.0}
    assert [gpu.uuid for gpu in backend.gpus()] == ["GPU-aaaa", "GPU-bbbb"]
    [record] = log_lines(caplog, "stays lost")
    assert "GPU-cccc" in record.getMessage()
    assert "restart the exporter" in record.getMessage()
    assert fake.calls["nvmlInit"] == 1


def test_a_gpu_lost_by_xid_79_comes_back_the_same_way_and_keeps_its_xid_counts(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake)
    gpu1 = backend.gpus()[1]
    fake.xid(1, 79)
    backend.poll()
    assert gpu_up(backend) == {"GPU-aaaa": 1.0, "GPU-bbbb": 0.0}
    clock.advance(5.0)
    backend.poll()  # NVML answers for it: XID 79 was transient
    assert gpu_up(backend) == {"GPU-aaaa": 1.0, "GPU-bbbb": 1.0}
    assert gpu1.power_watts() == 250.5
    assert gpu1.xid_errors_total() == {79: 1.0}
    fake.xid(1, 79)
    backend.poll()
    assert not gpu1.alive()
    assert gpu1.xid_errors_total() == {79: 2.0}


def test_a_gpu_answering_under_a_new_handle_comes_back_through_a_reinit(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake)
    fake.xid(1, 13)
    backend.poll()
    fake.gpus[1].lost = True
    assert not backend.gpus()[1].alive()
    fake.gpus[1].lost = False
    fake.handle_epoch += 1  # the old handle is not the one NVML hands out now
    clock.advance(5.0)
    backend.poll()
    assert backend.status().reason == (
        "GPU 1 (GPU-bbbb) answers again under a new NVML handle; re-initialising."
    )
    backend.poll()
    assert gpu_up(backend) == {"GPU-aaaa": 1.0, "GPU-bbbb": 1.0}
    assert fake.calls["nvmlInit"] == 2
    assert backend.gpus()[1].xid_errors_total() == {13: 1.0}
    fake.xid(1, 13)  # the new event set hears it under its new handle
    backend.poll()
    assert backend.gpus()[1].xid_errors_total() == {13: 2.0}


def test_pcie_sampling_resumes_after_recovery_without_counting_the_time_lost(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    fake.gpus[1].pcie_tx_bytes = None
    fake.gpus[1].pcie_rx_bytes = None
    backend = make_backend(fake, pcie_sample_interval_s=1.0)
    gpu1 = backend.gpus()[1]
    backend.poll()
    clock.advance(1.0)
    backend.poll()
    one_second = (1000 * 1024.0, 3000 * 1024.0)
    assert gpu1.pcie_bytes_total() == one_second
    fake.gpus[1].lost = True
    clock.advance(1.0)
    backend.poll()  # the sampler finds it lost
    assert gpu1.pcie_bytes_total() is None
    fake.gpus[1].lost = False
    clock.advance(5.0)
    backend.poll()  # back after 5 s: its first sample only restarts the clock
    assert gpu1.pcie_bytes_total() == one_second
    clock.advance(1.0)
    backend.poll()
    assert gpu1.pcie_bytes_total() == (2 * one_second[0], 2 * one_second[1])


def test_the_background_thread_brings_a_lost_gpu_back(fake: FakeNvml) -> None:
    # A retry maximum of 10 ms caps the first probe's wait too.
    backend = NvmlBackend(nvml=fake, retry_initial_s=0.005, retry_max_s=0.01)
    backend.start()
    try:
        gpu1 = backend.gpus()[1]
        fake.gpus[1].lost = True
        assert not gpu1.alive()
        fake.gpus[1].lost = False
        deadline = time.monotonic() + 5.0
        while not gpu1.alive() and time.monotonic() < deadline:
            time.sleep(0.002)
        assert gpu1.alive()
    finally:
        backend.shutdown()
    assert fake.calls["nvmlInit"] == 1


# Field values.


def test_field_values_are_checked_field_by_field(fake: FakeNvml, make_backend: Any) -> None:
    """Only the fields that answered NotSupported are read again, each by its single call."""
    fake.gpus[0].field_errors = {
        pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: pynvml.NVML_ERROR_NOT_SUPPORTED,
    }
    gpu = make_backend(fake).gpus()[0]
    assert gpu.throttle_seconds_total() == FULL_READINGS["throttle_seconds_total"]
    assert gpu.ecc_errors_total() == FULL_READINGS["ecc_errors_total"]
    assert gpu.energy_joules_total() == FULL_READINGS["energy_joules_total"]
    assert fake.calls["nvmlDeviceGetViolationStatus"] == 1  # thermal only
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 1  # uncorrected only
    assert fake.calls["nvmlDeviceGetEccMode"] == 0  # the ECC mode field answered
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert gpu.alive()


def test_a_field_answering_gpu_is_lost_marks_the_gpu_lost(
    fake: FakeNvml, make_backend: Any
) -> None:
    fake.gpus[0].field_errors = {
        pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: pynvml.NVML_ERROR_GPU_IS_LOST
    }
    gpu = make_backend(fake).gpus()[0]
    assert gpu.pcie_replays_total() is None
    assert not gpu.alive()
    assert fake.calls["nvmlDeviceGetPcieReplayCounter"] == 0  # a lost GPU is not asked again


def test_throttle_counters_come_from_one_field_values_call(
    fake: FakeNvml, make_backend: Any
) -> None:
    gpu = make_backend(fake).gpus()[0]
    before = fake.calls["nvmlDeviceGetFieldValues"]
    gpu.throttle_seconds_total()
    assert fake.calls["nvmlDeviceGetFieldValues"] == before + 1


# The batched call succeeds but chosen fields answer NotSupported. Real pynvml (nvidia-ml-py
# 13.615.71, pynvml.py): nvmlDeviceGetFieldValues fills a c_nvmlFieldValue_t array, runs
# _nvmlCheckReturn only on the call's own return and returns the array unchecked, so each
# field's outcome is its own ``nvmlReturn`` member; NVML reports support per field there.
_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
_PERF_POLICY_FIELDS = (
    pynvml.NVML_FI_DEV_PERF_POLICY_POWER,
    pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL,
    pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST,
    pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT,
    pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION,
    pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY,
)
_ECC_FIELDS = (
    pynvml.NVML_FI_DEV_ECC_CURRENT,
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
)
# reading -> the fields its batched read asks for, and its single-call fallbacks.
BATCHED_READS: list[tuple[str, tuple[int, ...], tuple[str, ...]]] = [
    ("throttle_seconds_total", _PERF_POLICY_FIELDS, ("nvmlDeviceGetViolationStatus",)),
    (
        "energy_joules_total",
        (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,),
        ("nvmlDeviceGetTotalEnergyConsumption",),
    ),
    (
        "pcie_replays_total",
        (pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,),
        ("nvmlDeviceGetPcieReplayCounter",),
    ),
    ("ecc_errors_total", _ECC_FIELDS, ("nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors")),
]


@pytest.mark.parametrize(
    ("reading", "fields", "functions"), BATCHED_READS, ids=[case[0] for case in BATCHED_READS]
)
def test_fields_answering_not_supported_fall_back_to_their_single_calls(
    fake: FakeNvml,
    make_backend: Any,
    caplog: pytest.LogCaptureFixture,
    reading: str,
    fields: tuple[int, ...],
    functions: tuple[str, ...],
) -> None:
    fake.gpus[0].field_errors = dict.fromkeys(fields, _NOT_SUPPORTED)
    gpu = make_backend(fake).gpus()[0]
    before = fake.calls["nvmlDeviceGetFieldValues"]
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        assert readings(gpu)[reading] == FULL_READINGS[reading]
    assert fake.calls["nvmlDeviceGetFieldValues"] > before  # the batched call itself succeeded
    assert all(fake.calls[function] > 0 for function in functions)
    assert caplog.records == []
    assert gpu.alive()


@pytest.mark.parametrize(
    ("reading", "fields", "functions"), BATCHED_READS, ids=[case[0] for case in BATCHED_READS]
)
def test_a_batched_reading_is_absent_only_when_neither_field_nor_single_call_answers(
    fake: FakeNvml,
    make_backend: Any,
    caplog: pytest.LogCaptureFixture,
    reading: str,
    fields: tuple[int, ...],
    functions: tuple[str, ...],
) -> None:
    fake.gpus[0].field_errors = dict.fromkeys(fields, _NOT_SUPPORTED)
    fake.gpus[0].errors = dict.fromkeys(functions, _NOT_SUPPORTED)
    gpu = make_backend(fake).gpus()[0]
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        assert readings(gpu)[reading] == ABSENT_READINGS[reading]
    assert caplog.records == []
    assert gpu.alive()


def test_throttle_time_falls_back_per_reason_when_perf_policy_fields_are_unsupported(
    fake: FakeNvml, make_backend: Any
) -> None:
    """Issue 15: every NVML_FI_DEV_PERF_POLICY_* field answers NotSupported in a successful
    nvmlDeviceGetFieldValues; nvmlDeviceGetViolationStatus answers each reason."""
    fake.gpus[0].field_errors = dict.fromkeys(_PERF_POLICY_FIELDS, _NOT_SUPPORTED)
    gpu = make_backend(fake).gpus()[0]
    assert gpu.throttle_seconds_total() == FULL_READINGS["throttle_seconds_total"]
    assert fake.calls["nvmlDeviceGetViolationStatus"] == 6


def test_a_throttle_reason_is_absent_only_when_neither_its_field_nor_violation_status_answers(
    fake: FakeNvml, make_backend: Any
) -> None:
    gpu0 = fake.gpus[0]
    gpu0.violation_ns[pynvml.NVML_PERF_POLICY_THERMAL] = None  # neither source answers
    gpu0.field_errors = {pynvml.NVML_FI_DEV_PERF_POLICY_POWER: _NOT_SUPPORTED}
    gpu = make_backend(fake).gpus()[0]
    assert gpu.throttle_seconds_total() == {
        "power": 2.5,  # from nvmlDeviceGetViolationStatus
        "sync_boost": 0.0,
        "board_limit": 0.5,
        "low_utilization": 7.0,
        "reliability": 0.0,
    }
    assert fake.calls["nvmlDeviceGetViolationStatus"] == 2  # power and thermal


def test_ecc_falls_back_field_by_field(fake: FakeNvml, make_backend: Any) -> None:
    fake.gpus[0].field_errors = {
        pynvml.NVML_FI_DEV_ECC_CURRENT: _NOT_SUPPORTED,
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: _NOT_SUPPORTED,
    }
    fake.gpus[0].ecc_uncorrected = 5
    gpu = make_backend(fake).gpus()[0]
    assert gpu.ecc_errors_total() == {"corrected": 12.0, "uncorrected": 5.0}
    assert fake.calls["nvmlDeviceGetEccMode"] == 1
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 1  # corrected only


def test_ecc_mode_off_from_the_fallback_reads_absent(fake: FakeNvml, make_backend: Any) -> None:
    fake.gpus[0].field_errors = {pynvml.NVML_FI_DEV_ECC_CURRENT: _NOT_SUPPORTED}
    fake.gpus[0].ecc_enabled = False
    assert make_backend(fake).gpus()[0].ecc_errors_total() is None


@pytest.mark.parametrize(
    "fields",
    [
        (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,),
        (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
    ],
    ids=["tx", "tx and rx"],
)
def test_pcie_byte_fields_answering_not_supported_fall_back_to_sampled_throughput(
    fake: FakeNvml, make_backend: Any, clock: FakeClock, fields: tuple[int, ...]
) -> None:
    fake.gpus[0].field_errors = dict.fromkeys(fields, _NOT_SUPPORTED)
    backend = make_backend(fake, pcie_sample_interval_s=1.0)
    gpu0, gpu1 = backend.gpus()
    backend.poll()
    clock.advance(2.0)
    backend.poll()
    assert gpu0.pcie_bytes_total() == (2 * 1000 * 1024.0, 2 * 3000 * 1024.0)
    assert gpu1.pcie_bytes_total() == (5_000_000.0, 9_000_000.0)


def test_an_nvlink_throughput_field_answering_not_supported_is_absent_for_that_link_only(
    fake: FakeNvml, make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No single call stands in: the NVLink utilization counters (deprecated in CUDA 13.0)
    count what a root-only control selects, so they are not read; see docs/metrics.md."""
    fake.gpus[0].nvlinks = {
        0: FakeLink(transmit_kib=10, receive_kib=20),
        1: FakeLink(transmit_kib=30, receive_kib=40),
    }
    fake.gpus[0].field_errors = {
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1): _NOT_SUPPORTED,
    }
    gpu = make_backend(fake).gpus()[0]
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        links = gpu.nvlinks()
    assert {link: (c.transmit_bytes, c.receive_bytes) for link, c in links.items()} == {
        0: (10_240.0, 20_480.0),
        1: (None, 40_960.0),
    }
    assert caplog.records == []
    assert fake.calls["nvmlDeviceGetNvLinkUtilizationCounter"] == 0


def test_counters_fall_back_to_the_per_function_api_when_field_values_fail(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    fake.function_errors["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    backend = make_backend(fake)
    gpu = backend.gpus()[0]
    assert gpu.energy_joules_total() == 123_456.789
    assert gpu.throttle_seconds_total() == FULL_READINGS["throttle_seconds_total"]
    assert gpu.ecc_errors_total() == {"corrected": 12.0, "uncorrected": 1.0}
    assert gpu.pcie_replays_total() == 3.0
    assert fake.calls["nvmlDeviceGetViolationStatus"] == 6
    # Without the PCIe byte-counter fields the background thread integrates throughput.
    assert gpu.pcie_bytes_total() is None
    backend.poll()
    assert gpu.pcie_bytes_total() == (0.0, 0.0)


@pytest.mark.parametrize("enabled", [False, None])
@pytest.mark.parametrize("field_values", [True, False])
def test_ecc_reads_absent_when_ecc_is_off_or_unsupported(
    fake: FakeNvml, make_backend: Any, enabled: bool | None, field_values: bool
) -> None:
    if not field_values:
        fake.function_errors["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    fake.gpus[0].ecc_enabled = enabled
    assert make_backend(fake).gpus()[0].ecc_errors_total() is None


def test_pcie_bytes_are_integrated_from_throughput_without_byte_fields(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    fake.gpus[0].pcie_tx_bytes = None
    fake.gpus[0].pcie_rx_bytes = None
    backend = make_backend(fake, pcie_sample_interval_s=1.0)
    gpu0, gpu1 = backend.gpus()
    backend.poll()
    clock.advance(2.0)
    backend.poll()
    # 1000 and 3000 KB/s (KiB) held for 2 s.
    assert gpu0.pcie_bytes_total() == (2 * 1000 * 1024.0, 2 * 3000 * 1024.0)
    assert gpu1.pcie_bytes_total() == (5_000_000.0, 9_000_000.0)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 4  # two samples of GPU 0 only


def test_pcie_bytes_do_not_count_an_nvml_outage(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    fake.gpus[0].pcie_tx_bytes = None
    fake.gpus[0].pcie_rx_bytes = None
    backend = make_backend(fake, pcie_sample_interval_s=1.0)
    backend.poll()
    clock.advance(1.0)
    backend.poll()
    one_second = (1000 * 1024.0, 3000 * 1024.0)
    assert backend.gpus()[0].pcie_bytes_total() == one_second
    fake.driver_error = pynvml.NVML_ERROR_UNINITIALIZED
    assert backend.gpus()[0].utilization_ratio() is None
    backend.poll()  # tears down; the re-init fails
    fake.driver_error = None
    clock.advance(30.0)
    backend.poll()  # up again: the first sample of the new session only restarts the clock
    assert backend.gpus()[0].pcie_bytes_total() == one_second
    clock.advance(1.0)
    backend.poll()
    assert backend.gpus()[0].pcie_bytes_total() == (2 * one_second[0], 2 * one_second[1])


def test_clocks_event_reasons_fall_back_to_the_throttle_names(
    fake: FakeNvml, make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetSupportedClocksEventReasons",
    ):
        fake.function_errors[name] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    gpu = make_backend(fake).gpus()[0]
    with caplog.at_level(logging.WARNING, logger="mirrorwatch.exporter.nvml"):
        assert gpu.clocks_event_reasons() == FULL_READINGS["clocks_event_reasons"]
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    assert fake.calls["nvmlDeviceGetSupportedClocksThrottleReasons"] == 1
    assert caplog.records == []


def test_clocks_event_reasons_fall_back_when_the_binding_lacks_the_new_names(
    fake: FakeNvml, make_backend: Any
) -> None:
    fake.remove("nvmlDeviceGetCurrentClocksEventReasons")
    fake.remove("nvmlDeviceGetSupportedClocksEventReasons")
    gpu = make_backend(fake).gpus()[0]
    assert gpu.clocks_event_reasons() == FULL_READINGS["clocks_event_reasons"]


# Init failures, retry and recovery.


@pytest.mark.parametrize(
    ("code", "named"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 was not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "Driver/library version mismatch"),
        (pynvml.NVML_ERROR_UNKNOWN, "Unknown Error (NVML_ERROR_UNKNOWN)"),
    ],
)
def test_init_failure_is_a_status_reason_until_a_retry_succeeds(
    fake: FakeNvml, make_backend: Any, clock: FakeClock, code: int, named: str
) -> None:
    fake.init_error = code
    backend = make_backend(fake)
    status = backend.status()
    assert not status.up
    assert status.reason is not None
    assert status.reason.startswith("NVML could not start: ")
    assert named in status.reason
    assert backend.gpus() == ()
    assert backend.driver_version() is None

    fake.init_error = None
    assert backend.poll() == 1.0  # not due yet
    assert not backend.status().up
    clock.advance(1.0)
    backend.poll()
    assert backend.status().up
    assert [gpu.uuid for gpu in backend.gpus()] == ["GPU-aaaa", "GPU-bbbb"]


def test_init_retries_back_off_exponentially_up_to_the_maximum(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    backend = make_backend(fake, retry_initial_s=1.0, retry_max_s=4.0)
    delays = []
    for _ in range(5):
        delay = backend.poll()
        delays.append(delay)
        clock.advance(delay)
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert fake.calls["nvmlInit"] == 5


def test_a_missing_pynvml_package_is_a_status_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    backend = NvmlBackend(background=False)
    backend.start()
    reason = backend.status().reason
    assert not backend.status().up
    assert reason is not None
    assert "nvidia-ml-py package (pynvml) cannot be imported" in reason
    backend.shutdown()


def test_a_pynvml_that_fails_at_import_is_a_status_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_import(name: str) -> ModuleType:
        raise KeyError(name)

    monkeypatch.setattr(importlib, "import_module", broken_import)
    backend = NvmlBackend(background=False)
    backend.start()
    assert (
        backend.status().reason
        == "NVML could not start: importing pynvml failed: KeyError: 'pynvml'."
    )
    backend.shutdown()


def test_an_unexpected_init_exception_is_a_status_reason(
    fake: FakeNvml, make_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("binding exploded")

    monkeypatch.setattr(fake, "nvmlInit", broken)
    backend = make_backend(fake)
    assert backend.status().reason == "NVML could not start: RuntimeError: binding exploded."


def test_a_reloaded_driver_takes_the_backend_down_and_back_up(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake)
    old_gpu = backend.gpus()[0]
    # The driver is unloaded under a running exporter: every call answers Uninitialized.
    fake.driver_error = pynvml.NVML_ERROR_UNINITIALIZED
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert old_gpu.utilization_ratio() is None
    status = backend.status()
    assert not status.up
    assert status.reason is not None
    assert "NVML_ERROR_UNINITIALIZED" in status.reason
    assert backend.gpus() == ()

    backend.poll()  # tears down, and the first re-init fails while the driver loads
    assert fake.calls["nvmlShutdown"] == 1
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in (backend.status().reason or "")

    fake.driver_error = None
    fake.init_error = None
    clock.advance(1.0)
    backend.poll()
    assert backend.status().up
    new_gpu = backend.gpus()[0]
    assert new_gpu is not old_gpu
    assert new_gpu.utilization_ratio() == 0.87


def test_the_health_check_notices_vanished_gpus_and_reinitialises(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake)
    fake.gpus.pop()
    clock.advance(HEALTH_CHECK_INTERVAL_S)
    backend.poll()
    assert backend.status().reason == "NVML now sees 1 GPU(s) instead of 2; re-initialising."
    backend.poll()
    assert backend.status().up
    assert [gpu.uuid for gpu in backend.gpus()] == ["GPU-aaaa"]


def test_every_gpu_lost_triggers_a_reinit_with_backoff(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    backend = make_backend(fake, retry_initial_s=10.0, retry_max_s=20.0)
    for gpu in fake.gpus:
        gpu.lost = True
    assert [gpu.alive() for gpu in backend.gpus()] == [False, False]
    # The driver came back; the old handles still answer GpuIsLost.
    clock.advance(HEALTH_CHECK_INTERVAL_S)
    backend.poll()
    assert backend.status().reason == "every GPU is lost; re-initialising."
    for gpu in fake.gpus:
        gpu.lost = False
    backend.poll()
    assert [gpu.alive() for gpu in backend.gpus()] == [True, True]
    assert fake.calls["nvmlInit"] == 2

    # GPUs that stay lost are re-initialised again only after the backoff (10 s, then 20 s).
    for gpu in fake.gpus:
        gpu.lost = True
    assert not any(gpu.alive() for gpu in backend.gpus())
    clock.advance(HEALTH_CHECK_INTERVAL_S)
    backend.poll()
    assert backend.status().up
    assert fake.calls["nvmlInit"] == 2


def test_the_background_thread_retries_until_nvml_starts(fake: FakeNvml) -> None:
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    backend = NvmlBackend(nvml=fake, retry_initial_s=0.005, retry_max_s=0.01)
    backend.start()
    try:
        assert not backend.status().up
        fake.init_error = None
        deadline = time.monotonic() + 5.0
        while not backend.status().up and time.monotonic() < deadline:
            time.sleep(0.002)
        assert backend.status().up
    finally:
        backend.shutdown()
    assert fake.calls["nvmlShutdown"] == 1


# XID events.


def test_xid_events_are_counted_per_gpu_and_xid(fake: FakeNvml, make_backend: Any) -> None:
    backend = make_backend(fake)
    fake.xid(0, 13)
    fake.xid(0, 13)
    fake.xid(1, 48)
    backend.poll()
    gpu0, gpu1 = backend.gpus()
    assert gpu0.xid_errors_total() == {13: 2.0}
    assert gpu1.xid_errors_total() == {48: 1.0}
    assert gpu0.alive()
    assert gpu1.alive()


def test_each_xid_number_keeps_the_unix_time_of_its_latest_event(
    fake: FakeNvml, make_backend: Any
) -> None:
    backend = make_backend(fake)
    gpu0, gpu1 = backend.gpus()
    assert gpu0.xid_last_event_timestamp_seconds() == {}
    fake.xid(0, 13)
    fake.xid(1, 48)
    before = time.time()
    backend.poll()
    after = time.time()
    first = gpu0.xid_last_event_timestamp_seconds()
    assert list(first) == [13]
    assert before <= first[13] <= after
    assert list(gpu1.xid_last_event_timestamp_seconds()) == [48]
    time.sleep(0.01)
    fake.xid(0, 13)
    backend.poll()
    assert gpu0.xid_errors_total() == {13: 2.0}
    assert gpu0.xid_last_event_timestamp_seconds()[13] > first[13]
    assert list(gpu1.xid_last_event_timestamp_seconds()) == [48]


def test_xid_counts_and_times_survive_an_nvml_outage(
    fake: FakeNvml, make_backend: Any, clock: FakeClock
) -> None:
    # The alert rules rely on it: after NVML comes back, the same XID series return unchanged.
    backend = make_backend(fake)
    fake.xid(0, 13)
    backend.poll()
    counts = backend.gpus()[0].xid_errors_total()
    times = backend.gpus()[0].xid_last_event_timestamp_seconds()
    fake.driver_error = pynvml.NVML_ERROR_UNINITIALIZED
    assert backend.gpus()[0].utilization_ratio() is None
    backend.poll()
    assert not backend.status().up
    fake.driver_error = None
    clock.advance(1.0)
    backend.poll()
    assert backend.status().up
    assert backend.gpus()[0].xid_errors_total() == counts == {13: 1.0}
    assert backend.gpus()[0].xid_last_event_timestamp_seconds() == times


def test_xid_79_marks_the_gpu_lost(fake: FakeNvml, make_backend: Any) -> None:
    backend = make_backend(fake)
    fake.xid(1, 79)
    backend.poll()
    gpu0, gpu1 = backend.gpus()
    assert not gpu1.alive()
    assert gpu1.xid_errors_total() == {79: 1.0}
    assert gpu1.power_watts() is None
    assert gpu0.alive()
    assert gpu0.power_watts() == 250.5


def test_gpus_without_xid_events_are_skipped_and_the_rest_still_counted(
    fake: FakeNvml, make_backend: Any
) -> None:
    fake.gpus[0].xid_events_supported = False
    backend = make_backend(fake)
    fake.xid(1, 31)
    backend.poll()
    assert backend.status().up
    assert backend.gpus()[1].xid_errors_total() == {31: 1.0}


# Topology.


def test_topology_prefers_nvlink_then_maps_the_common_ancestor(
    make_backend: Any,
) -> None:
    buses = ["00000000:17:00.0", "00000000:31:00.0", "00000000:B1:00.0", "00000000:CA:00.0"]
    gpus = [FakeGpu(uuid=f"GPU-{i}", pci_bus_id=bus) for i, bus in enumerate(buses)]
    gpus[0].nvlinks = {0: FakeLink(remote_pci_bus_id=buses[1]), 1: FakeLink(active=False)}
    gpus[1].nvlinks = {0: FakeLink(remote_pci_bus_id=buses[0])}
    fake = FakeNvml(gpus)
    fake.topology = {
        frozenset((0, 1)): pynvml.NVML_TOPOLOGY_SYSTEM,  # NVLink wins over the PCIe path
        frozenset((0, 2)): pynvml.NVML_TOPOLOGY_SINGLE,
        frozenset((0, 3)): pynvml.NVML_TOPOLOGY_MULTIPLE,
        frozenset((1, 2)): pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
        frozenset((1, 3)): pynvml.NVML_TOPOLOGY_NODE,
        frozenset((2, 3)): pynvml.NVML_TOPOLOGY_SYSTEM,
    }
    peers = {gpu.index: list(gpu.peers()) for gpu in make_backend(fake).gpus()}
    assert peers == {
        0: [PeerLink(1, "nvlink"), PeerLink(2, "pcie_switch"), PeerLink(3, "pcie_switch")],
        1: [PeerLink(0, "nvlink"), PeerLink(2, "pcie_host_bridge"), PeerLink(3, "numa_node")],
        2: [PeerLink(0, "pcie_switch"), PeerLink(1, "pcie_host_bridge"), PeerLink(3, "cross_numa")],
        3: [PeerLink(0, "pcie_switch"), PeerLink(1, "numa_node"), PeerLink(2, "cross_numa")],
    }


def test_topology_internal_level_is_a_pcie_switch(make_backend: Any) -> None:
    fake = FakeNvml(two_gpus())
    fake.topology = {frozenset((0, 1)): pynvml.NVML_TOPOLOGY_INTERNAL}
    gpu0, gpu1 = make_backend(fake).gpus()
    assert list(gpu0.peers()) == [PeerLink(1, "pcie_switch")]
    assert list(gpu1.peers()) == [PeerLink(0, "pcie_switch")]


def test_gpus_on_an_nvswitch_reach_each_other_over_nvlink(make_backend: Any) -> None:
    gpus = two_gpus()
    for gpu in gpus:
        gpu.nvlinks = {
            0: FakeLink(
                remote_pci_bus_id="00000000:C1:00.0",
                remote_type=pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH,
            )
        }
    fake = FakeNvml(gpus)
    fake.topology = {frozenset((0, 1)): pynvml.NVML_TOPOLOGY_SYSTEM}
    gpu0, gpu1 = make_backend(fake).gpus()
    assert list(gpu0.peers()) == [PeerLink(1, "nvlink")]
    assert list(gpu1.peers()) == [PeerLink(0, "nvlink")]


# Shutdown.


def test_shutdown_frees_the_event_set_and_calls_nvml_shutdown_once(
    fake: FakeNvml, make_backend: Any
) -> None:
    backend = make_backend(fake)
    backend.shutdown()
    backend.shutdown()
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.event_sets_freed == 1
    assert not backend.status().up
    assert backend.gpus() == ()


def test_shutdown_stops_the_background_thread(fake: FakeNvml) -> None:
    backend = NvmlBackend(nvml=fake)
    backend.start()
    backend.shutdown()
    assert fake.calls["nvmlShutdown"] == 1
    calls = sum(fake.calls.values())
    time.sleep(0.01)
    assert sum(fake.calls.values()) == calls


def test_shutdown_without_a_successful_init_does_not_call_nvml_shutdown(
    fake: FakeNvml, make_backend: Any
) -> None:
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    backend = make_backend(fake)
    backend.shutdown()
    assert fake.calls["nvmlShutdown"] == 0
