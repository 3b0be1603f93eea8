"""NVML process lists, per-process SM share and GPM sampling, against the fake pynvml."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from mirrorwatch.exporter.backend import GpmReading, GpuProcess
from mirrorwatch.exporter.nvml import NvmlBackend
from mirrorwatch.exporter.nvml.lifecycle import GPM_SAMPLE_INTERVAL_S
from tests.exporter.fake_pynvml import FakeGpu, FakeNvml, FakeProcess, FakeProcessSample

GIB = 2**30
SM = pynvml.NVML_GPM_METRIC_SM_UTIL
OCCUPANCY = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
DRAM = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_backend(clock: FakeClock) -> Iterator[Callable[[FakeNvml], NvmlBackend]]:
    made: list[NvmlBackend] = []

    def make(nvml: FakeNvml) -> NvmlBackend:
        backend = NvmlBackend(nvml=nvml, background=False, clock=clock)
        made.append(backend)
        backend.start()
        return backend

    yield make
    for backend in made:
        backend.shutdown()


def hopper(**fields: Any) -> FakeGpu:
    return FakeGpu(
        uuid="GPU-hhhh",
        name="NVIDIA H100 80GB HBM3",
        gpm_supported=True,
        gpm_percent={SM: 72.5, OCCUPANCY: 40.0, TENSOR: 55.0, DRAM: 31.0},
        **fields,
    )


def test_compute_and_graphics_processes_are_counted_by_type_with_memory_in_bytes(
    make_backend: Any,
) -> None:
    fake = FakeNvml(
        [
            FakeGpu(
                compute_processes=[FakeProcess(4242, 6 * GIB), FakeProcess(77, None)],
                graphics_processes=[FakeProcess(4242, 6 * GIB), FakeProcess(900, GIB)],
                process_samples=[],
            )
        ]
    )
    reading = make_backend(fake).gpus()[0].processes()
    assert reading is not None
    assert reading.counts == {"compute": 2, "graphics": 2}
    by_pid = {p.pid: p for p in reading.processes}
    assert sorted(by_pid) == [77, 900, 4242]  # a process with both contexts listed once
    assert by_pid[4242].type == "compute"
    assert by_pid[4242].used_memory_bytes == 6.0 * GIB
    assert by_pid[77].used_memory_bytes is None  # NVML_VALUE_NOT_AVAILABLE: absent, not 0
    assert by_pid[900].type == "graphics"


def test_processes_are_absent_where_neither_list_is_supported(make_backend: Any) -> None:
    fake = FakeNvml([FakeGpu()])  # both lists answer NotSupported
    assert make_backend(fake).gpus()[0].processes() is None


def test_one_supported_list_counts_only_its_type(make_backend: Any) -> None:
    fake = FakeNvml([FakeGpu(compute_processes=[])])
    reading = make_backend(fake).gpus()[0].processes()
    assert reading is not None
    assert reading.counts == {"compute": 0}
    assert reading.processes == ()


def test_sm_share_is_the_newest_sample_since_the_last_read(make_backend: Any) -> None:
    gpu = FakeGpu(
        compute_processes=[FakeProcess(10, GIB), FakeProcess(11, GIB)],
        process_samples=[
            FakeProcessSample(pid=10, timeStamp=100, smUtil=20),
            FakeProcessSample(pid=10, timeStamp=300, smUtil=60),
            FakeProcessSample(pid=11, timeStamp=200, smUtil=5),
        ],
    )
    fake = FakeNvml([gpu])
    device = make_backend(fake).gpus()[0]
    first = device.processes()
    assert first is not None
    shares = {p.pid: p.sm_utilization_ratio for p in first.processes}
    assert shares == {10: 0.6, 11: 0.05}
    # Nothing newer than 300 µs: the driver answers NOT_FOUND, and no share is published.
    second = device.processes()
    assert second is not None
    assert {p.pid: p.sm_utilization_ratio for p in second.processes} == {10: None, 11: None}
    assert gpu.process_samples is not None
    gpu.process_samples.append(FakeProcessSample(pid=11, timeStamp=400, smUtil=33))
    third = device.processes()
    assert third is not None
    assert {p.pid: p.sm_utilization_ratio for p in third.processes} == {10: None, 11: 0.33}


def test_sm_share_unsupported_leaves_the_processes_without_it(
    make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml([FakeGpu(compute_processes=[FakeProcess(10, GIB)])])
    reading = make_backend(fake).gpus()[0].processes()
    assert reading is not None
    assert reading.processes == (GpuProcess(10, reading.processes[0].name, "compute", GIB),)
    assert reading.processes[0].sm_utilization_ratio is None
    assert "nvmlDeviceGetProcessUtilization" not in caplog.text  # NotSupported is quiet


def test_a_lost_gpu_lists_no_processes(make_backend: Any) -> None:
    fake = FakeNvml([FakeGpu(compute_processes=[FakeProcess(10, GIB)])])
    device = make_backend(fake).gpus()[0]
    fake.gpus[0].lost = True
    assert device.processes() is None


def test_process_names_come_from_proc_comm_in_the_host_pid_namespace(
    make_backend: Any,
) -> None:
    own = os.getpid()
    fake = FakeNvml([FakeGpu(compute_processes=[FakeProcess(own, GIB)])])
    reading = make_backend(fake).gpus()[0].processes()
    assert reading is not None
    expected = Path(f"/proc/{own}/comm").read_text().strip()
    host = os.readlink("/proc/self/ns/pid") == "pid:[4026531836]"
    assert reading.processes[0].name == (expected if host else "")


def test_gpm_is_sampled_in_the_background_and_read_as_ratios(
    make_backend: Any, clock: FakeClock
) -> None:
    fake = FakeNvml([hopper(), FakeGpu(uuid="GPU-aaaa")])
    backend = make_backend(fake)
    hopper_gpu, ampere_gpu = backend.gpus()
    backend.poll()  # the first sample only starts the interval
    assert hopper_gpu.gpm() is None
    assert fake.calls["nvmlGpmMetricsGet"] == 0
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert hopper_gpu.gpm() == GpmReading(0.725, 0.4, 0.55, 0.31)
    assert ampere_gpu.gpm() is None  # isSupportedDevice 0: never sampled
    assert fake.calls["nvmlGpmSampleGet"] == 2
    calls = fake.calls["nvmlGpmSampleGet"]
    hopper_gpu.gpm()
    assert fake.calls["nvmlGpmSampleGet"] == calls  # a scrape never samples


def test_gpm_metrics_the_gpu_does_not_answer_are_absent(
    make_backend: Any, clock: FakeClock
) -> None:
    fake = FakeNvml([hopper()])
    fake.gpus[0].gpm_percent = {SM: 50.0}
    backend = make_backend(fake)
    backend.poll()
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert backend.gpus()[0].gpm() == GpmReading(0.5, None, None, None)


def test_gpm_query_not_supported_means_no_gpm(make_backend: Any, clock: FakeClock) -> None:
    fake = FakeNvml([FakeGpu(gpm_supported=None)])
    backend = make_backend(fake)
    backend.poll()
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert backend.gpus()[0].gpm() is None
    assert fake.calls["nvmlGpmSampleAlloc"] == 0


def test_gpm_without_the_binding_functions_is_absent(make_backend: Any, clock: FakeClock) -> None:
    fake = FakeNvml([hopper()])
    fake.remove("nvmlGpmQueryDeviceSupport")  # an nvidia-ml-py older than GPM
    backend = make_backend(fake)
    backend.poll()
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert backend.gpus()[0].gpm() is None


def test_gpm_samples_are_freed_when_nvml_shuts_down(make_backend: Any, clock: FakeClock) -> None:
    fake = FakeNvml([hopper()])
    backend = make_backend(fake)
    backend.poll()
    assert len(fake.gpm_samples) == 2  # two per GPU, for the session's life
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert len(fake.gpm_samples) == 2
    backend.shutdown()
    assert all(sample.freed for sample in fake.gpm_samples)


def test_a_lost_gpu_has_no_gpm_and_starts_a_fresh_interval_when_back(
    make_backend: Any, clock: FakeClock
) -> None:
    fake = FakeNvml([hopper(), FakeGpu(uuid="GPU-aaaa")])  # one GPU answers: no re-init
    backend = make_backend(fake)
    device = backend.gpus()[0]
    backend.poll()
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert device.gpm() is not None
    fake.gpus[0].lost = True
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert device.gpm() is None
    fake.gpus[0].lost = False
    device.alive()
    session = backend._session  # found back as the recovery thread would
    assert session is not None
    session.mark_found(device.gpu)
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert device.gpm() is None  # the first sample after the loss only restarts the interval
    clock.now += GPM_SAMPLE_INTERVAL_S
    backend.poll()
    assert device.gpm() == GpmReading(0.725, 0.4, 0.55, 0.31)


def test_one_scrape_reads_the_processes_once_for_every_family(make_backend: Any) -> None:
    gpu = FakeGpu(
        compute_processes=[FakeProcess(10, GIB)],
        process_samples=[FakeProcessSample(pid=10, timeStamp=100, smUtil=40)],
    )
    fake = FakeNvml([gpu])
    device = make_backend(fake).gpus()[0]
    lists = "nvmlDeviceGetComputeRunningProcesses"
    assert device.alive()  # a scrape's probe opens its round
    before = fake.calls[lists]
    first, again = device.processes(), device.processes()
    assert fake.calls[lists] - before == 1
    assert first is not None
    assert again == first  # the SM share too, not lost to the second ask
    assert first.processes[0].sm_utilization_ratio == 0.4
    assert device.alive()  # the next scrape reads afresh
    device.processes()
    assert fake.calls[lists] - before == 2
