"""XID errors the driver reported, by XID number: counts since exporter start, latest times."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class XidCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        errors = GpuFamily(names.GPU_XID_ERRORS_TOTAL)
        last_event = GpuFamily(names.GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS)
        # Every GPU, lost ones included: the XID that reported the loss is the point.
        for gpu in view.gpus:
            for xid, count in sorted(gpu.xid_errors_total().items()):
                errors.add(gpu, count, str(xid))
            for xid, at in sorted(gpu.xid_last_event_timestamp_seconds().items()):
                last_event.add(gpu, at, str(xid))
        yield from non_empty(errors, last_event)
