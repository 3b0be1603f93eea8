"""The fast renderers are byte-identical to prometheus_client's text and OpenMetrics encoders."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.exposition import (
    OpenMetricsRenderer,
    Series,
    TextRenderer,
    WrittenFamily,
    go_float,
)
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


def reference_openmetrics(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families))
    encoded: bytes = openmetrics.generate_latest(registry)  # type: ignore[no-untyped-call]
    return encoded


def awkward_families() -> list[Metric]:
    gauge = GaugeMetricFamily("g", 'help with \\ and\nnewline "quoted"', labels=["a", "b"])
    gauge.add_metric(['back\\slash "quote"\nnewline', "ü"], float("nan"))
    gauge.add_metric(["inf", ""], float("inf"), timestamp=1700000000.5)
    for number, value in enumerate((1234567.0, -123456.7, 1e16, 0.1, -0.0, 5e-324, float("-inf"))):
        gauge.add_metric(["big", str(number)], value)
    counter = CounterMetricFamily("c", "a counter", labels=["x"], created=None)
    counter.add_metric(["1"], 1e21, created=1700000000.0)
    counter.add_metric(["2"], 3.0)
    histogram = HistogramMetricFamily("h", "a histogram", labels=["run"])
    histogram.add_metric(["r"], [("0.001", 1), ("0.5", 3), ("+Inf", 4)], sum_value=1.25)
    info = InfoMetricFamily("i", "an info", value={"version": "1.0"})
    energy = GaugeMetricFamily("e_joules", "with a unit", value=2.5, unit="joules")
    return [gauge, counter, histogram, info, energy, GaugeMetricFamily("empty", "e")]


def test_simulated_host_renders_identically() -> None:
    backend = SimulatedBackend(load_scenario("nvlink-errors", gpus=4), clock=lambda: 90.0)
    families = list(GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300)).collect())
    renderer = TextRenderer()
    assert renderer.render(families) == reference(families)


def test_awkward_values_types_and_help_render_identically() -> None:
    families = awkward_families()
    assert TextRenderer().render(families) == reference(families)


def test_simulated_host_renders_identically_in_openmetrics() -> None:
    backend = SimulatedBackend(load_scenario("nvlink-errors", gpus=4), clock=lambda: 90.0)
    families = list(GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300)).collect())
    renderer = OpenMetricsRenderer()
    assert renderer.render(families) == reference_openmetrics(families)


def test_awkward_values_types_units_and_help_render_identically_in_openmetrics() -> None:
    # Counters keep _total and _created in place, HELP escapes quotes, timestamps in seconds.
    families = awkward_families()
    rendered = OpenMetricsRenderer().render(families)
    assert rendered == reference_openmetrics(families)
    assert rendered.endswith(b"# EOF\n")
    assert b'c_created{x="1"} 1.7e+09\n' in rendered


def test_an_empty_scrape_is_just_eof_in_openmetrics() -> None:
    assert OpenMetricsRenderer().render([]) == reference_openmetrics([]) == b"# EOF\n"


def test_exemplars_go_through_prometheus_client_in_openmetrics() -> None:
    counter = CounterMetricFamily("steps", "steps", labels=["run"])
    counter.add_metric(["r"], 4.0)
    counter.samples[0] = counter.samples[0]._replace(exemplar=Exemplar({"trace": "a"}, 1.0, 2.0))
    families: list[Metric] = [counter, GaugeMetricFamily("g", "h", value=1.0)]
    assert OpenMetricsRenderer().render(families) == reference_openmetrics(families)


def test_a_series_writes_its_labels_sorted_and_escaped_as_both_formats_do() -> None:
    labels = {"uuid": 'GPU-"1"', "gpu": "0", "path": "a\\b\nc"}
    written = WrittenFamily("g", "h", "gauge")
    written.add(Series("g", tuple(labels), tuple(labels.values())), 1.0)
    assert written.lines == ['g{gpu="0",path="a\\\\b\\nc",uuid="GPU-\\"1\\""} 1.0\n']
    gauge = GaugeMetricFamily("g", "h", labels=["gpu", "uuid", "path"])
    gauge.samples.append(Sample("g", labels, 1.0))
    assert TextRenderer().render([written]) == reference([gauge])
    assert OpenMetricsRenderer().render([written]) == reference_openmetrics([gauge])


def test_openmetrics_scrape_parses_to_the_samples_of_the_text_scrape() -> None:
    backend = SimulatedBackend(load_scenario("nvlink-errors", gpus=4), clock=lambda: 90.0)
    families = list(GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300)).collect())
    text = TextRenderer().render(families).decode()
    om = OpenMetricsRenderer().render(families).decode()

    def samples(parsed: Iterable[Metric]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {
            (s.name, tuple(sorted(s.labels.items())), s.value) for f in parsed for s in f.samples
        }

    parsed_text = samples(text_string_to_metric_families(text))
    assert len(parsed_text) > 100
    assert samples(openmetrics_families(om)) == parsed_text  # type: ignore[no-untyped-call]


def test_lines_written_before_render_as_prometheus_client_renders_their_samples() -> None:
    # Lines written once and added whole (a training worker's, per push), labels given
    # unsorted, against the same samples added to prometheus_client's own families.
    values = (81_234_567_890.0, 0.1, 2.0**31, 1e-7, -3.5, 0.0)
    gauge = GaugeMetricFamily("g", "h", labels=["run", "worker", "le"])
    points = []
    for worker, value in enumerate(values):
        labels = {"run": 'r"\\\n', "worker": str(worker), "le": "+Inf"}
        gauge.add_metric(list(labels.values()), value)
        points.append(
            (Series("g", ("worker", "run", "le"), (str(worker), 'r"\\\n', "+Inf")), value)
        )
    counter = CounterMetricFamily("c", "a counter", labels=["run"])
    counter.add_metric(["r"], 12345.0)
    written_gauge = WrittenFamily("g", "h", "gauge")
    written_gauge.extend(
        [series.line(value) for series, value in points],
        [series for series, _ in points],
        [value for _, value in points],
    )
    written_counter = WrittenFamily("c", "a counter", "counter")
    counter_points = [(Series("c_total", ("run",), ("r",)), 12345.0)]
    written_counter.extend([counter_points[0][0].line(12345)], [counter_points[0][0]], [12345.0])
    written: list[Metric] = [written_gauge, written_counter]
    assert TextRenderer().render(written) == reference([gauge, counter])
    assert OpenMetricsRenderer().render(written) == reference_openmetrics([gauge, counter])
    assert written_gauge.samples == gauge.samples


def test_values_are_written_as_prometheus_client_writes_them() -> None:
    special = [0, 1, -1, 1e6, 9_999_999.0, 1e7, 12_345_678.9, -12_345_678.9, 1e16, 1e21, 1e22]
    special += [5e-324, -0.0, 2**53, 81_234_567_890.0, float("inf"), float("-inf"), float("nan")]
    draw = random.Random(24)
    drawn = [10 ** draw.uniform(-30, 30) for _ in range(3000)]
    drawn += [draw.uniform(-1e12, 1e12) for _ in range(3000)]
    drawn += [float(draw.randrange(2**53)) for _ in range(3000)]
    for value in special + drawn:
        assert go_float(value) == floatToGoString(value), value  # type: ignore[no-untyped-call]


def test_a_simulated_host_renders_identically_scrape_after_scrape() -> None:
    # Series keep their last line between scrapes: across readings that change, repeat, vanish
    # (GPU 1 is lost at 20 s) and go back in time, each scrape must still be what
    # prometheus_client writes from that scrape's own samples, in both formats.
    now = [0.0]
    backend = SimulatedBackend(load_scenario("gpu-lost", gpus=4), clock=lambda: now[0])
    metrics = GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300))
    text, om = TextRenderer(), OpenMetricsRenderer()
    for now[0] in (5.0, 5.0, 5.25, 6.0, 19.5, 25.0, 25.0, 7.0, 300.0):
        families = list(metrics.collect())
        assert text.render(families) == reference(families), now[0]
        assert om.render(families) == reference_openmetrics(families), now[0]


def test_a_series_writes_each_value_as_prometheus_client_does_repeated_or_not() -> None:
    # Equal values that are written apart (0.0 and -0.0), equal values of other types (1, True,
    # 1.0), NaN (equal to nothing) and each value twice running, against add_metric's samples.
    values = [0.0, -0.0, -0.0, 0, 0.0, 1, True, 1.0, 1.0, float("nan"), float("nan")]
    values += [float("inf"), float("inf"), 12_345_678.9, 12_345_678.9, -0.0, 2.5]
    series = Series("g", ("gpu", "uuid"), ("0", 'GPU-"0"'))
    for value in values:
        written = WrittenFamily("g", "h", "gauge")
        written.add(series, value)
        expected = GaugeMetricFamily("g", "h", labels=["gpu", "uuid"])
        expected.add_metric(["0", 'GPU-"0"'], value)
        assert TextRenderer().render([written]) == reference([expected]), value
        assert OpenMetricsRenderer().render([written]) == reference_openmetrics([expected]), value


def test_a_written_counter_renders_as_prometheus_clients_counter() -> None:
    series = Series("c_total", ("gpu",), ("0",))
    written = WrittenFamily("c", "a counter", "counter")
    written.add(series, 81_234_567_890.0)
    expected = CounterMetricFamily("c", "a counter", labels=["gpu"], created=None)
    expected.add_metric(["0"], 81_234_567_890.0)
    assert TextRenderer().render([written]) == reference([expected])
    assert OpenMetricsRenderer().render([written]) == reference_openmetrics([expected])


def test_a_written_familys_samples_are_made_from_what_was_added() -> None:
    labels = {"gpu": "0"}
    written = WrittenFamily("g", "h", "gauge")
    written.add(Series("g", ("gpu",), ("0",)), 2.0)
    assert written.samples == [Sample("g", labels, 2.0)]
    with pytest.raises(TypeError):
        written.samples = [Sample("g", labels, 3.0)]
