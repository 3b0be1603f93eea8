"""The processes on one GPU through NVML: compute and graphics lists, per-process SM share.

nvmlDeviceGet{Compute,Graphics}RunningProcesses list each process by its host pid. They are
called here through ctypes in the newest version the library exports (``versions.LADDERS``:
_v3, _v2, then v1), with the entry layout *that library* writes, not the one the installed
nvidia-ml-py assumes: the 535.43-535.86 libraries write 32-byte _v3 entries (nvml.h of
535.43.02, 535.54.03 and 535.86.05 add ``usedGpuCcProtectedMemory`` to nvmlProcessInfo_t
without a version bump), every other _v3 and every _v2 24 bytes, v1 16. nvidia-ml-py 12.535.77
reads 32 and 12.535.108+ 24 on every driver, so its own wrappers scramble pids on half the
pairs (nvitop#75) and fail outright where _v3 is absent (R470, 535.98). ``usedGpuMemory`` is
None where NVML answers NVML_VALUE_NOT_AVAILABLE (MIG, WDDM).

nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp) returns the driver's samples newer
than that timestamp (microseconds), ``smUtil`` in percent per pid; it answers
NVML_ERROR_NOT_FOUND when there is none (quiet, like NotSupported). Names come from
``/proc/<pid>/comm``, as nvitop's GpuProcess does through psutil, only where the exporter runs
in the host PID namespace: elsewhere ``/proc/<host pid>`` is not that process, and the name
is left empty (the collectors publish ``unknown``).

Cost per GPU and scrape: two list calls and one utilisation call (tens of microseconds each
on a driver), plus one small /proc read per process.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorwatch.contract.procfs import PROC, in_host_pid_namespace, process_name
from mirrorwatch.exporter.backend import GpuProcess, GpuProcesses, ProcessType
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession
from mirrorwatch.exporter.nvml.versions import CONF_COMPUTE_SYMBOL, PROCESS_DETAIL_SYMBOL

_PERCENT = 100.0
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE as unsigned long long
_NO_INSTANCE = 2**32 - 1  # an instance id the driver leaves unset (not on a MIG device)
_INSUFFICIENT_SIZE = 7  # NVML_ERROR_INSUFFICIENT_SIZE: the first call's usual answer
_LISTS: tuple[tuple[ProcessType, str], ...] = (
    ("compute", "compute_processes"),
    ("graphics", "graphics_processes"),
)
# The unversioned pynvml wrappers, for a binding that offers no symbol lookup.
_WRAPPERS = {
    "compute": "nvmlDeviceGetComputeRunningProcesses",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
}


class ProcessEntryV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: 16 bytes."""

    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


class ProcessEntryV2(ctypes.Structure):
    """nvmlProcessInfo_v2_t: 24 bytes (every _v2, and _v3 outside 535.43-535.86)."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


class ProcessEntryCc(ctypes.Structure):
    """nvmlProcessInfo_t of 535.43-535.86: 32 bytes, with CC-protected memory."""

    _fields_ = (*ProcessEntryV2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong))


@dataclass(frozen=True)
class ProcessEntry:
    """One listed process: memory None where NVML does not report it; instance ids None
    where the entry has none (v1, or a process not on a MIG device)."""

    pid: int
    used_memory_bytes: float | None
    gpu_instance: int | None = None
    compute_instance: int | None = None


def entry_layout(session: NvmlSession, symbol: str) -> type[ctypes.Structure]:
    """The entry struct ``symbol`` writes in the loaded library."""
    if symbol.endswith("_v3"):
        cc_era = session.has_symbol(CONF_COMPUTE_SYMBOL) and not session.has_symbol(
            PROCESS_DETAIL_SYMBOL
        )
        return ProcessEntryCc if cc_era else ProcessEntryV2
    return ProcessEntryV2 if symbol.endswith("_v2") else ProcessEntryV1


def _listed(nvml: Any, fn: Any, layout: type[ctypes.Structure], handle: Any) -> list[ProcessEntry]:
    """NVML's two-call list protocol: ask the count, then fill an array with room to spare."""
    count = ctypes.c_uint(0)
    code = int(fn(handle, ctypes.byref(count), None))
    if code == 0:
        return []
    if code != _INSUFFICIENT_SIZE:
        raise nvml.NVMLError(code)
    count.value = count.value * 2 + 5  # processes may start between the two calls
    entries = (layout * count.value)()
    code = int(fn(handle, ctypes.byref(count), entries))
    if code != 0:
        raise nvml.NVMLError(code)
    return [_entry(entries[i]) for i in range(count.value)]


def _entry(raw: Any) -> ProcessEntry:
    memory = int(raw.usedGpuMemory)
    gpu_instance = getattr(raw, "gpuInstanceId", _NO_INSTANCE)
    compute_instance = getattr(raw, "computeInstanceId", _NO_INSTANCE)
    return ProcessEntry(
        pid=int(raw.pid),
        used_memory_bytes=None if memory == _NOT_AVAILABLE else float(memory),
        gpu_instance=None if gpu_instance == _NO_INSTANCE else int(gpu_instance),
        compute_instance=None if compute_instance == _NO_INSTANCE else int(compute_instance),
    )


def _wrapped(info: Any) -> ProcessEntry:
    memory = getattr(info, "usedGpuMemory", None)
    return ProcessEntry(
        pid=int(info.pid), used_memory_bytes=None if memory is None else float(memory)
    )


def list_processes(
    session: NvmlSession, gpu: GpuHandle, kind: ProcessType, handle: Any = None
) -> Sequence[ProcessEntry] | None:
    """The ``kind`` processes on ``gpu`` (or on its MIG device ``handle``); None: unsupported."""
    nvml = session.nvml
    lookup = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if lookup is None:
        found = session.call(gpu, _WRAPPERS[kind], handle=handle)
        return None if found is None else [_wrapped(info) for info in found]
    api = dict(_LISTS)[kind]
    version = session.resolve(api)
    if version is None:
        return None
    layout = entry_layout(session, version.symbol)
    fn = lookup(version.symbol)
    return session.run(  # type: ignore[no-any-return]
        gpu, version.symbol, lambda h: _listed(nvml, fn, layout, h), handle=handle
    )


class ProcessReader:
    """One session's reads of GPU processes; remembers each GPU's last utilisation sample.

    Args:
        session: the NVML session.
        proc: the procfs for process names.
        names: read names from ``proc``; default: only in the host PID namespace.
    """

    def __init__(self, session: NvmlSession, proc: Path = PROC, names: bool | None = None) -> None:
        self._session = session
        self._proc = proc
        self._names = in_host_pid_namespace(proc) if names is None else names
        self._lock = threading.Lock()
        # GPU UUID -> newest sample timestamp: the GPU's identity, not its index, which a
        # re-enumeration can give to another card.
        self._last_seen_us: dict[str, int] = {}

    def read(self, gpu: GpuHandle) -> GpuProcesses | None:
        session = self._session
        lists = {kind: list_processes(session, gpu, kind) for kind, _ in _LISTS}
        answered = {kind: found for kind, found in lists.items() if found is not None}
        if not answered or session.is_lost(gpu):
            return None
        seen: dict[int, tuple[ProcessType, float | None]] = {}
        for kind, found in answered.items():
            for info in found:
                if info.pid not in seen:  # a process with both contexts is listed once, as compute
                    seen[info.pid] = (kind, info.used_memory_bytes)
        shares = self._sm_shares(gpu) if seen else {}
        return GpuProcesses(
            counts={kind: len(found) for kind, found in answered.items()},
            processes=tuple(
                GpuProcess(
                    pid=pid,
                    name=process_name(self._proc, pid) if self._names else "",
                    type=kind,
                    used_memory_bytes=memory,
                    sm_utilization_ratio=shares.get(pid),
                )
                for pid, (kind, memory) in seen.items()
            ),
        )

    def _sm_shares(self, gpu: GpuHandle) -> dict[int, float]:
        """Each process's SM share in its newest sample since the previous read."""
        with self._lock:
            since = self._last_seen_us.get(gpu.uuid, 0)
        samples = self._session.call(gpu, "nvmlDeviceGetProcessUtilization", since)
        if not samples:
            return {}
        newest: dict[int, tuple[int, float]] = {}
        for sample in _as_list(samples):
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in newest or stamp > newest[pid][0]:
                newest[pid] = (stamp, min(float(sample.smUtil) / _PERCENT, 1.0))
        with self._lock:
            self._last_seen_us[gpu.uuid] = max([since, *(stamp for stamp, _ in newest.values())])
        return {pid: share for pid, (_, share) in newest.items()}


def _as_list(samples: Iterable[Any]) -> list[Any]:
    return list(samples)
