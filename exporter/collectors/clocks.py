"""Current and maximum clocks of the graphics, SM and memory domains, in hertz."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.backend import CLOCKS, GpuDevice
from mirrorwatch.exporter.collectors.base import (
    GpuGauge,
    ScrapeView,
    StaticFamilies,
    StaticGpuGauge,
    non_empty,
)

_Maxima = tuple[GpuDevice, int, str, tuple[float | None, ...]]


class ClocksCollector:
    def __init__(self) -> None:
        self._maxima = StaticFamilies()  # maximum clocks are read once: built once per set

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        current = GpuGauge("mirrorwatch_gpu_clock_hertz", "Current clock, in hertz.", ["clock"])
        maxima = tuple(
            (gpu, gpu.index, gpu.uuid, tuple(gpu.clock_max_hertz(clock) for clock in CLOCKS))
            for gpu in view.alive
        )
        for gpu in view.alive:
            for clock in CLOCKS:
                current.add(gpu, gpu.clock_hertz(clock), clock)
        (maximum,) = self._maxima.get(maxima, lambda: [_maximum(maxima)])
        yield from non_empty(current, maximum)


def _maximum(maxima: Sequence[_Maxima]) -> Metric:
    maximum = StaticGpuGauge(
        "mirrorwatch_gpu_clock_max_hertz",
        "Maximum clock the GPU supports, in hertz.",
        ["clock"],
    )
    for gpu, _, _, values in maxima:
        for clock, value in zip(CLOCKS, values, strict=True):
            maximum.add(gpu, value, clock)
    return maximum.family
