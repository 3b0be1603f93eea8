"""Two runs (or ranges) side by side: what went away, came or changed, and how fast each went."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mirrorwatch.report.analysis import Analysis
from mirrorwatch.report.charts import Chart, Charts
from mirrorwatch.report.evidence import Finding
from mirrorwatch.report.scope import Scope, ScopeError
from mirrorwatch.report.svg import Line, Plot, legend, line_chart

# A finding present in both runs "changed" when its share of the range or its cost moved by
# more than this (absolute): less is the sampling's own wobble on a run of a few minutes.
CHANGED = 0.05
# The headline figures set beside each other, with their change from the first run.
FIGURES = (
    "examples_per_second",
    "speedup",
    "scaling_efficiency",
    "step_time_p50_seconds",
    "mean_utilization",
)
# The charts drawn for both runs on one axis of seconds from each run's start.
CHARTS = ("throughput", "step_time", "utilization")


def _key(finding: Finding) -> tuple[str, str | None]:
    # By GPU index, not instance: the second run may be on another host (after a move).
    return finding.kind, finding.gpu


def _brief(finding: Finding) -> dict[str, Any]:
    return {
        "kind": finding.kind,
        "gpu": finding.gpu,
        "instance": finding.instance,
        "share": round(finding.share, 4),
        "cost": None if finding.cost is None else finding.cost.as_json(),
        "summary": finding.summary,
    }


def _fraction(finding: Finding) -> float | None:
    return None if finding.cost is None else finding.cost.fraction


@dataclass(frozen=True)
class Comparison:
    """The first run's analysis, the second's, and what changed between them."""

    first: Analysis
    second: Analysis

    def _findings(self, analysis: Analysis) -> dict[tuple[str, str | None], Finding]:
        found: dict[tuple[str, str | None], Finding] = {}
        for finding in analysis.findings:
            if finding.kind != "none":
                found.setdefault(_key(finding), finding)
        return found

    @property
    def gone(self) -> list[Finding]:
        """Findings of the first run that the second does not have."""
        after = self._findings(self.second)
        return [f for k, f in self._findings(self.first).items() if k not in after]

    @property
    def came(self) -> list[Finding]:
        before = self._findings(self.first)
        return [f for k, f in self._findings(self.second).items() if k not in before]

    @property
    def both(self) -> list[tuple[Finding, Finding, bool]]:
        """Findings in both runs, first and second, and whether they changed."""
        after = self._findings(self.second)
        pairs = []
        for key, before in self._findings(self.first).items():
            if key in after:
                a, b = _fraction(before), _fraction(after[key])
                moved = abs(before.share - after[key].share) > CHANGED or (
                    (a is None) != (b is None)
                    or (a is not None and b is not None and abs(a - b) > CHANGED)
                )
                pairs.append((before, after[key], moved))
        return pairs

    def changes(self) -> dict[str, dict[str, float | None]]:
        """Each headline figure in both runs, and the second's relative change from the first."""
        result = {}
        for name in FIGURES:
            a, b = self.first.headline.get(name), self.second.headline.get(name)
            change = None if a is None or b is None or a == 0 else b / a - 1
            result[name] = {"first": a, "second": b, "change": change}
        return result

    def as_json(self) -> dict[str, Any]:
        return {
            **self.first.as_json(),
            "compare": {
                **self.second.as_json(),
                "changes": self.changes(),
                "gone": [_brief(f) for f in self.gone],
                "came": [_brief(f) for f in self.came],
                "both": [
                    {"first": _brief(a), "second": _brief(b), "changed": moved}
                    for a, b, moved in self.both
                ],
            },
        }


def check_comparable(first: Scope, second: Scope) -> None:
    """ScopeError when two scopes cannot be set side by side GPU by GPU."""
    if len(first.gpus) != len(second.gpus):
        raise ScopeError(
            f"--compare: the first range has {len(first.gpus)} GPUs and the second "
            f"{len(second.gpus)}: their findings cannot be matched GPU by GPU"
        )


def _shifted(points: Sequence[tuple[float, float]], start: float) -> list[tuple[float, float]]:
    return [(t - start, v) for t, v in points]


def side_by_side(
    first: tuple[Scope, Charts], second: tuple[Scope, Charts], names: tuple[str, str]
) -> dict[str, Chart]:
    """CHARTS of both runs on one axis: seconds from each run's own start."""
    drawn: dict[str, Chart] = {}
    (a_scope, a_charts), (b_scope, b_charts) = first, second
    length = max(a_scope.end - a_scope.start, b_scope.end - b_scope.start)
    for name in CHARTS:
        a, b = getattr(a_charts, name)(), getattr(b_charts, name)()
        chart = Chart(
            f"compare-{name}",
            f"{a.title}: both runs",
            f"{a.description} Time from each run's start (the axis reads hours:minutes:seconds).",
            [*a.queries, *b.queries],
        )
        for label, scope, source in ((names[0], a_scope, a), (names[1], b_scope, b)):
            chart.lines += [
                Line(f"{label}: {line.label}", _shifted(line.points, scope.start), line.reference)
                for line in source.lines
            ]
        plot = Plot(0.0, length, _UNITS[name], chart.lines)
        chart.svg, chart.key = line_chart(chart.name, plot), legend(plot.lines)
        drawn[name] = chart
    return drawn


_UNITS = {"throughput": "per_second", "step_time": "seconds", "utilization": "ratio"}
