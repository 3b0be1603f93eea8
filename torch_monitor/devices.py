"""What torch says about the GPUs and a model's replicas: the monitor's device probe.

The probe functions (``gpu_bus_ids``, ``gpu_uuids``, ``nvml_uuids``, ``memory_bytes``) run on
the pusher thread and answer "don't know" (empty, None) rather than raise. None of them starts
CUDA in a process that has not: a CPU run stays a CPU run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

from mirrorwatch.contract.vocabulary import canonical_bus_id
from mirrorwatch.telemetry.nvml import nvml_uuids

log = logging.getLogger("mirrorwatch.torch")

__all__ = [
    "Replicas",
    "current_device",
    "gpu_bus_ids",
    "gpu_uuids",
    "memory_bytes",
    "nvml_uuid",
    "nvml_uuids",
    "replicas_of",
]


def _cuda_started() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def gpu_bus_ids() -> dict[int, str]:
    """CUDA device index -> PCI bus id, from ``cudaDeviceProp``'s domain, bus and device ids
    (torch's ``pci_domain_id``, ``pci_bus_id``, ``pci_device_id``; function 0, as a GPU is)."""
    if not _cuda_started():
        return {}
    found: dict[int, str] = {}
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        parts = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
        if any(not isinstance(part, int) for part in parts):
            continue  # a torch without the PCI fields: the UUID must do
        domain, bus, device = parts
        try:
            found[index] = canonical_bus_id(f"{domain:04x}:{bus:02x}:{device:02x}.0")
        except ValueError:
            continue
    return found


def nvml_uuid(raw: str, visible_devices: str | None) -> str | None:
    """NVML's spelling of the UUID torch reports (``cudaDeviceProp.uuid``, printed without
    NVML's ``GPU-`` prefix), or None where it cannot be told: under MIG
    (``CUDA_VISIBLE_DEVICES`` naming ``MIG-`` devices) the same bytes name a MIG device."""
    text = raw.strip()
    if not text or "MIG-" in (visible_devices or ""):
        return None
    if text.startswith(("GPU-", "MIG-")):
        return text
    return f"GPU-{text}"


def gpu_uuids() -> dict[int, str]:
    """CUDA device index -> UUID as NVML spells it, where torch reports one."""
    if not _cuda_started():
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    found: dict[int, str] = {}
    for index in range(torch.cuda.device_count()):
        raw = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        uuid = nvml_uuid(str(raw), visible) if raw is not None else None
        if uuid is not None:
            found[index] = uuid
    return found


def memory_bytes(gpu: int) -> tuple[float, float] | None:
    """``(current, peak)`` bytes of tensors torch's caching allocator holds on GPU ``gpu``:
    the allocator's counters, read without a device synchronisation."""
    if not _cuda_started() or gpu >= torch.cuda.device_count():
        return None
    return float(torch.cuda.memory_allocated(gpu)), float(torch.cuda.max_memory_allocated(gpu))


def current_device() -> str:
    """This process's device when no model says otherwise: its current CUDA device, if CUDA
    has started, else the CPU."""
    if _cuda_started():
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


@dataclass(frozen=True)
class Replicas:
    """What a model wrapper says about its replicas."""

    strategy: str | None
    devices: tuple[str, ...]
    model: str
    degraded: str | None = None  # why it runs fewer replicas than it was built for


def _parameter_device(module: torch.nn.Module) -> str:
    for parameter in module.parameters():
        device = parameter.device
        return "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"
    return current_device()


def replicas_of(model: torch.nn.Module) -> Replicas:
    """The replicas of ``model``: a DistributedDataParallel process's one device, a
    DataParallel model's ``device_ids``, else the device of the model's parameters."""
    parallel = torch.nn.parallel
    if isinstance(model, parallel.DistributedDataParallel):
        inner = model.module
        ids = model.device_ids
        device = f"cuda:{ids[0]}" if ids else _parameter_device(inner)
        return Replicas("DistributedDataParallel", (device,), type(inner).__name__)
    if isinstance(model, parallel.DataParallel):
        inner = model.module
        if model.device_ids:
            devices = tuple(f"cuda:{index}" for index in model.device_ids)
            return Replicas("DataParallel", devices, type(inner).__name__)
        # DataParallel without CUDA (torch/nn/parallel/data_parallel.py: no device_ids when
        # no CUDA device is available) calls the module as it is: one replica, where it is.
        return Replicas(
            "DataParallel",
            (_parameter_device(inner),),
            type(inner).__name__,
            degraded="DataParallel sees no CUDA device, so it runs the model as one replica",
        )
    return Replicas(None, (_parameter_device(model),), type(model).__name__)
