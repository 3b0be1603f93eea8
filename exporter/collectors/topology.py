"""How each pair of GPUs connects: NVLink, a PCIe switch, a host bridge, or across NUMA nodes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class TopologyCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        link = GpuGauge(
            "mirrorwatch_gpu_p2p_link_info",
            "The fastest path from this GPU to peer_gpu; always 1.",
            ["peer_gpu", "link"],
        )
        for gpu in view.gpus:
            for peer in gpu.peers():
                link.add(gpu, 1, str(peer.peer_index), peer.link)
        yield from non_empty(link)
