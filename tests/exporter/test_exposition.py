"""The fast text renderer is byte-identical to prometheus_client's generate_latest."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.exposition import TextRenderer
from mirrorwatch.exporter.simulate.backend import SimulatedBackend
from mirrorwatch.exporter.simulate.scenario import load_scenario


class Fixed:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def reference(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families))
    return generate_latest(registry)


def test_simulated_host_renders_identically() -> None:
    backend = SimulatedBackend(load_scenario("nvlink-errors", gpus=4), clock=lambda: 90.0)
    families = list(GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300)).collect())
    renderer = TextRenderer()
    assert renderer.render(families) == reference(families)
    assert renderer.render(families) == reference(families)  # from the label cache


def test_awkward_values_types_and_help_render_identically() -> None:
    gauge = GaugeMetricFamily("g", 'help with \\ and\nnewline "quoted"', labels=["a", "b"])
    gauge.add_metric(['back\\slash "quote"\nnewline', "ü"], float("nan"))
    gauge.add_metric(["inf", ""], float("inf"), timestamp=1700000000.5)
    for number, value in enumerate((1234567.0, -123456.7, 1e16, 0.1, -0.0, 5e-324, float("-inf"))):
        gauge.add_metric(["big", str(number)], value)
    counter = CounterMetricFamily("c", "a counter", labels=["x"], created=None)
    counter.add_metric(["1"], 1e21, created=1700000000.0)
    histogram = HistogramMetricFamily("h", "a histogram", labels=["run"])
    histogram.add_metric(["r"], [("0.001", 1), ("0.5", 3), ("+Inf", 4)], sum_value=1.25)
    info = InfoMetricFamily("i", "an info", value={"version": "1.0"})
    families: list[Metric] = [gauge, counter, histogram, info, GaugeMetricFamily("empty", "e")]
    assert TextRenderer().render(families) == reference(families)


def test_the_label_cache_stays_bounded() -> None:
    renderer = TextRenderer(cache_size=10)
    gauge = GaugeMetricFamily("g", "h", labels=["n"])
    for number in range(25):
        gauge.add_metric([str(number)], number)
    assert renderer.render([gauge]) == reference([gauge])
    assert len(renderer._labels) <= 10
