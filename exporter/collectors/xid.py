"""XID errors the driver reported, by XID number, counted since the exporter started."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuCounter, ScrapeView, non_empty


class XidCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        errors = GpuCounter(
            "mirrorwatch_gpu_xid_errors",
            "XID error events since the exporter started, by XID number.",
            ["xid"],
        )
        # Every GPU, lost ones included: the XID that reported the loss is the point.
        for gpu in view.gpus:
            for xid, count in sorted(gpu.xid_errors_total().items()):
                errors.add(gpu, count, str(xid))
        yield from non_empty(errors)
