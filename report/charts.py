"""The report's charts: which series each shows, asked over the range as the findings were."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorwatch.alerts import firing, gpu_queries, throttling, training_queries
from mirrorwatch.alerts.fragments import num
from mirrorwatch.alerts.promql import RULES
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import (
    HARDWARE_SLOWDOWN_REASONS,
    POWER_CAP_REASONS,
    THERMAL_REASONS,
)
from mirrorwatch.contract.labels import GPU_KEY, TARGET_KEY
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_CLOCK_MAX_HERTZ,
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
)
from mirrorwatch.report import queries as q
from mirrorwatch.report.prometheus import Prometheus, Series
from mirrorwatch.report.scope import Scope, target_key
from mirrorwatch.report.svg import (
    SEVERITY_COLORS,
    Band,
    Line,
    Plot,
    Row,
    format_value,
    legend,
    line_chart,
    spans,
    timeline,
)


@dataclass
class Chart:
    name: str
    title: str
    description: str
    queries: list[str] = field(default_factory=list)
    svg: str = ""
    key: str = ""
    lines: list[Line] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)


def _gpu(series: Series) -> str:
    return f"GPU {series.label('gpu')}"


# Charts of series only some hosts have (the foreign processes need the workers' pids): left
# out of a page that has no data for them, rather than drawn empty.
SHOWN_ONLY_WITH_DATA = frozenset({"foreign"})


class Charts:
    """Draws each chart of a scope from range queries (one point per scope step)."""

    def __init__(self, prometheus: Prometheus, scope: Scope, t: Thresholds) -> None:
        self.prometheus = prometheus
        self.scope = scope
        self.t = t
        # Rates over at least a minute, and at least four sampling steps.
        self.rate_window = f"{max(60, 4 * scope.step)}s"

    def _range(self, chart: Chart, query: str) -> list[Series]:
        chart.queries.append(query)
        s = self.scope
        return sorted(
            self.prometheus.range(query, s.start, s.end, s.step),
            key=lambda x: (*target_key(x.labels), x.label("gpu"), x.label("reason")),
        )

    def _lines(
        self,
        name: str,
        title: str,
        description: str,
        unit: str,
        series: list[tuple[str, Callable[[Series], str], bool]],
        bands: Callable[[Chart], list[Band]] | None = None,
    ) -> Chart:
        chart = Chart(name, title, description)
        for query, label, reference in series:
            chart.lines += [Line(label(s), s.points, reference) for s in self._range(chart, query)]
        if bands is not None:
            chart.bands = bands(chart)
        return self._draw(chart, unit)

    def _draw(self, chart: Chart, unit: str) -> Chart:
        plot = Plot(self.scope.start, self.scope.end, unit, chart.lines, chart.bands)
        chart.svg, chart.key = line_chart(chart.name, plot), legend(plot.lines, plot.bands)
        return chart

    def all(self) -> dict[str, Chart]:
        makers = (
            self.utilization,
            self.spread,
            self.throttle,
            self.temperature,
            self.clocks,
            self.pcie,
            self.foreign,
            self.throughput,
            self.step_time,
            self.alerts,
        )
        drawn = (make() for make in makers)
        return {c.name: c for c in drawn if c.lines or c.name not in SHOWN_ONLY_WITH_DATA}

    def utilization(self) -> Chart:
        sel, limit = self.scope.gpus_select, self.t.GpuUtilizationImbalance.spread_ratio
        mean = f"avg by ({TARGET_KEY}) ({gpu_queries.gpu_utilization_mean(sel, '1m')})"

        def band(chart: Chart) -> list[Band]:
            return [
                Band(
                    f"run mean ±{format_value(limit, 'points')}",
                    [(t, v - limit) for t, v in s.points],
                    [(t, v + limit) for t, v in s.points],
                )
                for s in self._range(chart, mean)
            ]

        return self._lines(
            "utilization",
            "Utilisation of each GPU against the run mean",
            "1-minute mean utilisation; the band is the mean "
            f"±{format_value(limit, 'points')} (percentage points).",
            "ratio",
            [(gpu_queries.gpu_utilization_mean(sel, "1m"), _gpu, False)],
            band,
        )

    def spread(self) -> Chart:
        sel, limit = self.scope.gpus_select, self.t.GpuUtilizationImbalance.spread_ratio
        threshold = f"{q.gpu_utilization_spread(sel, '1m')} * 0 + {num(limit)}"
        return self._lines(
            "spread",
            "Utilisation spread against the threshold",
            "Busiest minus least busy GPU (1-minute means), in percentage points (pp); dashed: "
            f"GpuUtilizationImbalance's {format_value(limit, 'points')}.",
            "points",
            [
                (q.gpu_utilization_spread(sel, "1m"), lambda s: "spread", False),
                (threshold, lambda s: "threshold", True),
            ],
        )

    def temperature(self) -> Chart:
        sel = self.scope.gpus_select
        slowdown = sel(GPU_TEMPERATURE_THRESHOLD_CELSIUS, 'threshold="slowdown"')
        return self._lines(
            "temperature",
            "Temperature against the slowdown threshold",
            "Each GPU's temperature; dashed: the slowdown temperature NVML reports for it.",
            "celsius",
            [
                (sel(GPU_TEMPERATURE_CELSIUS), _gpu, False),
                (slowdown, lambda s: f"GPU {s.label('gpu')} slowdown", True),
            ],
        )

    def clocks(self) -> Chart:
        sel = self.scope.gpus_select
        return self._lines(
            "clocks",
            "SM clocks",
            "Each GPU's SM clock; dashed: its maximum.",
            "hertz",
            [
                (sel(GPU_CLOCK_HERTZ, 'clock="sm"'), _gpu, False),
                (
                    sel(GPU_CLOCK_MAX_HERTZ, 'clock="sm"'),
                    lambda s: f"GPU {s.label('gpu')} max",
                    True,
                ),
            ],
        )

    def pcie(self) -> Chart:
        sel = self.scope.gpus_select
        return self._lines(
            "pcie",
            "PCIe link width against its maximum",
            "Lanes each GPU's link trained at; dashed: the most it supports.",
            "lanes",
            [
                (sel(GPU_PCIE_LINK_WIDTH), _gpu, False),
                (
                    sel(GPU_PCIE_LINK_WIDTH_MAX),
                    lambda s: f"GPU {s.label('gpu')} max",
                    True,
                ),
            ],
        )

    def foreign(self) -> Chart:
        sel = self.scope.gpus_select
        if self.scope.run:
            sel = sel.where(f'run="{self.scope.run}"')
        return self._lines(
            "foreign",
            "Memory of processes that are not the run's",
            "Device memory held on each GPU of the run by processes other than its workers "
            f"({GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES}).",
            "bytes",
            [
                (
                    f"max by ({GPU_KEY}) ({sel(GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES)})",
                    _gpu,
                    False,
                )
            ],
        )

    def throughput(self) -> Chart:
        run, s = self.scope.run_select, self.scope
        chart = self._lines(
            "throughput",
            "Examples per second",
            "As the trainer reports it; dashed: the mean over the range, its examples over the "
            "time between its first and last push.",
            "per_second",
            [(training_queries.examples_per_second(run), lambda s: "reported", False)],
        )
        # A rate over a sliding window understates the run's first minute: the range's own
        # mean (the headline's figure, docs/report.md) is the fairer reference.
        mean_query = training_queries.examples_per_second_between_pushes(run, s.window)
        chart.queries.append(mean_query)
        answer = self.prometheus.instant(mean_query, s.end)
        if answer and chart.lines:
            mean = answer[0].value
            chart.lines.append(Line("mean over the range", [(s.start, mean), (s.end, mean)], True))
            self._draw(chart, "per_second")
        return chart

    def step_time(self) -> Chart:
        run = self.scope.run_select
        return self._lines(
            "step_time",
            "Step time",
            f"Median and 90th percentile over {self.rate_window}, from the step histogram.",
            "seconds",
            [
                (
                    training_queries.step_time_quantile(run, 0.5, self.rate_window),
                    lambda s: "median",
                    False,
                ),
                (
                    training_queries.step_time_quantile(run, 0.9, self.rate_window),
                    lambda s: "p90",
                    False,
                ),
            ],
        )

    def _timeline(self, chart: Chart, rows: list[Row], empty: str) -> Chart:
        s = self.scope
        chart.svg = timeline(chart.name, rows, s.start, s.end, empty)
        return chart

    def throttle(self) -> Chart:
        chart = Chart(
            "throttle",
            "Throttle reasons over time",
            "Bars where a clock-event reason that costs speed was active, per GPU and cause.",
        )
        sel = self.scope.gpus_select
        causes = (
            ("thermal", THERMAL_REASONS),
            ("power cap", POWER_CAP_REASONS),
            ("hardware", HARDWARE_SLOWDOWN_REASONS),
        )
        rows = []
        for cause, clock_reasons in causes:
            events = sel(GPU_CLOCKS_EVENT_ACTIVE, throttling.reasons(clock_reasons))
            query = f"max by ({GPU_KEY}) ({events})"
            for series in self._range(chart, query):
                rows.append(Row(f"{_gpu(series)} {cause}", spans(series.points, self.scope.step)))
        rows.sort(key=lambda r: r.label)
        return self._timeline(chart, rows, "no throttling in this range")

    def alerts(self) -> Chart:
        chart = Chart(
            "alerts",
            "Alerts that fired",
            "Firing alerts on the run or its GPUs; Watchdog shows the alerting pipeline was up.",
        )
        s = self.scope
        own = firing.run_alerts(s.host, f'run="{s.run}"') if s.run else firing.firing_alerts(s.host)
        watchdog = firing.firing_alerts(RULES, 'alertname="Watchdog"')
        query = f"{own} or {watchdog}"
        rows = []
        for series in self._range(chart, query):
            gpu = series.label("gpu")
            label = series.label("alertname") + (f" (GPU {gpu})" if gpu else "")
            colour = SEVERITY_COLORS.get(series.label("severity"), SEVERITY_COLORS["info"])
            rows.append(Row(label, spans(series.points, s.step), colour))
        rows.sort(key=lambda r: (r.label == "Watchdog", r.label))
        return self._timeline(chart, rows, "no alert fired in this range")
