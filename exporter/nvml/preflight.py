"""Pre-flight readings through NVML: a GPU's settings and health state, P2P and CUDA version.

Read on demand by ``mirrorwatch-doctor``, never on the scrape path. Every call goes through the
session, so an unsupported or failing call is an absent value, as for the scrape readings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from mirrorwatch.exporter.backend import (
    P2P_STATUSES,
    ComputeMode,
    DeviceConfig,
    P2pCapability,
    P2pStatus,
)
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession

_MW_PER_W: Final = 1000.0
_BITS_PER_WORD: Final = 64  # nvmlDeviceGet{Cpu,Memory}Affinity fill arrays of unsigned long
# NUMA nodes asked for: one word covers 64 nodes, more than any host has.
_NODE_WORDS: Final = 1
# nvmlComputeMode_t by value (nvml.h): 0 default, 1 exclusive thread, 2 prohibited, 3 process.
_COMPUTE_MODES: Final[tuple[ComputeMode, ...]] = (
    "default",
    "exclusive_thread",
    "prohibited",
    "exclusive_process",
)
# nvmlGpuP2PCapsIndex_t by value (nvml.h). Written as numbers: nvidia-ml-py defines
# NVML_P2P_CAPS_INDEX_READ as the tuple ``0,`` (a stray comma), which NVML would refuse.
_P2P_CAPS: Final[tuple[tuple[P2pCapability, int], ...]] = (("read", 0), ("write", 1), ("nvlink", 2))


def _set_bits(words: Sequence[Any]) -> Iterator[int]:
    for position, word in enumerate(words):
        value = int(word)
        for bit in range(_BITS_PER_WORD):
            if value >> bit & 1:
                yield position * _BITS_PER_WORD + bit


def _enabled(session: NvmlSession, value: Any) -> bool | None:
    if value is None:
        return None
    return int(value) == session.constant("NVML_FEATURE_ENABLED")


def _current_mode(session: NvmlSession, pair: Any) -> bool | None:
    """The current half of an NVML (current, pending) mode pair."""
    return None if pair is None else _enabled(session, pair[0])


def _local_cpus(session: NvmlSession, gpu: GpuHandle) -> frozenset[int] | None:
    words = -(-(os.cpu_count() or 1) // _BITS_PER_WORD)
    mask = session.call(gpu, "nvmlDeviceGetCpuAffinity", words)
    cpus = frozenset(_set_bits(mask)) if mask is not None else frozenset()
    return cpus or None


def _numa_node(session: NvmlSession, gpu: GpuHandle) -> int | None:
    scope = session.constant("NVML_AFFINITY_SCOPE_NODE")
    if scope is None:
        return None
    mask = session.call(gpu, "nvmlDeviceGetMemoryAffinity", _NODE_WORDS, scope)
    # The node closest to the GPU's memory; a host without NUMA sets no bit.
    return next(_set_bits(mask), None) if mask is not None else None


def read_config(session: NvmlSession, gpu: GpuHandle) -> DeviceConfig:
    """``gpu``'s settings and health state now."""
    capability = session.call(gpu, "nvmlDeviceGetCudaComputeCapability")
    mode = session.call(gpu, "nvmlDeviceGetComputeMode")
    rows = session.call(gpu, "nvmlDeviceGetRemappedRows")  # (corr, unc, pending, failure)
    pending_pages = session.call(gpu, "nvmlDeviceGetRetiredPagesPendingStatus")
    default_limit = session.call(gpu, "nvmlDeviceGetPowerManagementDefaultLimit")
    gpu_generation = session.call(gpu, "nvmlDeviceGetGpuMaxPcieLinkGeneration")
    return DeviceConfig(
        compute_capability=None if capability is None else (capability[0], capability[1]),
        persistence_mode=_enabled(session, session.call(gpu, "nvmlDeviceGetPersistenceMode")),
        compute_mode=(
            _COMPUTE_MODES[int(mode)] if mode is not None and 0 <= int(mode) < 4 else None
        ),
        ecc_enabled=_current_mode(session, session.call(gpu, "nvmlDeviceGetEccMode")),
        retired_pages_pending=None if pending_pages is None else bool(pending_pages),
        remapped_rows_pending=None if rows is None else bool(rows[2]),
        remapped_rows_failed=None if rows is None else bool(rows[3]),
        mig_enabled=_current_mode(session, session.call(gpu, "nvmlDeviceGetMigMode")),
        power_limit_default_watts=(
            None if default_limit is None else float(default_limit) / _MW_PER_W
        ),
        pcie_generation_gpu_max=None if gpu_generation is None else int(gpu_generation),
        numa_node=_numa_node(session, gpu),
        local_cpus=_local_cpus(session, gpu),
    )


def p2p_status(
    session: NvmlSession, first: GpuHandle, second: GpuHandle
) -> Mapping[P2pCapability, P2pStatus]:
    """How ``first`` reaches ``second`` peer to peer (nvmlDeviceGetP2PStatus), by capability.

    This is the answer NCCL itself asks NVML for before it picks P2P over shared memory.
    """
    statuses: dict[P2pCapability, P2pStatus] = {}
    for capability, index in _P2P_CAPS:
        status = session.call(first, "nvmlDeviceGetP2PStatus", second.handle, index)
        if status is not None and 0 <= int(status) < len(P2P_STATUSES):
            statuses[capability] = P2P_STATUSES[int(status)]
    return statuses


def cuda_driver_version(session: NvmlSession) -> tuple[int, int] | None:
    """The newest CUDA the driver supports: nvmlSystemGetCudaDriverVersion's 1000*major+10*minor."""
    call = getattr(session.nvml, "nvmlSystemGetCudaDriverVersion", None)
    if call is None:  # a binding without the call
        return None
    try:
        version = int(call())
    except session.error_type:
        return None
    return version // 1000, version % 1000 // 10
