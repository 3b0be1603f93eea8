"""The name -> collector table, and the scrape: run each chosen collector, isolated and timed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.collectors.base import GpuCollector, ScrapeView, gauge, written
from mirrorwatch.exporter.collectors.clocks import ClocksCollector
from mirrorwatch.exporter.collectors.device import DeviceCollector
from mirrorwatch.exporter.collectors.ecc import EccCollector
from mirrorwatch.exporter.collectors.gpm import GpmCollector
from mirrorwatch.exporter.collectors.memory import MemoryCollector
from mirrorwatch.exporter.collectors.mig import MigCollector
from mirrorwatch.exporter.collectors.nvlink import NvlinkCollector
from mirrorwatch.exporter.collectors.pcie import PcieCollector
from mirrorwatch.exporter.collectors.power import PowerCollector
from mirrorwatch.exporter.collectors.processes import DEFAULT_TOP_PROCESSES, ProcessesCollector
from mirrorwatch.exporter.collectors.thermal import ThermalCollector
from mirrorwatch.exporter.collectors.throttle import ThrottleCollector
from mirrorwatch.exporter.collectors.topology import TopologyCollector
from mirrorwatch.exporter.collectors.utilization import UtilizationCollector
from mirrorwatch.exporter.collectors.xid import XidCollector
from mirrorwatch.exporter.exposition import Series

log = logging.getLogger(__name__)

COLLECTORS: Mapping[str, Callable[[], GpuCollector]] = {
    "device": DeviceCollector,
    "utilization": UtilizationCollector,
    "memory": MemoryCollector,
    "thermal": ThermalCollector,
    "power": PowerCollector,
    "clocks": ClocksCollector,
    "throttle": ThrottleCollector,
    "pcie": PcieCollector,
    "nvlink": NvlinkCollector,
    "ecc": EccCollector,
    "xid": XidCollector,
    "topology": TopologyCollector,
    "processes": ProcessesCollector,
    "gpm": GpmCollector,
    "mig": MigCollector,
}
COLLECTOR_NAMES: tuple[str, ...] = tuple(COLLECTORS)
SUCCESS = names.EXPORTER_COLLECTOR_SUCCESS
DURATION = names.EXPORTER_COLLECTOR_DURATION_SECONDS


def select_collectors(names: str) -> list[str]:
    """The collectors a comma-separated list names (``all`` or none: every one).

    Raises ValueError naming the first unknown name and the known ones.
    """
    chosen = [name.strip() for name in names.split(",") if name.strip()]
    if chosen in ([], ["all"]):
        return list(COLLECTOR_NAMES)
    unknown = [name for name in chosen if name not in COLLECTORS]
    if unknown:
        raise ValueError(
            f"unknown collector {unknown[0]!r}; known: all, {', '.join(COLLECTOR_NAMES)}"
        )
    return chosen


@dataclass(frozen=True)
class ExporterInfo:
    """Static facts the exporter publishes about itself: its version and configuration."""

    version: str
    run_ttl_seconds: float  # --run-ttl: the TrainingTelemetryStale rule reads it
    expected_gpus: int = 0
    top_processes: int = DEFAULT_TOP_PROCESSES  # --top-processes: per-process series per GPU


def _collector_series(name: str) -> tuple[Series, Series]:
    """The collector's success and duration series."""
    return (
        Series(str(SUCCESS), SUCCESS.labels, (name,)),
        Series(str(DURATION), DURATION.labels, (name,)),
    )


def _build(name: str, info: ExporterInfo) -> GpuCollector:
    if name == "processes":
        return ProcessesCollector(top=info.top_processes)
    return COLLECTORS[name]()


class GpuMetrics:
    """A prometheus_client collector: every scrape reads the backend afresh.

    Each GPU collector runs on its own; an exception in one is logged once and reported as
    ``SUCCESS{collector} 0`` while the others still answer.
    """

    def __init__(
        self, backend: GpuBackend, info: ExporterInfo, enabled: Sequence[str] = COLLECTOR_NAMES
    ) -> None:
        self._backend = backend
        self._info = info
        self._collectors = [(name, _build(name, info)) for name in enabled]
        self._series = {name: _collector_series(name) for name in enabled}
        self._failures_logged: set[tuple[str, str]] = set()

    def view(self) -> ScrapeView:
        """The GPUs of this scrape, each probed once for liveness."""
        if not self._backend.status().up:
            return ScrapeView(gpus=(), alive=())
        gpus = self._backend.gpus()
        return ScrapeView(gpus=gpus, alive=[gpu for gpu in gpus if gpu.alive()])

    def collect(self) -> Iterator[Metric]:
        view = self.view()
        success, duration = written(SUCCESS), written(DURATION)
        for name, collector in self._collectors:
            started = time.perf_counter()
            families, ok = self._run(name, collector, view)
            success_series, duration_series = self._series[name]
            duration.add(duration_series, time.perf_counter() - started)
            success.add(success_series, 1 if ok else 0)
            yield from families
        yield from self._exporter_families(view)
        yield success
        yield duration

    def _run(
        self, name: str, collector: GpuCollector, view: ScrapeView
    ) -> tuple[list[Metric], bool]:
        try:
            return list(collector.collect(view)), True
        except Exception as error:  # isolation is the point: one area never fails the scrape
            key = (name, type(error).__name__)
            if key not in self._failures_logged:
                self._failures_logged.add(key)
                log.exception("collector failed", extra={"collector": name})
            return [], False

    def _exporter_families(self, view: ScrapeView) -> Iterator[Metric]:
        status = self._backend.status()
        yield gauge(names.UP, value=1 if status.up else 0)
        build = gauge(names.EXPORTER_BUILD_INFO)
        build.add_metric(
            [self._info.version, self._backend.kind, self._backend.driver_version() or ""], 1
        )
        yield build
        yield gauge(names.EXPORTER_GPUS, value=len(view.gpus))
        yield gauge(names.EXPORTER_EXPECTED_GPUS, value=self._info.expected_gpus)
        yield gauge(names.EXPORTER_RUN_TTL_SECONDS, value=self._info.run_ttl_seconds)
