"""GPU Performance Monitoring (Hopper and later): SM activity and occupancy, tensor and DRAM.

Each value is the mean over the background sampler's last interval (two GPM samples), as a
ratio 0..1; GPUs without GPM have none of these series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class GpmCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        sm_activity = GpuFamily(names.GPU_SM_ACTIVITY_RATIO)
        sm_occupancy = GpuFamily(names.GPU_SM_OCCUPANCY_RATIO)
        tensor = GpuFamily(names.GPU_TENSOR_ACTIVITY_RATIO)
        dram = GpuFamily(names.GPU_DRAM_ACTIVITY_RATIO)
        for gpu in view.alive:
            reading = gpu.gpm()
            if reading is None:
                continue
            sm_activity.add(gpu, reading.sm_activity_ratio)
            sm_occupancy.add(gpu, reading.sm_occupancy_ratio)
            tensor.add(gpu, reading.tensor_activity_ratio)
            dram.add(gpu, reading.dram_activity_ratio)
        yield from non_empty(sm_activity, sm_occupancy, tensor, dram)
