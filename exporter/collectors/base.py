"""What every collector shares: the scrape's view of the GPUs and builders for labelled families."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import GpuDevice
from mirrorwatch.exporter.exposition import (
    Series,
    WrittenFamily,
    mark_static,
)

GPU_LABELS = names.GPU
# Distinct label sets kept between scrapes; past this (pid churn in the processes collector)
# the cache starts afresh, so it stays bounded.
LABEL_SET_CACHE_SIZE = 50_000
# Distinct series kept between scrapes, each with its last line (about 330 bytes with its
# share of a label set): an 8-GPU host has about 700, so this bounds pid churn to ~7 MB.
SERIES_CACHE_SIZE = 20_000


@dataclass(frozen=True)
class ScrapeView:
    """The GPUs of one scrape: all known ones, and those that answered the liveness probe."""

    gpus: Sequence[GpuDevice]
    alive: Sequence[GpuDevice]


class GpuCollector(Protocol):
    """One area's metrics (one module each), rebuilt from fresh readings on every scrape."""

    def collect(self, view: ScrapeView) -> Iterable[Metric]: ...


def gpu_labels(gpu: GpuDevice) -> dict[str, str]:
    return {"gpu": _decimal(gpu.index), "uuid": gpu.uuid}


# One string per GPU index for all its label sets (about 80 a GPU), not one each.
_decimal = lru_cache(maxsize=1024)(str)


class _LabelSets:
    """Each GPU sample's label set, built once and shared by every scrape's samples.

    A process-wide cache like the renderers' own (routes/metrics.py): the label sets are
    values, never mutated once built, so sharing them between scrapes and threads is safe.
    """

    def __init__(self, size: int) -> None:
        self._sets: dict[tuple[object, ...], dict[str, str]] = {}
        self._size = size

    def get(
        self, gpu: GpuDevice, names: tuple[str, ...], values: tuple[str, ...]
    ) -> dict[str, str]:
        key = (gpu.index, gpu.uuid, names, values)
        found = self._sets.get(key)
        if found is None:
            if len(self._sets) >= self._size:
                self._sets.clear()
            labels = gpu_labels(gpu)
            if values:
                labels.update(zip(names, values, strict=True))
            found = self._sets[key] = labels
        return found


_LABEL_SETS = _LabelSets(LABEL_SET_CACHE_SIZE)


# Each GPU series, by (sample name, GPU index, UUID, extra label values), kept between scrapes
# with its line prefix and last line (exposition.Series). The sample name fixes the label
# names, so they need not be in the key.
_SERIES: dict[tuple[object, ...], Series] = {}


def _new_series(
    name: str, gpu: GpuDevice, names: tuple[str, ...], values: tuple[str, ...]
) -> Series:
    if len(_SERIES) >= SERIES_CACHE_SIZE:
        _SERIES.clear()
    series = Series(name, _LABEL_SETS.get(gpu, names, values))
    _SERIES[(name, gpu.index, gpu.uuid, values)] = series
    return series


class GpuFamily:
    """A family labelled per GPU, as its row of the table of metric names says (type, HELP,
    labels: ``gpu``, ``uuid``, then the extra ones); ``None`` values are skipped, so they
    stay absent."""

    def __init__(self, metric: names.Metric) -> None:
        if metric.labels[: len(GPU_LABELS)] != GPU_LABELS:
            raise ValueError(f"{metric} is not labelled per GPU: {metric.labels}")
        self._sample_name = str(metric)
        self.family = WrittenFamily(metric.family, metric.help, metric.type, self._sample_name)
        self._extra_labels = metric.labels[len(GPU_LABELS) :]

    def add(self, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        # Each sample's line is written here from its series, kept between scrapes
        # (exposition.Series): no prometheus_client Sample per scrape.
        if value is not None:
            name = self._sample_name
            series = _SERIES.get((name, gpu.index, gpu.uuid, extra)) or _new_series(
                name, gpu, self._extra_labels, extra
            )
            self.family.add(series, value)


class StaticGpuFamily(GpuFamily):
    """A GpuFamily for a family that StaticFamilies builds once and whose text the renderers
    keep: its series are not kept between scrapes (992 topology series at 32 GPUs)."""

    def add(self, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        if value is not None:
            labels = _LABEL_SETS.get(gpu, self._extra_labels, extra)
            self.family.add(Series(self._sample_name, labels), value)


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
    the last one the same families are yielded again, marked static so that the renderers
    reuse their text as well (exposition.mark_static). One instance per collector.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: object = None
        self._families: list[Metric] | None = None

    def get(self, key: object, build: Callable[[], Iterable[Metric]]) -> list[Metric]:
        with self._lock:
            if self._families is not None and key == self._key:
                return self._families
        families = [mark_static(family) for family in build()]
        with self._lock:
            self._key, self._families = key, families
        return families
