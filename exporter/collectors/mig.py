"""MIG: whether each GPU has MIG on; per MIG device its identity, memory, processes and GPM.

A MIG device's series carry its parent's ``gpu`` and ``uuid`` plus ``gpu_instance`` and
``compute_instance`` (NVML's ids); ``GPU_MIG_INFO`` adds ``mig_uuid`` and
``profile``, so joins stay on the small label set. GPUs without MIG have none of these series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty

# Each GPM reading's field and its family.
_GPM = (
    ("sm_activity_ratio", names.GPU_MIG_SM_ACTIVITY_RATIO),
    ("sm_occupancy_ratio", names.GPU_MIG_SM_OCCUPANCY_RATIO),
    ("tensor_activity_ratio", names.GPU_MIG_TENSOR_ACTIVITY_RATIO),
    ("dram_activity_ratio", names.GPU_MIG_DRAM_ACTIVITY_RATIO),
)


class MigCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        enabled = GpuFamily(names.GPU_MIG_ENABLED)
        info = GpuFamily(names.GPU_MIG_INFO)
        used = GpuFamily(names.GPU_MIG_MEMORY_USED_BYTES)
        total = GpuFamily(names.GPU_MIG_MEMORY_TOTAL_BYTES)
        processes = GpuFamily(names.GPU_MIG_PROCESSES)
        gpm = {field: GpuFamily(metric) for field, metric in _GPM}
        for gpu in view.alive:
            on = gpu.mig_enabled()
            if on is None:
                continue
            enabled.add(gpu, float(on))
            instances_done: set[str] = set()  # GPM is per GPU instance, devices per compute one
            for device in gpu.mig_devices():
                ids = (str(device.gpu_instance), str(device.compute_instance))
                info.add(gpu, 1.0, device.mig_uuid, *ids, device.profile)
                if device.memory is not None:
                    used.add(gpu, device.memory.used, *ids)
                    total.add(gpu, device.memory.total, *ids)
                count = device.processes
                processes.add(gpu, None if count is None else float(count), *ids)
                if device.gpm is not None and ids[0] not in instances_done:
                    instances_done.add(ids[0])
                    for field, _ in _GPM:
                        gpm[field].add(gpu, getattr(device.gpm, field), ids[0])
        yield from non_empty(enabled, info, used, total, processes, *gpm.values())
