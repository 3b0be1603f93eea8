"""GPU Performance Monitoring (Hopper and later): SM activity and occupancy, tensor and DRAM.

Each value is the mean over the background sampler's last interval (two GPM samples), as a
ratio 0..1; GPUs without GPM have none of these series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuGauge, ScrapeView, non_empty


class GpmCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        sm_activity = GpuGauge(
            "mirrorwatch_gpu_sm_activity_ratio",
            "Share of SMs busy over the last GPM interval (NVML_GPM_METRIC_SM_UTIL).",
        )
        sm_occupancy = GpuGauge(
            "mirrorwatch_gpu_sm_occupancy_ratio",
            "Resident warps against the SMs' maximum over the last GPM interval"
            " (NVML_GPM_METRIC_SM_OCCUPANCY).",
        )
        tensor = GpuGauge(
            "mirrorwatch_gpu_tensor_activity_ratio",
            "Share of time the SMs ran any tensor operation over the last GPM interval"
            " (NVML_GPM_METRIC_ANY_TENSOR_UTIL).",
        )
        dram = GpuGauge(
            "mirrorwatch_gpu_dram_activity_ratio",
            "DRAM bandwidth used against its peak over the last GPM interval"
            " (NVML_GPM_METRIC_DRAM_BW_UTIL).",
        )
        for gpu in view.alive:
            reading = gpu.gpm()
            if reading is None:
                continue
            sm_activity.add(gpu, reading.sm_activity_ratio)
            sm_occupancy.add(gpu, reading.sm_occupancy_ratio)
            tensor.add(gpu, reading.tensor_activity_ratio)
            dram.add(gpu, reading.dram_activity_ratio)
        yield from non_empty(sm_activity, sm_occupancy, tensor, dram)
