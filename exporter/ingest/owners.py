"""Which processes on a GPU belong to a training run: the workers' pids, across PID namespaces.

NVML lists every process by its pid in the host's initial PID namespace, whatever namespace
the caller is in (the driver does not translate: NVIDIA/nvidia-docker#1483, #179). A worker
reports ``os.getpid()`` as it sees it and the inode of its ``/proc/self/ns/pid``:

- a worker in the initial namespace (inode ``PROC_PID_INIT_INO``, a constant of the kernel's
  include/linux/proc_ns.h) reports the host pid itself: it is matched directly;
- a worker in a container reports its pid in the container's namespace: the exporter finds
  its host pid among the GPU's processes through ``/proc/<pid>/ns/pid`` and the last field of
  ``NSpid:`` in ``/proc/<pid>/status`` (proc(5)), which it can only read when it sees the
  host's processes, that is, runs in the host PID namespace itself (compose ``pid: host``).

Otherwise the worker's processes cannot be told from others and the run's GPUs get no
foreign-process series (absent, not 0): see docs/api.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE, PROC, innermost_pid, pid_namespace


@dataclass(frozen=True)
class Worker:
    """A worker's process as it reported it."""

    pid: int
    namespace: int | None


class ProcessOwners:
    """Finds the host pids of the workers among a GPU's processes.

    Args:
        proc: the procfs to read (tests give a fake tree).
        own_namespace: the exporter's own PID namespace; default read from ``proc``.
    """

    def __init__(self, proc: Path = PROC, own_namespace: int | None = None) -> None:
        self._proc = proc
        self._own = pid_namespace(proc) if own_namespace is None else own_namespace

    @property
    def sees_host_processes(self) -> bool:
        """The exporter runs in the host PID namespace: ``/proc/<host pid>`` is that process."""
        return self._own == INIT_PID_NAMESPACE

    def attributable(self, worker: Worker) -> bool:
        """Whether this worker's processes can be told apart from other processes at all."""
        # Without a namespace (an older callback), a worker is taken to share the exporter's.
        return worker.namespace == INIT_PID_NAMESPACE or self.sees_host_processes

    def host_pids(self, workers: Iterable[Worker], gpu_pids: Iterable[int]) -> set[int]:
        """The host pids of ``gpu_pids`` that are one of ``workers``' processes."""
        wanted = {(w.pid, w.namespace) for w in workers if self.attributable(w)}
        direct = {
            pid for pid, namespace in wanted if namespace == INIT_PID_NAMESPACE or namespace is None
        }
        nested = {(pid, ns) for pid, ns in wanted if ns is not None and ns != INIT_PID_NAMESPACE}
        found: set[int] = set()
        for host_pid in gpu_pids:
            if host_pid in direct:
                found.add(host_pid)
            elif nested:
                namespace = pid_namespace(self._proc, host_pid)
                if namespace is not None and any(ns == namespace for _, ns in nested):
                    inner = innermost_pid(self._proc, host_pid)
                    if (inner, namespace) in nested:
                        found.add(host_pid)
        return found
