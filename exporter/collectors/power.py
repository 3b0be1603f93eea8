"""Power draw, the enforced limit, and energy used since the driver loaded."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuCounter, GpuGauge, ScrapeView, non_empty


class PowerCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        power = GpuGauge("mirrorwatch_gpu_power_watts", "Power draw of the board, in watts.")
        limit = GpuGauge(
            "mirrorwatch_gpu_power_limit_watts", "Power limit the driver enforces, in watts."
        )
        energy = GpuCounter(
            "mirrorwatch_gpu_energy_joules", "Energy used since the driver loaded, in joules."
        )
        for gpu in view.alive:
            power.add(gpu, gpu.power_watts())
            limit.add(gpu, gpu.power_limit_watts())
            energy.add(gpu, gpu.energy_joules_total())
        yield from non_empty(power, limit, energy)
