"""Power draw, the enforced limit, and energy used since the driver loaded."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class PowerCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        power = GpuFamily(names.GPU_POWER_WATTS)
        limit = GpuFamily(names.GPU_POWER_LIMIT_WATTS)
        energy = GpuFamily(names.GPU_ENERGY_JOULES_TOTAL)
        for gpu in view.alive:
            power.add(gpu, gpu.power_watts())
            limit.add(gpu, gpu.power_limit_watts())
            energy.add(gpu, gpu.energy_joules_total())
        yield from non_empty(power, limit, energy)
