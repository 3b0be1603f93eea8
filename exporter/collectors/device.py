"""GPU identity and liveness: mirrorwatch_gpu_info and mirrorwatch_gpu_up."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import GpuDevice
from mirrorwatch.exporter.collectors.base import (
    GpuFamily,
    ScrapeView,
    StaticFamilies,
    StaticGpuFamily,
    non_empty,
)


class DeviceCollector:
    def __init__(self) -> None:
        self._info = StaticFamilies()  # identity is read once: built once per set of GPUs

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        identity = tuple((gpu, gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id) for gpu in view.gpus)
        (info,) = self._info.get(identity, lambda: [_info(view.gpus)])
        up = GpuFamily(names.GPU_UP)
        alive = {gpu.index for gpu in view.alive}
        for gpu in view.gpus:
            up.add(gpu, 1 if gpu.index in alive else 0)
        yield from non_empty(info, up)


def _info(gpus: Sequence[GpuDevice]) -> Metric:
    info = StaticGpuFamily(names.GPU_INFO)
    for gpu in gpus:
        info.add(gpu, 1, gpu.name, gpu.pci_bus_id)
    return info.family
