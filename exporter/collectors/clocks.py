"""Current and maximum clocks of the graphics, SM and memory domains, in hertz."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import CLOCKS, GpuDevice
from mirrorwatch.exporter.collectors.base import (
    GpuFamily,
    ScrapeView,
    StaticFamilies,
    StaticGpuFamily,
    non_empty,
)

_Maxima = tuple[GpuDevice, int, str, tuple[float | None, ...]]


class ClocksCollector:
    def __init__(self) -> None:
        self._maxima = StaticFamilies()  # maximum clocks are read once: built once per set

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        current = GpuFamily(names.GPU_CLOCK_HERTZ)
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
    maximum = StaticGpuFamily(names.GPU_CLOCK_MAX_HERTZ)
    for gpu, _, _, values in maxima:
        for clock, value in zip(CLOCKS, values, strict=True):
            maximum.add(gpu, value, clock)
    return maximum.family
