"""How busy each GPU is: compute and memory-controller utilisation as ratios."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class UtilizationCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        compute = GpuFamily(names.GPU_UTILIZATION_RATIO)
        memory = GpuFamily(names.GPU_MEMORY_UTILIZATION_RATIO)
        for gpu in view.alive:
            compute.add(gpu, gpu.utilization_ratio())
            memory.add(gpu, gpu.memory_utilization_ratio())
        yield from non_empty(compute, memory)
