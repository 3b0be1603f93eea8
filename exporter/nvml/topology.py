"""How the host's GPUs reach each other: NVLink (direct or over an NVSwitch), else the PCIe path."""

from __future__ import annotations

from collections.abc import Sequence

from mirrorwatch.exporter.backend import P2pLink, PeerLink
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession, pci_bus_id

# nvmlGpuTopologyLevel_t -> the contract's link label; the closest levels share a PCIe switch.
_TOPOLOGY_LINKS: tuple[tuple[str, P2pLink], ...] = (
    ("NVML_TOPOLOGY_INTERNAL", "pcie_switch"),
    ("NVML_TOPOLOGY_SINGLE", "pcie_switch"),
    ("NVML_TOPOLOGY_MULTIPLE", "pcie_switch"),
    ("NVML_TOPOLOGY_HOSTBRIDGE", "pcie_host_bridge"),
    ("NVML_TOPOLOGY_NODE", "numa_node"),
    ("NVML_TOPOLOGY_SYSTEM", "cross_numa"),
)


def _nvlink_peers(
    session: NvmlSession, gpus: Sequence[tuple[GpuHandle, Sequence[int]]]
) -> tuple[set[frozenset[int]], set[int]]:
    """GPU pairs joined by an active NVLink, and the GPUs with a link up to an NVSwitch."""
    by_bus_id = {gpu.pci_bus_id: gpu for gpu, _ in gpus}
    switch = session.constant("NVML_NVLINK_DEVICE_TYPE_SWITCH")
    nvlinked: set[frozenset[int]] = set()
    on_nvswitch: set[int] = set()
    for gpu, links in gpus:
        for number in links:
            if not session.call(gpu, "nvmlDeviceGetNvLinkState", number):
                continue
            remote = session.call(gpu, "nvmlDeviceGetNvLinkRemotePciInfo", number)
            peer = None if remote is None else by_bus_id.get(pci_bus_id(remote.busId))
            if peer is not None and peer.index != gpu.index:
                nvlinked.add(frozenset((gpu.index, peer.index)))
            elif switch is not None:
                kind = session.call(gpu, "nvmlDeviceGetNvLinkRemoteDeviceType", number)
                if kind is not None and int(kind) == switch:
                    on_nvswitch.add(gpu.index)
    return nvlinked, on_nvswitch


def peer_links(
    session: NvmlSession, gpus: Sequence[tuple[GpuHandle, Sequence[int]]]
) -> list[tuple[PeerLink, ...]]:
    """Each GPU's links to the others, by peer index, in the order of ``gpus``.

    ``gpus`` pairs each GPU with its NVLink link numbers. NVLink wins over any PCIe path; a
    pair NVML cannot place has no link.
    """
    nvlinked, on_nvswitch = _nvlink_peers(session, gpus)
    levels = {
        level: link
        for name, link in _TOPOLOGY_LINKS
        if (level := session.constant(name)) is not None
    }
    peers: dict[int, list[PeerLink]] = {gpu.index: [] for gpu, _ in gpus}
    handles = [gpu for gpu, _ in gpus]
    for position, first in enumerate(handles):
        for second in handles[position + 1 :]:
            pair = frozenset((first.index, second.index))
            link: P2pLink | None = None
            if pair in nvlinked or pair <= on_nvswitch:
                link = "nvlink"
            else:
                level = session.call(first, "nvmlDeviceGetTopologyCommonAncestor", second.handle)
                link = None if level is None else levels.get(int(level))
            if link is not None:
                peers[first.index].append(PeerLink(second.index, link))
                peers[second.index].append(PeerLink(first.index, link))
    return [tuple(sorted(peers[gpu.index], key=lambda p: p.peer_index)) for gpu in handles]
