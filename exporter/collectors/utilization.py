"""How busy each GPU is: compute and memory-controller utilisation as ratios."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class UtilizationCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        compute = GpuGauge(
            "mirrorwatch_gpu_utilization_ratio",
            "Fraction of the last sample period in which a kernel ran on the GPU (0..1).",
        )
        memory = GpuGauge(
            "mirrorwatch_gpu_memory_utilization_ratio",
            "Fraction of the last sample period in which device memory was read or written (0..1).",
        )
        for gpu in view.alive:
            compute.add(gpu, gpu.utilization_ratio())
            memory.add(gpu, gpu.memory_utilization_ratio())
        yield from non_empty(compute, memory)
