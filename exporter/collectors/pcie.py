"""The PCIe link: generation and width against their maximum, traffic and replays."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuCounter, GpuGauge, ScrapeView, non_empty


class PcieCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        generation = GpuGauge(
            "mirrorwatch_gpu_pcie_link_generation", "Current PCIe link generation."
        )
        generation_max = GpuGauge(
            "mirrorwatch_gpu_pcie_link_generation_max",
            "Highest PCIe generation the GPU and its slot support together.",
        )
        width = GpuGauge("mirrorwatch_gpu_pcie_link_width", "Current PCIe link width, in lanes.")
        width_max = GpuGauge(
            "mirrorwatch_gpu_pcie_link_width_max",
            "Widest PCIe link the GPU and its slot support together, in lanes.",
        )
        transmit = GpuCounter(
            "mirrorwatch_gpu_pcie_transmit_bytes", "Bytes the GPU sent over PCIe."
        )
        receive = GpuCounter(
            "mirrorwatch_gpu_pcie_receive_bytes", "Bytes the GPU received over PCIe."
        )
        replays = GpuCounter(
            "mirrorwatch_gpu_pcie_replays", "PCIe replays (retransmissions after link errors)."
        )
        for gpu in view.alive:
            link = gpu.pcie_link()
            if link is not None:
                generation.add(gpu, link.generation)
                generation_max.add(gpu, link.generation_max)
                width.add(gpu, link.width)
                width_max.add(gpu, link.width_max)
            traffic = gpu.pcie_bytes_total()
            if traffic is not None:
                transmit.add(gpu, traffic[0])
                receive.add(gpu, traffic[1])
            replays.add(gpu, gpu.pcie_replays_total())
        yield from non_empty(
            generation, generation_max, width, width_max, transmit, receive, replays
        )
