"""The processes on one GPU through NVML: compute and graphics lists, per-process SM share.

nvmlDeviceGetComputeRunningProcesses / ...GraphicsRunningProcesses (nvidia-ml-py's _v3
structs; ``usedGpuMemory`` is None where NVML answers NVML_VALUE_NOT_AVAILABLE) list each
process by its host pid. nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp) returns
the driver's samples newer than that timestamp (microseconds), ``smUtil`` in percent per pid;
it answers NVML_ERROR_NOT_FOUND when there is none (quiet, like NotSupported). Names come from
``/proc/<pid>/comm``, as nvitop's GpuProcess does through psutil, only where the exporter runs
in the host PID namespace: elsewhere ``/proc/<host pid>`` is not that process, and the name
is left empty (the collectors publish ``unknown``).

Cost per GPU and scrape: two list calls and one utilisation call (tens of microseconds each
on a driver), plus one small /proc read per process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mirrorwatch.exporter.backend import GpuProcess, GpuProcesses, ProcessType
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession
from mirrorwatch.exporter.procfs import PROC, in_host_pid_namespace, process_name

_PERCENT = 100.0


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
        self._last_seen_us: dict[int, int] = {}  # GPU index -> newest sample timestamp

    def read(self, gpu: GpuHandle) -> GpuProcesses | None:
        session = self._session
        lists: dict[ProcessType, Any] = {
            "compute": session.call(gpu, "nvmlDeviceGetComputeRunningProcesses"),
            "graphics": session.call(gpu, "nvmlDeviceGetGraphicsRunningProcesses"),
        }
        answered = {kind: found for kind, found in lists.items() if found is not None}
        if not answered or session.is_lost(gpu):
            return None
        seen: dict[int, tuple[ProcessType, float | None]] = {}
        for kind, found in answered.items():
            for info in found:
                pid = int(info.pid)
                if pid not in seen:  # a process with both contexts is listed once, as compute
                    memory = getattr(info, "usedGpuMemory", None)
                    seen[pid] = (kind, None if memory is None else float(memory))
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
            since = self._last_seen_us.get(gpu.index, 0)
        samples = self._session.call(gpu, "nvmlDeviceGetProcessUtilization", since)
        if not samples:
            return {}
        newest: dict[int, tuple[int, float]] = {}
        for sample in _as_list(samples):
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in newest or stamp > newest[pid][0]:
                newest[pid] = (stamp, min(float(sample.smUtil) / _PERCENT, 1.0))
        with self._lock:
            self._last_seen_us[gpu.index] = max([since, *(stamp for stamp, _ in newest.values())])
        return {pid: share for pid, (_, share) in newest.items()}


def _as_list(samples: Iterable[Any]) -> list[Any]:
    return list(samples)
