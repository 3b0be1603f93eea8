"""What a scrape and an idle background round cost in NVML calls, against the fake pynvml.

What cannot change while a GPU lives in a session is read once; within one scrape the fields
come in one batched call and shared readings are asked once; idle, the background thread
blocks in the driver's event wait until other work is due instead of waking to spin.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.exposition import OpenMetricsRenderer, TextRenderer
from mirrorwatch.exporter.nvml import HEALTH_CHECK_INTERVAL_S, NvmlBackend
from mirrorwatch.exporter.nvml.events import EVENT_WAIT_MAX_MS
from mirrorwatch.exporter.nvml.loop import BackgroundLoop
from tests.exporter.fake_pynvml import FakeGpu, FakeNvml
from tests.exporter.test_nvml import FULL_READINGS, FakeClock, readings, two_gpus

# Readings that cannot change while a GPU lives, and how many calls one full read of them is.
STATIC_CALLS = {
    "nvmlDeviceGetTemperatureThreshold": 4,
    "nvmlDeviceGetMaxClockInfo": 3,
    "nvmlDeviceGetMaxPcieLinkGeneration": 1,
    "nvmlDeviceGetMaxPcieLinkWidth": 1,
    "nvmlDeviceGetNumFans": 1,
    "nvmlDeviceGetSupportedClocksEventReasons": 1,
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_backend(clock: FakeClock) -> Iterator[Callable[..., NvmlBackend]]:
    made: list[NvmlBackend] = []

    def make(nvml: FakeNvml, **options: Any) -> NvmlBackend:
        backend = NvmlBackend(nvml=nvml, background=False, clock=clock, **options)
        made.append(backend)
        backend.start()
        return backend

    yield make
    for backend in made:
        backend.shutdown()


def registry_of(backend: NvmlBackend) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300)))
    return registry


def calls_of_one_scrape(fake: FakeNvml, registry: CollectorRegistry) -> collections.Counter[str]:
    before = collections.Counter(fake.calls)
    TextRenderer().render(registry.collect())
    return fake.calls - before


def test_static_readings_are_read_once_per_session(make_backend: Any) -> None:
    fake = FakeNvml(two_gpus())
    registry = registry_of(make_backend(fake))
    first = calls_of_one_scrape(fake, registry)
    later = calls_of_one_scrape(fake, registry) + calls_of_one_scrape(fake, registry)
    assert {f: first[f] for f in STATIC_CALLS} == {f: 2 * n for f, n in STATIC_CALLS.items()}
    assert {f: later[f] for f in STATIC_CALLS} == dict.fromkeys(STATIC_CALLS, 0)


def test_a_scrape_reads_fields_utilization_and_memory_once_per_gpu(make_backend: Any) -> None:
    fake = FakeNvml(two_gpus())
    registry = registry_of(make_backend(fake))
    calls_of_one_scrape(fake, registry)
    calls = calls_of_one_scrape(fake, registry)
    assert calls["nvmlDeviceGetFieldValues"] == 2  # energy, throttle, PCIe, replays, ECC
    assert calls["nvmlDeviceGetUtilizationRates"] == 2  # both ratios from one call
    assert calls["nvmlDeviceGetMemoryInfo"] == 2  # the liveness probe's answer is the reading


def test_a_scrape_over_nvml_renders_the_same_values_as_before(make_backend: Any) -> None:
    gpu = make_backend(FakeNvml(two_gpus())).gpus()[0]
    assert gpu.alive()
    assert readings(gpu) == FULL_READINGS  # every reading of a round, once each
    assert readings(gpu) == FULL_READINGS  # and again: past the round, read afresh


def test_a_reading_asked_twice_in_one_scrape_is_read_afresh(make_backend: Any) -> None:
    fake = FakeNvml(two_gpus())
    gpu = make_backend(fake).gpus()[0]
    assert gpu.alive()
    assert gpu.utilization_ratio() == 0.87
    fake.gpus[0].utilization_percent = 50
    fake.gpus[0].energy_mj = 200_000_000
    before = fake.calls["nvmlDeviceGetFieldValues"]
    assert gpu.energy_joules_total() == 200_000.0  # the round's one batched read
    assert gpu.utilization_ratio() == 0.5  # not the round's first answer again
    assert gpu.energy_joules_total() == 200_000.0
    assert fake.calls["nvmlDeviceGetFieldValues"] == before + 2


def test_a_static_reading_lost_with_its_gpu_is_read_again_once_it_is_back(
    make_backend: Any, clock: FakeClock
) -> None:
    fake = FakeNvml(two_gpus())
    backend = make_backend(fake)
    gpu = backend.gpus()[1]
    fake.gpus[1].errors["nvmlDeviceGetTemperatureThreshold"] = pynvml.NVML_ERROR_GPU_IS_LOST
    assert gpu.temperature_threshold_celsius("slowdown") is None
    assert not gpu.alive()
    del fake.gpus[1].errors["nvmlDeviceGetTemperatureThreshold"]
    clock.advance(5.0)
    backend.poll()  # the probe finds it back
    assert gpu.alive()
    assert gpu.temperature_threshold_celsius("slowdown") == 90.0


def test_the_text_scrape_is_promtool_clean_and_parses_the_same_in_openmetrics(
    make_backend: Any,
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package")
    registry = registry_of(make_backend(FakeNvml(two_gpus())))
    families = list(registry.collect())
    text = TextRenderer().render(families).decode()
    openmetrics = OpenMetricsRenderer().render(families).decode()
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert (check.returncode, check.stdout + check.stderr) == (0, "")

    def samples(parsed: Any) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for family in parsed
            for s in family.samples
        }

    parsed = openmetrics_families(openmetrics)  # type: ignore[no-untyped-call]
    assert samples(parsed) == samples(text_string_to_metric_families(text))


# The background thread.


def test_idle_the_xid_wait_blocks_until_the_next_work_is_due(
    make_backend: Any, clock: FakeClock
) -> None:
    fake = FakeNvml(two_gpus())  # PCIe byte fields: nothing to sample every second
    backend = make_backend(fake)
    assert backend.poll() == 0.0
    assert fake.event_wait_timeouts_ms[-1] == EVENT_WAIT_MAX_MS  # health check 5 s away
    clock.advance(HEALTH_CHECK_INTERVAL_S - 0.25)
    backend.poll()
    assert fake.event_wait_timeouts_ms[-1] == 250  # no later than the health check
    assert EVENT_WAIT_MAX_MS >= 1000  # the 100 ms waits are gone


def test_without_xid_events_an_idle_round_sleeps_until_the_health_check(
    make_backend: Any,
) -> None:
    gpus = two_gpus()
    for gpu in gpus:
        gpu.xid_events_supported = False
    backend = make_backend(FakeNvml(gpus))
    assert backend.poll() == pytest.approx(HEALTH_CHECK_INTERVAL_S)


def test_gpus_without_pcie_byte_fields_are_sampled_every_second(make_backend: Any) -> None:
    gpus = [FakeGpu(uuid="GPU-aaaa", pcie_tx_bytes=None, pcie_rx_bytes=None)]
    gpus[0].xid_events_supported = False
    backend = make_backend(FakeNvml(gpus), pcie_sample_interval_s=1.0)
    assert backend.poll() == pytest.approx(1.0)


def test_wake_ends_the_background_sleep_at_once() -> None:
    rounds: list[float] = []
    woken = threading.Event()

    def poll() -> float:
        rounds.append(time.monotonic())
        if len(rounds) == 2:
            woken.set()
        return 3600.0

    loop = BackgroundLoop(poll, name="test-wake")
    loop.start()
    try:
        deadline = time.monotonic() + 5
        while not rounds and time.monotonic() < deadline:
            time.sleep(0.01)
        loop.wake()
        assert woken.wait(2.0)
    finally:
        assert loop.stop(2.0)
