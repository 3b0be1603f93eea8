"""Pre-flight readings through NVML (nvml/preflight.py) and the checks on them, on fake pynvml."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pynvml
import pytest

from mirrorwatch.alerts.thresholds import load_thresholds
from mirrorwatch.doctor.gpu_checks import NEEDS_NVML, HostView, gpu_checks
from mirrorwatch.exporter.backend import DeviceConfig
from mirrorwatch.exporter.nvml import NvmlBackend
from tests.doctor.fake_preflight import FakePreflight, FakePreflightNvml
from tests.exporter.fake_pynvml import FakeGpu

VIEW = HostView(allowed_cpus=frozenset(range(4)), thresholds=load_thresholds())


def two_gpus(*preflight: FakePreflight) -> FakePreflightNvml:
    gpus = [
        FakeGpu(uuid="GPU-aaaa", pci_bus_id="00000000:17:00.0", clocks_event_active=0),
        FakeGpu(uuid="GPU-bbbb", pci_bus_id="00000000:65:00.0", clocks_event_active=0),
    ]
    return FakePreflightNvml(gpus, list(preflight) or [FakePreflight(), FakePreflight()])


@pytest.fixture
def backends() -> Iterator[list[NvmlBackend]]:
    made: list[NvmlBackend] = []
    yield made
    for backend in made:
        backend.shutdown()


def started(nvml: FakePreflightNvml, made: list[NvmlBackend]) -> NvmlBackend:
    backend = NvmlBackend(nvml=nvml, background=False)
    made.append(backend)
    backend.start()
    return backend


def test_the_fake_calls_take_what_nvidia_ml_py_s_take() -> None:
    # The fake must be called as the real binding is, or nvml/preflight.py could pass here only.
    for name in (
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetCpuAffinity",
        "nvmlDeviceGetP2PStatus",
        "nvmlSystemGetCudaDriverVersion",
    ):
        real = inspect.signature(getattr(pynvml, name)).parameters
        fake = inspect.signature(getattr(FakePreflightNvml, name)).parameters
        assert len(real) == len(fake) - 1, name  # less the fake's self


def test_the_settings_are_read_in_the_protocol_s_units(backends: list[NvmlBackend]) -> None:
    nvml = two_gpus(
        FakePreflight(cpu_mask=0b1011, node_mask=0b10, mig_mode=0),
        FakePreflight(),
    )
    backend = started(nvml, backends)
    assert backend.gpus()[0].config() == DeviceConfig(
        compute_capability=(8, 0),
        persistence_mode=True,
        compute_mode="default",
        ecc_enabled=True,
        retired_pages_pending=None,  # NotSupported: absent, never False
        remapped_rows_pending=False,
        remapped_rows_failed=False,
        mig_enabled=False,
        power_limit_default_watts=400.0,
        pcie_generation_gpu_max=4,
        numa_node=1,
        local_cpus=frozenset({0, 1, 3}),
    )


def test_p2p_status_asks_nvml_per_capability_with_plain_numbers(
    backends: list[NvmlBackend],
) -> None:
    nvml = two_gpus(FakePreflight(p2p={0: 0, 1: 3, 2: 5}), FakePreflight())
    backend = started(nvml, backends)
    assert backend.p2p_status(0, 1) == {
        "read": "ok",
        "write": "topology_not_supported",
        "nvlink": "not_supported",
    }
    assert backend.p2p_status(0, 7) == {}


def test_the_driver_s_cuda_version_is_major_and_minor(backends: list[NvmlBackend]) -> None:
    nvml = two_gpus()
    backend = started(nvml, backends)
    assert backend.cuda_driver_version() == (12, 4)
    nvml.cuda_driver_version = None
    assert backend.cuda_driver_version() is None


def test_pending_row_remaps_fail_the_ecc_check(backends: list[NvmlBackend]) -> None:
    nvml = two_gpus(FakePreflight(remapped_rows=(0, 0, 1, 0)), FakePreflight())
    checks = gpu_checks(started(nvml, backends), VIEW)
    ecc = {c.gpu: (c.status, c.value) for c in checks if c.id == "gpu_error.ecc"}
    assert ecc["0"][0] == "fail"
    assert "row remap pending" in ecc["0"][1]
    assert ecc["1"][0] == "fail"  # FakeGpu counts one uncorrected error
    assert "1 uncorrected ECC error" in ecc["1"][1]


def test_a_process_pinned_away_from_a_gpu_s_cpus_warns(backends: list[NvmlBackend]) -> None:
    nvml = two_gpus(FakePreflight(cpu_mask=0xF0), FakePreflight(cpu_mask=0x0F))
    checks = gpu_checks(started(nvml, backends), VIEW)  # this process may run on CPUs 0-3
    affinity = {c.gpu: c.status for c in checks if c.id == "interconnect.cpu_affinity"}
    assert affinity == {"0": "warn", "1": "pass"}


def test_without_nvml_the_doctor_says_why_and_skips_what_needs_it(
    backends: list[NvmlBackend],
) -> None:
    nvml = two_gpus()
    nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    checks = gpu_checks(started(nvml, backends), VIEW)
    first, *rest = checks
    assert (first.id, first.status) == ("nvml.gpus", "fail")
    assert "libnvidia-ml.so.1" in first.value
    assert [(c.id, c.status) for c in rest] == [(i, "skip") for i in NEEDS_NVML]
