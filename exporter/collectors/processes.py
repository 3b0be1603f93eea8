"""Processes on each GPU: counts and memory always, per-process series for the top N only.

Cardinality is bounded by ``top``: per GPU at most ``top`` (pid, process) label sets, chosen by
used memory each scrape, so a process that leaves (or falls out of the top N) is absent from
the next scrape. Counts and the memory total cover every process, however many there are.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import PROCESS_TYPES, GpuProcess
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty

DEFAULT_TOP_PROCESSES = 5
MAX_TOP_PROCESSES = 64
UNKNOWN_PROCESS = "unknown"


def top_by_memory(processes: Sequence[GpuProcess], top: int) -> list[GpuProcess]:
    """The ``top`` processes using the most memory (unknown memory last), ties by pid."""
    ranked = sorted(
        processes,
        key=lambda p: (-(p.used_memory_bytes if p.used_memory_bytes is not None else -1.0), p.pid),
    )
    return ranked[:top]


class ProcessesCollector:
    def __init__(self, top: int = DEFAULT_TOP_PROCESSES) -> None:
        if not 0 <= top <= MAX_TOP_PROCESSES:
            raise ValueError(f"top must be between 0 and {MAX_TOP_PROCESSES}")
        self._top = top

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        count = GpuFamily(names.GPU_PROCESSES)
        memory_total = GpuFamily(names.GPU_PROCESSES_MEMORY_USED_BYTES)
        memory = GpuFamily(names.GPU_PROCESS_MEMORY_USED_BYTES)
        sm = GpuFamily(names.GPU_PROCESS_SM_UTILIZATION_RATIO)
        for gpu in view.alive:
            reading = gpu.processes()
            if reading is None:
                continue
            for kind in PROCESS_TYPES:
                if kind in reading.counts:
                    count.add(gpu, reading.counts[kind], kind)
            used = [p.used_memory_bytes for p in reading.processes]
            known = [bytes_ for bytes_ in used if bytes_ is not None]
            if known or not used:
                memory_total.add(gpu, sum(known))
            for process in top_by_memory(reading.processes, self._top):
                labels = (str(process.pid), process.name or UNKNOWN_PROCESS)
                memory.add(gpu, process.used_memory_bytes, *labels)
                sm.add(gpu, process.sm_utilization_ratio, *labels)
        yield from non_empty(count, memory_total, memory, sm)
