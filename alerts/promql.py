"""PromQL shapes any query is built of, and `Select`, the label matchers each selector carries.

Each query of the catalogs (gpu_queries, training_queries, throttling, firing; the run report's
own) is a function of a `Select`: none in the rules (`RULES`), Grafana's variables on a
dashboard, one host and run in the report. So "memory in use" or "throttled time" is written
once and means the same wherever it is read. Windows are arguments too: a fixed `5m` in a rule,
`$__rate_interval` on a dashboard. Plain strings only: nothing here imports Grafana's SDK or
talks to a Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Select:
    """Builds series selectors that all carry the same label matchers."""

    matchers: tuple[str, ...] = ()

    def __call__(self, metric: str, *more: str) -> str:
        parts = (*self.matchers, *more)
        return f"{metric}{{{', '.join(parts)}}}" if parts else metric

    def where(self, *more: str) -> Select:
        return Select((*self.matchers, *more))


RULES = Select()


def rate(selector: str, window: str) -> str:
    return f"rate({selector}[{window}])"


def increase(selector: str, window: str) -> str:
    return f"increase({selector}[{window}])"


def spread(series: str, by: str) -> str:
    """Highest minus lowest of ``series`` per ``by`` group."""
    return f"max by ({by}) {_grouped(series)} - min by ({by}) {_grouped(series)}"


def labels_of_extreme(series: str, by: str, extreme: Literal["min", "max"]) -> str:
    """Added to a value with one series per ``by`` group, gives it the labels of the group's
    lowest (or highest) series of ``series``: the lagging GPU of an imbalance, the hottest of a
    temperature spread. The value itself is unchanged (0 times the series)."""
    return (
        f"+ on ({by}) group_right ()\n"
        "  (\n"
        "    0 * (\n"
        f"      {series}\n"
        f"      == on ({by}) group_left ()\n"
        f"      {extreme} by ({by}) {_grouped(series)}\n"
        "    )\n"
        "  )"
    )


def _grouped(expr: str) -> str:
    """``expr`` in parentheses, unless one pair already encloses all of it."""
    depth = 0
    for i, char in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and (i < len(expr) - 1 or char != ")"):
            return f"({expr})"
    return expr
