"""Which physical GPU each replica runs on: PCI bus ids from the framework, matched to NVML.

Pure functions, no framework and no NVML: the caller passes what those reported (TensorFlow's
device descriptions are parsed here; torch reports bus ids as numbers). The match is
by PCI bus id, never by index, because CUDA numbers GPUs fastest-first and
``CUDA_VISIBLE_DEVICES`` renumbers them, while NVML numbers them in PCI order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mirrorwatch.contract.vocabulary import canonical_bus_id

# "device: 0, name: NVIDIA A100-SXM4-80GB, pci bus id: 0000:1b:00.0, compute capability: 8.0"
_BUS_ID_IN_DESCRIPTION = re.compile(r"pci bus id:\s*([0-9a-fA-F:.]+)")
_DEVICE = re.compile(r"device:([A-Za-z_]+):(\d+)$")
# torch's spelling: "cuda:1", "cuda" (the current device, index unknown here), "cpu".
_TORCH_DEVICE = re.compile(r"^(cuda|cpu)(?::(\d+))?$")

# Replica order bus ids for CPU replicas standing in for GPUs (demos, tests against a
# simulated exporter): "0000:1b:00.0,0000:3b:00.0". Under torchrun, one per local rank.
REPLICA_PCI_BUS_IDS_ENV = "MIRRORWATCH_REPLICA_PCI_BUS_IDS"
# The process's rank on its host, as torchrun and Lightning's DDP launcher set it.
LOCAL_RANK_ENV = "LOCAL_RANK"


@dataclass(frozen=True)
class ReplicaDevice:
    """One replica: its TensorFlow device and, when known, its GPU's bus id and NVML UUID."""

    replica: int
    device: str
    pci_bus_id: str | None = None
    uuid: str | None = None


def _canonical(text: str) -> str | None:
    """vocabulary.canonical_bus_id, or None where ``text`` is no bus id (this module's "don't
    know")."""
    try:
        return canonical_bus_id(text)
    except ValueError:
        return None


def bus_id_from_description(description: str) -> str | None:
    """The canonical PCI bus id in a TensorFlow ``physical_device_desc``, or None."""
    match = _BUS_ID_IN_DESCRIPTION.search(description)
    return None if match is None else _canonical(match.group(1))


def device_kind_and_index(device: str) -> tuple[str, int] | None:
    """``("GPU", 1)`` for TensorFlow's ``/job:localhost/replica:0/task:0/device:GPU:1`` or
    ``/device:GPU:1`` and for torch's ``cuda:1``; ``("CPU", 0)`` for torch's ``cpu``."""
    match = _DEVICE.search(device)
    if match is not None:
        return match.group(1).upper(), int(match.group(2))
    match = _TORCH_DEVICE.match(device)
    if match is None or (match.group(1) == "cuda" and match.group(2) is None):
        return None
    return ("GPU" if match.group(1) == "cuda" else "CPU"), int(match.group(2) or 0)


def gpu_bus_ids(
    descriptions: Sequence[tuple[str, str]], logical_per_physical: Sequence[int] | None = None
) -> dict[int, str]:
    """Logical GPU index -> bus id, from TensorFlow's ``(device name, physical_device_desc)``.

    Each GPU that TensorFlow lists is matched by its own device name, so whatever order CUDA
    chose and however ``CUDA_VISIBLE_DEVICES`` renumbered, ``GPU:k`` gets the bus id that
    TensorFlow reports for ``GPU:k``. When one physical GPU is split into several logical ones
    and the listing shows only the physical GPUs, ``logical_per_physical`` (logical devices per
    listed GPU, in order) expands it: logical GPUs are numbered physical GPU by physical GPU.
    """
    listed: dict[int, str] = {}
    for name, description in descriptions:
        kind_index = device_kind_and_index(name)
        bus_id = bus_id_from_description(description)
        if kind_index is not None and kind_index[0] == "GPU" and bus_id is not None:
            listed[kind_index[1]] = bus_id
    if not logical_per_physical or sum(logical_per_physical) <= len(listed):
        return listed
    physical_order = [listed[index] for index in sorted(listed)]
    expanded: dict[int, str] = {}
    logical = 0
    for bus_id, count in zip(physical_order, logical_per_physical, strict=False):
        for _ in range(count):
            expanded[logical] = bus_id
            logical += 1
    return expanded


def bus_ids_from_env(value: str | None) -> list[str | None]:
    """The replica-order bus ids in ``MIRRORWATCH_REPLICA_PCI_BUS_IDS`` (None where unreadable)."""
    if not value:
        return []
    return [_canonical(part) for part in value.split(",")]


def bus_ids_for_process(
    value: str | None, replicas: int, local_rank: str | None
) -> list[str | None]:
    """The bus ids ``MIRRORWATCH_REPLICA_PCI_BUS_IDS`` gives this process's replicas.

    In replica order; but a process of one replica with a ``LOCAL_RANK`` (a torchrun or
    Lightning DDP rank) that is given a longer list takes it as one id per local rank, and
    stands on the id at its local rank (none where the list is shorter than that). So every
    rank of ``torchrun --nproc-per-node 2`` can be started with the same two ids.
    """
    ids = bus_ids_from_env(value)
    rank = (local_rank or "").strip()
    if replicas != 1 or len(ids) < 2 or not rank.isdigit():
        return ids
    return [ids[int(rank)]] if int(rank) < len(ids) else []


def match_replicas(
    devices: Sequence[str],
    gpu_bus_ids_by_index: Mapping[int, str],
    resolve_uuid: Callable[[str], str | None] | None = None,
    override_bus_ids: Sequence[str | None] = (),
) -> list[ReplicaDevice]:
    """Every replica with the bus id of its GPU and, where ``resolve_uuid`` knows it, the UUID.

    ``devices`` are the strategy's replica devices in replica order. ``override_bus_ids`` (from
    ``MIRRORWATCH_REPLICA_PCI_BUS_IDS``) wins over what TensorFlow reported, replica by replica.
    ``resolve_uuid`` takes a normalised bus id (NVML's ``nvmlDeviceGetHandleByPciBusId``).
    """
    replicas = []
    for replica, device in enumerate(devices):
        bus_id: str | None = None
        if replica < len(override_bus_ids):
            bus_id = override_bus_ids[replica]
        if bus_id is None:
            kind_index = device_kind_and_index(device)
            if kind_index is not None and kind_index[0] == "GPU":
                bus_id = gpu_bus_ids_by_index.get(kind_index[1])
        uuid = resolve_uuid(bus_id) if bus_id is not None and resolve_uuid is not None else None
        replicas.append(ReplicaDevice(replica, device, bus_id, uuid))
    return replicas


def uuid_resolver(nvml_bus_ids: Mapping[str, str]) -> Callable[[str], str | None]:
    """A resolver over NVML's ``{bus id as NVML spells it: UUID}`` (for tests and listings)."""
    by_normalized = {
        normalized: uuid
        for bus_id, uuid in nvml_bus_ids.items()
        if (normalized := _canonical(bus_id)) is not None
    }
    return by_normalized.get
