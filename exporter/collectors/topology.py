"""How each pair of GPUs connects: NVLink, a PCIe switch, a host bridge, or across NUMA nodes.

``mirrorwatch_gpu_p2p_link_info`` has one series per ordered GPU pair, n·(n-1) for n GPUs (992
at 32, 4,032 at 64). Topology is read once per NVML session, so the family is built and
rendered once per topology and each scrape only checks that the GPUs and their peer links are
the same objects as before (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import GpuDevice, PeerLink
from mirrorwatch.exporter.collectors.base import (
    ScrapeView,
    StaticFamilies,
    StaticGpuFamily,
    non_empty,
)


class TopologyCollector:
    def __init__(self) -> None:
        self._links = StaticFamilies()

    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        topology = tuple((gpu, gpu.index, gpu.uuid, tuple(gpu.peers())) for gpu in view.gpus)
        yield from non_empty(*self._links.get(topology, lambda: [_links(topology)]))


def _links(topology: Sequence[tuple[GpuDevice, int, str, Sequence[PeerLink]]]) -> Metric:
    link = StaticGpuFamily(names.GPU_P2P_LINK_INFO)
    for gpu, _, _, peers in topology:
        for peer in peers:
            link.add(gpu, 1, str(peer.peer_index), peer.link)
    return link.family
