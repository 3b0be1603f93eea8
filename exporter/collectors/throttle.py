"""Why clocks are held down now (event reasons) and for how long they have been (violation time)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class ThrottleCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        active = GpuFamily(names.GPU_CLOCKS_EVENT_ACTIVE)
        seconds = GpuFamily(names.GPU_THROTTLE_SECONDS_TOTAL)
        for gpu in view.alive:
            for reason, is_active in (gpu.clocks_event_reasons() or {}).items():
                active.add(gpu, 1 if is_active else 0, reason)
            for reason, total in gpu.throttle_seconds_total().items():
                seconds.add(gpu, total, reason)
        yield from non_empty(active, seconds)
