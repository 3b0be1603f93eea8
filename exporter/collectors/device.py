"""GPU identity and liveness: mirrorwatch_gpu_info and mirrorwatch_gpu_up."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class DeviceCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        info = GpuGauge("mirrorwatch_gpu_info", "GPU identity; always 1.", ["name", "pci_bus_id"])
        up = GpuGauge(
            "mirrorwatch_gpu_up", "1 when the GPU answered this scrape, 0 when lost or unreadable."
        )
        alive = {gpu.index for gpu in view.alive}
        for gpu in view.gpus:
            info.add(gpu, 1, gpu.name, gpu.pci_bus_id)
            up.add(gpu, 1 if gpu.index in alive else 0)
        yield from non_empty(info, up)
