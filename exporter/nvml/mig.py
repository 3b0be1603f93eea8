"""MIG through NVML: whether a GPU has MIG on, and each MIG device's identity, memory, processes.

Enumeration as the headers describe it and dcgm-exporter (``internal/pkg/nvmlprovider/
provider.go``) and NVIDIA/go-gpuallocator do it: ``nvmlDeviceGetMigMode`` first (NotSupported on
boards without MIG and on MIG handles; the mode, not ``nvmlDeviceGetMaxMigDeviceCount``, says
whether MIG is on, since NVIDIA's own mock library answers a non-zero count with MIG off), then
``nvmlDeviceGetMigDeviceHandleByIndex`` for every index below the maximum count. Indices are
sparse once instances are destroyed and created again: an index that answers NOT_FOUND or
INVALID_ARGUMENT is skipped, never the end of the list (nvitop's ``break`` misses the rest).

On a MIG-enabled parent NVML answers NotSupported for utilisation and per-process utilisation
(nvml.h notes from 595/610), so those series are absent there by NVML's own answer; memory and
processes per instance come from each MIG handle. ``profile`` is the part of the MIG device's
NVML name after "MIG " (``NVIDIA A100-SXM4-80GB MIG 3g.40gb`` -> ``3g.40gb``), the name
dcgm-exporter reads for its ``GPU_I_PROFILE`` label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mirrorwatch.exporter.backend import GpmReading, MemoryBytes, MigDevice
from mirrorwatch.exporter.nvml.processes import list_processes
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession, as_text

_MIG_NAME_MARK = "MIG "
# What an index without a MIG device answers; anything else is acted on by the session.
_EMPTY_INDEX = ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")


def mig_enabled(session: NvmlSession, gpu: GpuHandle) -> bool | None:
    """Whether MIG is on now (the current mode, not the pending one); None: no MIG."""
    modes = session.call(gpu, "nvmlDeviceGetMigMode")
    if modes is None:
        return None
    return int(modes[0]) == (session.constant("NVML_DEVICE_MIG_ENABLE") or 1)


def profile_of(name: str) -> str:
    """NVML's MIG profile name from a MIG device's name; the whole name when it has no mark."""
    _, mark, profile = name.rpartition(_MIG_NAME_MARK)
    return profile.strip() if mark else name.strip()


def mig_devices(
    session: NvmlSession, gpu: GpuHandle, gpm: Mapping[int, GpmReading] | None = None
) -> Sequence[MigDevice]:
    """The MIG devices of MIG-enabled ``gpu``, in index order (sparse indices skipped), each
    with its GPU instance's reading from ``gpm`` (the background sampler's, by instance id)."""
    count = session.call(gpu, "nvmlDeviceGetMaxMigDeviceCount")
    devices: list[MigDevice] = []
    for index in range(int(count or 0)):
        handle = _mig_handle(session, gpu, index)
        if handle is None:
            continue
        device = _read(session, gpu, handle, gpm or {})
        if device is not None:
            devices.append(device)
    return devices


def gpu_instances(session: NvmlSession, gpu: GpuHandle) -> list[int]:
    """The GPU instance ids of MIG-enabled ``gpu``, each once (for per-instance GPM)."""
    count = session.call(gpu, "nvmlDeviceGetMaxMigDeviceCount")
    found: list[int] = []
    for index in range(int(count or 0)):
        handle = _mig_handle(session, gpu, index)
        if handle is None:
            continue
        gpu_instance = session.call(gpu, "nvmlDeviceGetGpuInstanceId", handle=handle)
        if gpu_instance is not None and int(gpu_instance) not in found:
            found.append(int(gpu_instance))
    return found


def _mig_handle(session: NvmlSession, gpu: GpuHandle, index: int) -> Any:
    fn = getattr(session.nvml, "nvmlDeviceGetMigDeviceHandleByIndex", None)
    if fn is None or session.is_lost(gpu):
        return None
    try:
        return fn(gpu.handle, index)
    except session.error_type as error:
        if not session.is_error(error, *_EMPTY_INDEX):
            session.handle_error(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", error)
        return None


def _read(
    session: NvmlSession, gpu: GpuHandle, handle: Any, gpm: Mapping[int, GpmReading]
) -> MigDevice | None:
    uuid = session.call(gpu, "nvmlDeviceGetUUID", handle=handle)
    gpu_instance = session.call(gpu, "nvmlDeviceGetGpuInstanceId", handle=handle)
    compute_instance = session.call(gpu, "nvmlDeviceGetComputeInstanceId", handle=handle)
    if uuid is None or gpu_instance is None or compute_instance is None:
        return None
    name = session.call(gpu, "nvmlDeviceGetName", handle=handle)
    memory = session.call_api(gpu, "memory", handle=handle)
    processes = list_processes(session, gpu, "compute", handle=handle)
    return MigDevice(
        mig_uuid=as_text(uuid),
        gpu_instance=int(gpu_instance),
        compute_instance=int(compute_instance),
        profile="" if name is None else profile_of(as_text(name)),
        memory=None if memory is None else MemoryBytes(float(memory.used), float(memory.total)),
        processes=None if processes is None else len(processes),
        gpm=gpm.get(int(gpu_instance)),
    )
