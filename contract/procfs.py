"""What /proc says about a process: its name, its PID namespace and its pid inside that.

NVML names GPU processes by their pid in the host's initial PID namespace whatever namespace
the caller runs in (NVIDIA/nvidia-docker#1483); ``/proc/<pid>`` is that process only where the
reader runs in the initial namespace too (``in_host_pid_namespace``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PROC = Path("/proc")
# PROC_PID_INIT_INO (the kernel's include/linux/proc_ns.h): the initial PID namespace's inode.
INIT_PID_NAMESPACE = 0xEFFFFFFC
_NAMESPACE_LINK = re.compile(r"^pid:\[(\d+)\]$")


def _entry(proc: Path, pid: int | str, name: str) -> str:
    """``<proc>/<pid>/<name>`` as a str path.

    Not ``proc / str(pid) / name``: pathlib (3.11) interns every part it parses, so a fresh
    pid string per process per scrape churns the interpreter's table of interned strings
    until it doubles, about 1 MiB of the exporter's memory (bench/rss_bench.py).
    """
    return f"{os.fspath(proc)}/{pid}/{name}"


def pid_namespace(proc: Path = PROC, pid: int | str = "self") -> int | None:
    """The inode of ``pid``'s PID namespace (``/proc/<pid>/ns/pid``), or None where unreadable."""
    try:
        match = _NAMESPACE_LINK.match(os.readlink(_entry(proc, pid, "ns/pid")))
    except OSError:
        return None
    return int(match.group(1)) if match else None


def in_host_pid_namespace(proc: Path = PROC) -> bool:
    """Whether this process runs in the initial PID namespace (sees the host's pids)."""
    return pid_namespace(proc) == INIT_PID_NAMESPACE


def innermost_pid(proc: Path, pid: int) -> int | None:
    """``pid``'s number in its own innermost namespace: the last field of ``NSpid:`` (proc(5))."""
    try:
        with open(_entry(proc, pid, "status"), encoding="ascii", errors="replace") as file:
            status = file.read()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            return int(fields[-1]) if fields and fields[-1].isdigit() else None
    return None


def process_name(proc: Path, pid: int) -> str:
    """The command name of ``pid`` (``/proc/<pid>/comm``, at most 15 bytes); "" if unreadable."""
    try:
        with open(_entry(proc, pid, "comm"), "rb") as file:
            raw = file.read()
    except OSError:
        return ""
    return raw.decode(errors="replace").strip()
