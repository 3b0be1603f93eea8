"""What every collector shares: the scrape's view of the GPUs and builders for labelled families."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

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


def gpu_labels(gpu: GpuDevice) -> list[str]:
    return [str(gpu.index), gpu.uuid]


class GpuGauge:
    """A gauge family labelled per GPU; ``None`` values are skipped, so they stay absent."""

    def __init__(self, name: str, documentation: str, extra_labels: Sequence[str] = ()) -> None:
        self.family: Metric = GaugeMetricFamily(
            name, documentation, labels=[*GPU_LABELS, *extra_labels]
        )

    def add(self, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        if value is not None:
            self.family.add_metric([*gpu_labels(gpu), *extra], value)  # type: ignore[attr-defined]


class GpuCounter(GpuGauge):
    """A counter family labelled per GPU; ``name`` is given without ``_total``."""

    def __init__(self, name: str, documentation: str, extra_labels: Sequence[str] = ()) -> None:
        self.family = CounterMetricFamily(name, documentation, labels=[*GPU_LABELS, *extra_labels])


def non_empty(*families: GpuGauge) -> Iterator[Metric]:
    """Yield the families that got at least one sample; an unsupported metric is not exposed."""
    for family in families:
        if family.family.samples:
            yield family.family
