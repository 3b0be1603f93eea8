"""Temperatures, the limits NVML reports for them, and fan speeds."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.backend import TEMPERATURE_THRESHOLDS
from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class ThermalCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        temperature = GpuGauge(
            "mirrorwatch_gpu_temperature_celsius", "GPU core temperature, in degrees Celsius."
        )
        threshold = GpuGauge(
            "mirrorwatch_gpu_temperature_threshold_celsius",
            "Temperature limits NVML reports: slowdown and shutdown of the core, "
            "the maximum operating temperatures of core and memory.",
            ["threshold"],
        )
        fan = GpuGauge(
            "mirrorwatch_gpu_fan_speed_ratio",
            "Intended fan speed as a fraction of its maximum (0..1).",
            ["fan"],
        )
        for gpu in view.alive:
            temperature.add(gpu, gpu.temperature_celsius())
            for name in TEMPERATURE_THRESHOLDS:
                threshold.add(gpu, gpu.temperature_threshold_celsius(name), name)
            for number, speed in enumerate(gpu.fan_speed_ratios()):
                fan.add(gpu, speed, str(number))
        yield from non_empty(temperature, threshold, fan)
