"""The fake pynvml of tests/exporter, with the pre-flight calls (nvml/preflight.py) added.

Answers follow nvidia-ml-py's own wrappers: masks as arrays of 64-bit words, modes as
(current, pending) pairs, remapped rows as (corrected, uncorrected, pending, failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pynvml

from tests.exporter.fake_pynvml import FakeGpu, FakeHandle, FakeNvml, _raise


@dataclass
class FakePreflight:
    """One GPU's pre-flight answers; None: that call answers NVML_ERROR_NOT_SUPPORTED."""

    compute_capability: tuple[int, int] | None = (8, 0)
    compute_mode: int | None = pynvml.NVML_COMPUTEMODE_DEFAULT
    persistence_mode: int | None = pynvml.NVML_FEATURE_ENABLED
    mig_mode: int | None = None
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    retired_pages_pending: int | None = None
    default_limit_mw: int | None = 400_000
    gpu_generation_max: int | None = 4
    node_mask: int | None = 0b1
    cpu_mask: int | None = 0xFF
    p2p: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, 2: 5})


class FakePreflightNvml(FakeNvml):
    def __init__(self, gpus: Sequence[FakeGpu], preflight: Sequence[FakePreflight]) -> None:
        super().__init__(gpus)
        self.preflight = list(preflight)
        self.cuda_driver_version: int | None = 12040  # 1000 * major + 10 * minor

    def _answer(self, function: str, handle: FakeHandle) -> FakePreflight:
        self._gpu(function, handle)
        return self.preflight[handle.index]

    @staticmethod
    def _supported(value: object) -> None:
        if value is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802 - pynvml's names
        self._enter("nvmlSystemGetCudaDriverVersion")
        self._supported(self.cuda_driver_version)
        assert self.cuda_driver_version is not None
        return self.cuda_driver_version

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeHandle) -> tuple[int, int]:  # noqa: N802
        answer = self._answer("nvmlDeviceGetCudaComputeCapability", handle).compute_capability
        self._supported(answer)
        assert answer is not None
        return answer

    def nvmlDeviceGetComputeMode(self, handle: FakeHandle) -> int:  # noqa: N802
        answer = self._answer("nvmlDeviceGetComputeMode", handle).compute_mode
        self._supported(answer)
        return int(answer or 0)

    def nvmlDeviceGetPersistenceMode(self, handle: FakeHandle) -> int:  # noqa: N802
        answer = self._answer("nvmlDeviceGetPersistenceMode", handle).persistence_mode
        self._supported(answer)
        return int(answer or 0)

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:  # noqa: N802
        answer = self._answer("nvmlDeviceGetMigMode", handle).mig_mode
        self._supported(answer)
        return [int(answer or 0), int(answer or 0)]

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:  # noqa: N802
        answer = self._answer("nvmlDeviceGetRemappedRows", handle).remapped_rows
        self._supported(answer)
        assert answer is not None
        return answer

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:  # noqa: N802
        answer = self._answer("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        self._supported(answer.retired_pages_pending)
        return int(answer.retired_pages_pending or 0)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeHandle) -> int:  # noqa: N802
        answer = self._answer("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        self._supported(answer.default_limit_mw)
        return int(answer.default_limit_mw or 0)

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:  # noqa: N802
        answer = self._answer("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle)
        self._supported(answer.gpu_generation_max)
        return int(answer.gpu_generation_max or 0)

    def nvmlDeviceGetMemoryAffinity(  # noqa: N802
        self, handle: FakeHandle, node_set_size: int, scope: int
    ) -> list[int]:
        answer = self._answer("nvmlDeviceGetMemoryAffinity", handle)
        self._supported(answer.node_mask)
        assert scope == pynvml.NVML_AFFINITY_SCOPE_NODE
        return _words(answer.node_mask or 0, node_set_size)

    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, cpu_set_size: int) -> list[int]:  # noqa: N802
        answer = self._answer("nvmlDeviceGetCpuAffinity", handle)
        self._supported(answer.cpu_mask)
        return _words(answer.cpu_mask or 0, cpu_set_size)

    def nvmlDeviceGetP2PStatus(  # noqa: N802
        self, first: FakeHandle, second: FakeHandle, index: int
    ) -> int:
        if not isinstance(index, int):  # what nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        answer = self._answer("nvmlDeviceGetP2PStatus", first)
        self._gpu("nvmlDeviceGetP2PStatus", second)
        return int(answer.p2p.get(index, pynvml.NVML_P2P_STATUS_UNKNOWN))


def _words(mask: int, count: int) -> list[int]:
    """A mask as nvidia-ml-py hands it back: ``count`` unsigned longs, lowest bits first."""
    return [(mask >> (64 * i)) & (2**64 - 1) for i in range(count)]
