"""Temperatures, the limits NVML reports for them, and fan speeds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.backend import TEMPERATURE_THRESHOLDS, GpuDevice
from mirrorwatch.exporter.collectors.base import (
    GpuGauge,
    ScrapeView,
    StaticFamilies,
    StaticGpuGauge,
    non_empty,
)

_Limits = tuple[GpuDevice, int, str, tuple[float | None, ...]]


class ThermalCollector:
    def __init__(self) -> None:
        self._thresholds = StaticFamilies()  # limits are read once: built once per set of them

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        temperature = GpuGauge(
            "mirrorwatch_gpu_temperature_celsius", "GPU core temperature, in degrees Celsius."
        )
        fan = GpuGauge(
            "mirrorwatch_gpu_fan_speed_ratio",
            "Intended fan speed as a fraction of its maximum (0..1).",
            ["fan"],
        )
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
    threshold = StaticGpuGauge(
        "mirrorwatch_gpu_temperature_threshold_celsius",
        "Temperature limits NVML reports: slowdown and shutdown of the core, "
        "the maximum operating temperatures of core and memory.",
        ["threshold"],
    )
    for gpu, _, _, values in limits:
        for name, value in zip(TEMPERATURE_THRESHOLDS, values, strict=True):
            threshold.add(gpu, value, name)
    return threshold.family
