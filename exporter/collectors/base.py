"""What every collector shares: the scrape's view of the GPUs and builders for labelled families."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from mirrorwatch.exporter.backend import GpuDevice

GPU_LABELS = ("gpu", "uuid")


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
        # Samples are appended directly: add_metric's generic path costs a third of a scrape.
        if value is not None:
            labels = gpu_labels(gpu)
            if extra:
                labels.update(zip(self._extra_labels, extra, strict=True))
            self.family.samples.append(Sample(self._sample_name, labels, value))


class GpuCounter(GpuGauge):
    """A counter family labelled per GPU; ``name`` is given without ``_total``."""

    _suffix = "_total"

    @staticmethod
    def _family(name: str, documentation: str, labels: list[str]) -> Metric:
        return CounterMetricFamily(name, documentation, labels=labels)


def non_empty(*families: GpuGauge) -> Iterator[Metric]:
    """Yield the families that got at least one sample; an unsupported metric is not exposed."""
    for family in families:
        if family.family.samples:
            yield family.family
