"""The PCIe link: generation and width against their maximum, traffic and replays."""

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

_Maxima = tuple[GpuDevice, int, str, int | None, int | None]


class PcieCollector:
    def __init__(self) -> None:
        self._maxima = StaticFamilies()  # the maximum link is read once: built once per set

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        generation = GpuFamily(names.GPU_PCIE_LINK_GENERATION)
        width = GpuFamily(names.GPU_PCIE_LINK_WIDTH)
        transmit = GpuFamily(names.GPU_PCIE_TRANSMIT_BYTES_TOTAL)
        receive = GpuFamily(names.GPU_PCIE_RECEIVE_BYTES_TOTAL)
        replays = GpuFamily(names.GPU_PCIE_REPLAYS_TOTAL)
        maxima: list[_Maxima] = []
        for gpu in view.alive:
            link = gpu.pcie_link()
            if link is not None:
                generation.add(gpu, link.generation)
                width.add(gpu, link.width)
                maxima.append((gpu, gpu.index, gpu.uuid, link.generation_max, link.width_max))
            traffic = gpu.pcie_bytes_total()
            if traffic is not None:
                transmit.add(gpu, traffic[0])
                receive.add(gpu, traffic[1])
            replays.add(gpu, gpu.pcie_replays_total())
        key = tuple(maxima)
        generation_max, width_max = self._maxima.get(key, lambda: _maxima(key))
        yield from non_empty(
            generation, generation_max, width, width_max, transmit, receive, replays
        )


def _maxima(maxima: Sequence[_Maxima]) -> list[Metric]:
    generation_max = StaticGpuFamily(names.GPU_PCIE_LINK_GENERATION_MAX)
    width_max = StaticGpuFamily(names.GPU_PCIE_LINK_WIDTH_MAX)
    for gpu, _, _, generation, width in maxima:
        generation_max.add(gpu, generation)
        width_max.add(gpu, width)
    return [generation_max.family, width_max.family]
