"""Which GPU of this host a training replica runs on: by NVML UUID, else by PCI bus id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirrorwatch.contract.vocabulary import canonical_bus_id
from mirrorwatch.exporter.backend import GpuDevice
from mirrorwatch.exporter.ingest.schema import Replica


@dataclass(frozen=True)
class HostGpu:
    """A GPU of this host as the GPU series label it."""

    index: int
    uuid: str


class GpuDirectory:
    """The host's GPUs by UUID and by bus id, built once per scrape."""

    def __init__(self, gpus: Sequence[GpuDevice]) -> None:
        self._by_uuid: dict[str, HostGpu] = {}
        self._by_bus_id: dict[str, HostGpu] = {}
        for gpu in gpus:
            host_gpu = HostGpu(gpu.index, gpu.uuid)
            self._by_uuid[gpu.uuid.lower()] = host_gpu
            try:
                self._by_bus_id[canonical_bus_id(gpu.pci_bus_id)] = host_gpu
            except ValueError:
                continue  # a GPU without a readable bus id can still be matched by UUID
        # Equal for two directories that resolve every replica alike, so a resolution can be
        # kept while the host's GPUs stay the same.
        self.key = (tuple(self._by_uuid.items()), tuple(self._by_bus_id.items()))

    def resolve(self, replica: Replica) -> HostGpu | None:
        """The replica's GPU, or None when it is not a GPU of this host.

        A UUID the worker sent is authoritative: when it is not one of ours, the bus id is not
        tried, because the same bus id names a different GPU on another host.
        """
        if replica.uuid is not None:
            return self._by_uuid.get(replica.uuid.lower())
        if replica.pci_bus_id is not None:
            return self._by_bus_id.get(canonical_bus_id(replica.pci_bus_id))
        return None
