"""What every collector shares: the scrape's view of the GPUs and builders for labelled families."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import GpuDevice
from mirrorwatch.exporter.exposition import Series, WrittenFamily

GPU_LABELS = names.GPU
# Distinct series kept between scrapes, each with its last line (about 330 bytes): an 8-GPU
# host has about 700, so this bounds pid churn (the processes collector) to ~7 MB.
SERIES_CACHE_SIZE = 20_000


@dataclass(frozen=True)
class ScrapeView:
    """The GPUs of one scrape: all known ones, and those that answered the liveness probe."""

    gpus: Sequence[GpuDevice]
    alive: Sequence[GpuDevice]


class GpuCollector(Protocol):
    """One area's metrics (one module each), rebuilt from fresh readings on every scrape."""

    def collect(self, view: ScrapeView) -> Iterable[Metric]: ...


# Each GPU series, by (series name, GPU index, UUID, extra label values), kept between scrapes
# with its line prefix and last line (exposition.Series). The series name fixes the label
# names, so they need not be in the key. Saves writing each sample's labels again (sorting,
# escaping, formatting): 45%, 56% and 65% of the scrape's own CPU at 2, 8 and 32 GPUs (0.35,
# 1.54, 5.45 ms) on the stand-in NVML, for 1.1 MiB kept at 32 GPUs with the static families'
# (`bench/writer_bench.py`, "series", bench/results/writer.json).
_SERIES: dict[tuple[object, ...], Series] = {}


def _index(gpu: GpuDevice) -> str:
    """The ``gpu`` label: one string per GPU for all its series (about 80 a GPU), not one each;
    interned, as GPU indexes are few."""
    return sys.intern(str(gpu.index))


def _new_series(
    name: str, label_names: tuple[str, ...], gpu: GpuDevice, extra: tuple[str, ...]
) -> Series:
    if len(_SERIES) >= SERIES_CACHE_SIZE:  # label churn: start afresh, stay bounded
        _SERIES.clear()
    series = Series(name, label_names, (_index(gpu), gpu.uuid, *extra))
    _SERIES[(name, gpu.index, gpu.uuid, extra)] = series
    return series


class GpuFamily:
    """A family labelled per GPU, as its row of the table of metric names says (type, HELP,
    labels: ``gpu``, ``uuid``, then the extra ones); ``None`` values are skipped, so they
    stay absent."""

    def __init__(self, metric: names.Metric) -> None:
        if metric.labels[: len(GPU_LABELS)] != GPU_LABELS:
            raise ValueError(f"{metric} is not labelled per GPU: {metric.labels}")
        self._name = str(metric)
        self._label_names = metric.labels
        self.family = written(metric)

    def add(self, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        if value is not None:
            name = self._name
            series = _SERIES.get((name, gpu.index, gpu.uuid, extra)) or _new_series(
                name, self._label_names, gpu, extra
            )
            self.family.add(series, value)


class StaticGpuFamily(GpuFamily):
    """A GpuFamily for a family that StaticFamilies builds once: its series are not kept
    between scrapes (992 topology series at 32 GPUs), the family keeps their lines."""

    def add(self, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        if value is not None:
            values = (_index(gpu), gpu.uuid, *extra)
            self.family.add(Series(self._name, self._label_names, values), value)


def written(metric: names.Metric) -> WrittenFamily:
    """An empty WrittenFamily of ``metric``'s row: its family name, HELP and type."""
    return WrittenFamily(metric.family, metric.help, metric.type)


def gauge(metric: names.Metric, value: float | None = None) -> GaugeMetricFamily:
    """prometheus_client's gauge family of ``metric``'s row: its name, HELP and labels (a
    ``value`` for an unlabelled one)."""
    if value is not None:
        return GaugeMetricFamily(metric.family, metric.help, value=value)
    return GaugeMetricFamily(metric.family, metric.help, labels=list(metric.labels))


def counter(metric: names.Metric) -> CounterMetricFamily:
    """prometheus_client's counter family of ``metric``'s row."""
    return CounterMetricFamily(metric.family, metric.help, labels=list(metric.labels))


def non_empty(*families: GpuFamily | Metric) -> Iterator[Metric]:
    """Yield the families that got at least one sample; an unsupported metric is not exposed."""
    for family in families:
        metric = family.family if isinstance(family, GpuFamily) else family
        if metric.lines if isinstance(metric, WrittenFamily) else metric.samples:
            yield metric


class StaticFamilies:
    """Families that change only when their inputs do: built once per distinct key.

    For what does not change between scrapes (identity, limits, maximum clocks, topology).
    ``key`` holds the inputs (GPU objects compare by identity, then values); while it equals
    the last one the same families are yielded again. One instance per collector. Saves
    building them, above all the n·(n-1) topology series: 18%, 32% and 83% of the scrape's
    own CPU at 2, 8 and 32 GPUs (0.18, 0.65, 6.6 ms; `bench/writer_bench.py`,
    "static_families").
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: object = None
        self._families: list[Metric] | None = None

    def get(self, key: object, build: Callable[[], Iterable[Metric]]) -> list[Metric]:
        with self._lock:
            if self._families is not None and key == self._key:
                return self._families
        families = list(build())
        with self._lock:
            self._key, self._families = key, families
        return families
