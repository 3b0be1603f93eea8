"""Temperatures, the limits NVML reports for them, and fan speeds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import TEMPERATURE_THRESHOLDS, GpuDevice
from mirrorwatch.exporter.collectors.base import (
    GpuFamily,
    ScrapeView,
    StaticFamilies,
    StaticGpuFamily,
    non_empty,
)

_Limits = tuple[GpuDevice, int, str, tuple[float | None, ...]]


class ThermalCollector:
    def __init__(self) -> None:
        self._thresholds = StaticFamilies()  # limits are read once: built once per set of them

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        temperature = GpuFamily(names.GPU_TEMPERATURE_CELSIUS)
        fan = GpuFamily(names.GPU_FAN_SPEED_RATIO)
        limits = tuple(
            (
                gpu,
                gpu.index,
                gpu.uuid,
                tuple(gpu.temperature_threshold_celsius(name) for name in TEMPERATURE_THRESHOLDS),
            )
            for gpu in view.alive
        )
        for gpu in view.alive:
            temperature.add(gpu, gpu.temperature_celsius())
            for number, speed in enumerate(gpu.fan_speed_ratios()):
                fan.add(gpu, speed, str(number))
        (threshold,) = self._thresholds.get(limits, lambda: [_thresholds(limits)])
        yield from non_empty(temperature, threshold, fan)


def _thresholds(limits: Sequence[_Limits]) -> Metric:
    threshold = StaticGpuFamily(names.GPU_TEMPERATURE_THRESHOLD_CELSIUS)
    for gpu, _, _, values in limits:
        for name, value in zip(TEMPERATURE_THRESHOLDS, values, strict=True):
            threshold.add(gpu, value, name)
    return threshold.family
