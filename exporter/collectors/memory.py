"""Device memory in use and in total, in bytes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class MemoryCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        used = GpuGauge("mirrorwatch_gpu_memory_used_bytes", "Device memory in use, in bytes.")
        total = GpuGauge("mirrorwatch_gpu_memory_total_bytes", "Device memory in total, in bytes.")
        for gpu in view.alive:
            reading = gpu.memory_bytes()
            if reading is not None:
                used.add(gpu, reading.used)
                total.add(gpu, reading.total)
        yield from non_empty(used, total)
