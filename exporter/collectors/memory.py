"""Device memory in use and in total, in bytes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class MemoryCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        used = GpuFamily(names.GPU_MEMORY_USED_BYTES)
        total = GpuFamily(names.GPU_MEMORY_TOTAL_BYTES)
        for gpu in view.alive:
            reading = gpu.memory_bytes()
            if reading is not None:
                used.add(gpu, reading.used)
                total.add(gpu, reading.total)
        yield from non_empty(used, total)
