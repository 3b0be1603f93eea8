"""NVLink: each link's state, traffic and errors by type."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.base import GpuCounter, GpuGauge, ScrapeView, non_empty


class NvlinkCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        up = GpuGauge("mirrorwatch_gpu_nvlink_up", "1 when the NVLink link is active.", ["link"])
        transmit = GpuCounter(
            "mirrorwatch_gpu_nvlink_transmit_bytes", "Data bytes sent over the link.", ["link"]
        )
        receive = GpuCounter(
            "mirrorwatch_gpu_nvlink_receive_bytes", "Data bytes received over the link.", ["link"]
        )
        errors = GpuCounter(
            "mirrorwatch_gpu_nvlink_errors",
            "NVLink data-link errors: replays, recoveries, flit and data CRC errors.",
            ["link", "type"],
        )
        for gpu in view.alive:
            for number, link in sorted(gpu.nvlinks().items()):
                label = str(number)
                up.add(gpu, 1 if link.up else 0, label)
                transmit.add(gpu, link.transmit_bytes, label)
                receive.add(gpu, link.receive_bytes, label)
                for error_type, count in link.errors.items():
                    errors.add(gpu, count, label, error_type)
        yield from non_empty(up, transmit, receive, errors)
