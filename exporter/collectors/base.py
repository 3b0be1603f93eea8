"""What every collector shares: the scrape's view of the GPUs and builders for labelled families."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from mirrorwatch.exporter.backend import GpuDevice
from mirrorwatch.exporter.exposition import LabelSet, label_set, mark_static

GPU_LABELS = ("gpu", "uuid")
# Distinct label sets kept between scrapes; past this (pid churn in the processes collector)
# the cache starts afresh, so it stays bounded.
LABEL_SET_CACHE_SIZE = 50_000


@dataclass(frozen=True)
class ScrapeView:
    """The GPUs of one scrape: all known ones, and those that answered the liveness probe."""

    gpus: Sequence[GpuDevice]
    alive: Sequence[GpuDevice]


class GpuCollector(Protocol):
    """One area's metrics (one module each), rebuilt from fresh readings on every scrape."""

    def collect(self, view: ScrapeView) -> Iterable[Metric]: ...


def gpu_labels(gpu: GpuDevice) -> dict[str, str]:
    return {"gpu": str(gpu.index), "uuid": gpu.uuid}


class _LabelSets:
    """Each GPU sample's label set, built and rendered once and shared by every scrape.

    A process-wide cache like the renderers' own (routes/metrics.py): the label sets are
    values, never mutated once built, so sharing them between scrapes and threads is safe.
    """

    def __init__(self, size: int) -> None:
        self._sets: dict[tuple[object, ...], LabelSet] = {}
        self._size = size

    def get(self, gpu: GpuDevice, names: tuple[str, ...], values: tuple[str, ...]) -> LabelSet:
        key = (gpu.index, gpu.uuid, names, values)
        found = self._sets.get(key)
        if found is None:
            if len(self._sets) >= self._size:
                self._sets.clear()
            labels = gpu_labels(gpu)
            if values:
                labels.update(zip(names, values, strict=True))
            found = self._sets[key] = label_set(labels)
        return found


_LABEL_SETS = _LabelSets(LABEL_SET_CACHE_SIZE)


class GpuGauge:
    """A gauge family labelled per GPU; ``None`` values are skipped, so they stay absent."""

    _suffix = ""

    def __init__(self, name: str, documentation: str, extra_labels: Sequence[str] = ()) -> None:
        self.family: Metric = self._family(name, documentation, [*GPU_LABELS, *extra_labels])
        self._sample_name = name + self._suffix
        self._extra_labels = tuple(extra_labels)

    @staticmethod
    def _family(name: str, documentation: str, labels: list[str]) -> Metric:
        return GaugeMetricFamily(name, documentation, labels=labels)

    def add(self, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        # Samples are appended directly: add_metric's generic path costs a third of a scrape;
        # label sets come rendered from the cache.
        if value is not None:
            labels = _LABEL_SETS.get(gpu, self._extra_labels, extra)
            self.family.samples.append(Sample(self._sample_name, labels, value))


class GpuCounter(GpuGauge):
    """A counter family labelled per GPU; ``name`` is given without ``_total``."""

    _suffix = "_total"

    @staticmethod
    def _family(name: str, documentation: str, labels: list[str]) -> Metric:
        return CounterMetricFamily(name, documentation, labels=labels)


def non_empty(*families: GpuGauge | Metric) -> Iterator[Metric]:
    """Yield the families that got at least one sample; an unsupported metric is not exposed."""
    for family in families:
        metric = family.family if isinstance(family, GpuGauge) else family
        if metric.samples:
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
