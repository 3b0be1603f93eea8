"""Memory ECC errors since the driver loaded: corrected and uncorrected."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.collectors.base import GpuFamily, ScrapeView, non_empty


class EccCollector:
    def collect(self, view: ScrapeView) -> Iterator[Metric]:
        errors = GpuFamily(names.GPU_ECC_ERRORS_TOTAL)
        for gpu in view.alive:
            for error_type, count in (gpu.ecc_errors_total() or {}).items():
                errors.add(gpu, count, error_type)
        yield from non_empty(errors)
