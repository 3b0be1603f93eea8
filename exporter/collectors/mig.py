"""MIG: whether each GPU has MIG on; per MIG device its identity, memory, processes and GPM.

A MIG device's series carry its parent's ``gpu`` and ``uuid`` plus ``gpu_instance`` and
``compute_instance`` (NVML's ids); ``mirrorwatch_gpu_mig_info`` adds ``mig_uuid`` and
``profile``, so joins stay on the small label set. GPUs without MIG have none of these series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty

INSTANCE_LABELS = ("gpu_instance", "compute_instance")
_GPM = (
    ("sm_activity_ratio", "share of SMs busy"),
    ("sm_occupancy_ratio", "SM occupancy"),
    ("tensor_activity_ratio", "tensor activity"),
    ("dram_activity_ratio", "DRAM bandwidth used"),
)


class MigCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        enabled = GpuGauge(
            "mirrorwatch_gpu_mig_enabled",
            "1 when MIG is on for the GPU (nvmlDeviceGetMigMode, current mode); absent on GPUs"
            " without MIG.",
        )
        info = GpuGauge(
            "mirrorwatch_gpu_mig_info",
            "One MIG device of the GPU: its UUID and NVML profile name (e.g. 3g.40gb).",
            ("mig_uuid", *INSTANCE_LABELS, "profile"),
        )
        used = GpuGauge(
            "mirrorwatch_gpu_mig_memory_used_bytes",
            "Framebuffer memory allocated on the MIG device's GPU instance.",
            INSTANCE_LABELS,
        )
        total = GpuGauge(
            "mirrorwatch_gpu_mig_memory_total_bytes",
            "Framebuffer memory of the MIG device's GPU instance.",
            INSTANCE_LABELS,
        )
        processes = GpuGauge(
            "mirrorwatch_gpu_mig_processes",
            "Compute processes on the MIG device.",
            INSTANCE_LABELS,
        )
        gpm = {
            field: GpuGauge(
                f"mirrorwatch_gpu_mig_{field}",
                f"GPM {what} of the MIG device's GPU instance over the last GPM interval"
                " (nvmlGpmMigSampleGet; Hopper and later).",
                ("gpu_instance",),
            )
            for field, what in _GPM
        }
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
