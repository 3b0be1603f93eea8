"""The GPUs' NVML UUIDs by PCI bus id, for both front ends: the only place the clients ask NVML."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from mirrorwatch.contract.vocabulary import nvml_bus_id

log = logging.getLogger("mirrorwatch.telemetry")


def nvml_uuids(bus_ids: Sequence[str]) -> dict[str, str]:
    """``{bus id: NVML UUID}`` for the bus ids NVML knows; empty without pynvml or NVML.

    Asks ``nvmlDeviceGetHandleByPciBusId``: a bus id names the same GPU whatever order CUDA or
    ``CUDA_VISIBLE_DEVICES`` gave it. NVML is started and shut down once, here.
    """
    if not bus_ids:
        return {}
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        log.info("mirrorwatch: NVML unavailable (%s); sending PCI bus ids only", error)
        return {}
    found: dict[str, str] = {}
    try:
        for bus_id in dict.fromkeys(bus_ids):
            try:
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(nvml_bus_id(bus_id))
                uuid = pynvml.nvmlDeviceGetUUID(handle)
            except (ValueError, pynvml.NVMLError):  # ValueError: not a bus id at all
                continue
            found[bus_id] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return found
