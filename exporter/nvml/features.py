"""What one GPU offers for its whole life, probed once at init into one immutable value."""

from __future__ import annotations

from dataclasses import dataclass

from mirrorwatch.exporter.backend import PeerLink
from mirrorwatch.exporter.nvml.session import FieldsUnavailableError, GpuHandle, NvmlSession


@dataclass(frozen=True)
class DeviceFeatures:
    """A GPU's fixed features.

    Args:
        nvlink_numbers: the NVLink links it has (NVML answers their state), in order.
        pcie_byte_fields: its NVML answers the PCIe byte-counter fields; without them the
            background thread integrates sampled PCIe throughput instead.
        peer_links: how it reaches each other GPU of the host (see ``topology``).
    """

    nvlink_numbers: tuple[int, ...] = ()
    pcie_byte_fields: bool = False
    peer_links: tuple[PeerLink, ...] = ()

    @property
    def samples_pcie_throughput(self) -> bool:
        """Its PCIe bytes come from the background throughput sampler."""
        return not self.pcie_byte_fields


def probe_features(session: NvmlSession, gpu: GpuHandle) -> DeviceFeatures:
    """The NVLink links and PCIe byte fields of ``gpu``; its peer links are left to topology."""
    max_links = session.constant("NVML_NVLINK_MAX_LINKS") or 0
    nvlink_numbers = tuple(
        link
        for link in range(max_links)
        if session.call(gpu, "nvmlDeviceGetNvLinkState", link) is not None
    )
    pcie_byte_fields = False
    tx = session.field_id("NVML_FI_DEV_PCIE_COUNT_TX_BYTES")
    rx = session.field_id("NVML_FI_DEV_PCIE_COUNT_RX_BYTES")
    if tx is not None and rx is not None:
        try:
            pcie_byte_fields = len(session.field_values(gpu, [(tx, 0), (rx, 0)])) == 2
        except FieldsUnavailableError:
            pcie_byte_fields = False
    return DeviceFeatures(nvlink_numbers=nvlink_numbers, pcie_byte_fields=pcie_byte_fields)
