"""Current and maximum clocks of the graphics, SM and memory domains, in hertz."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.backend import CLOCKS
from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class ClocksCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        current = GpuGauge("mirrorwatch_gpu_clock_hertz", "Current clock, in hertz.", ["clock"])
        maximum = GpuGauge(
            "mirrorwatch_gpu_clock_max_hertz",
            "Maximum clock the GPU supports, in hertz.",
            ["clock"],
        )
        for gpu in view.alive:
            for clock in CLOCKS:
                current.add(gpu, gpu.clock_hertz(clock), clock)
                maximum.add(gpu, gpu.clock_max_hertz(clock), clock)
        yield from non_empty(current, maximum)
