"""NVLink: each link's state, traffic and errors by type."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class NvlinkCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        up = GpuFamily(names.GPU_NVLINK_UP)
        transmit = GpuFamily(names.GPU_NVLINK_TRANSMIT_BYTES_TOTAL)
        receive = GpuFamily(names.GPU_NVLINK_RECEIVE_BYTES_TOTAL)
        errors = GpuFamily(names.GPU_NVLINK_ERRORS_TOTAL)
        for gpu in view.alive:
            for number, link in sorted(gpu.nvlinks().items()):
                label = str(number)
                up.add(gpu, 1 if link.up else 0, label)
                transmit.add(gpu, link.transmit_bytes, label)
                receive.add(gpu, link.receive_bytes, label)
                for error_type, count in link.errors.items():
                    errors.add(gpu, count, label, error_type)
        yield from non_empty(up, transmit, receive, errors)
