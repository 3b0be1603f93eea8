"""The generated dashboards as data: their panels and queries, and a small PromQL reader."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorwatch.contract.metrics import METRICS

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
JSON_DIR = DASHBOARDS / "json"
PROVISIONING = DASHBOARDS / "provisioning"
RULES = REPO / "alerts" / "mirrorwatch.rules.yml"
RUNBOOK = REPO / "docs" / "runbook.md"
ANNOTATION = "annotation"


def load_dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON data, as committed."""
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(JSON_DIR.glob("*.json"))
    }


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row, including those inside collapsed rows."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


@dataclass(frozen=True)
class Target:
    dashboard: str  # dashboard title
    panel: str  # panel title, or ANNOTATION for the dashboard's alert annotation
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}: {self.expr}"


def targets(dashboard: dict[str, Any]) -> Iterator[Target]:
    """Every PromQL expression of a dashboard: panel targets and annotation queries."""
    title = dashboard["title"]
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield Target(title, panel["title"], target["refId"], target["expr"])
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield Target(title, ANNOTATION, annotation["name"], annotation["expr"])


def all_targets() -> list[Target]:
    return [t for dashboard in load_dashboards().values() for t in targets(dashboard)]


def query_variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in dashboard["templating"]["list"] if v["type"] == "query"]


LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def label_values(query: str) -> tuple[str, str]:
    """The series selector and label name of a `label_values(selector, label)` query."""
    match = LABEL_VALUES.match(query)
    assert match, f"not a label_values(selector, label) query: {query}"
    return match["selector"], match["label"]


def expand(expr: str, values: dict[str, str]) -> str:
    """Substitute Grafana variables ($name and ${name}) as Grafana would for one selection."""

    def value(match: re.Match[str]) -> str:
        name = match["braced"] or match["plain"]
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr}")
        return values[name]

    return re.sub(r"\$\{(?P<braced>\w+)\}|\$(?P<plain>\w+)", value, expr)


# --- a PromQL reader: enough to find every series selector of the dashboards' queries ---

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<variable>\$\{\w+\}|\$\w+)
    |(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
    |(?P<ident>[A-Za-z_:][\w:]*)
    |(?P<punct>[(){}\[\],])
    |(?P<op>[^\s\w(){}\[\],"'`$]+)
    |(?P<space>\s+)
    """,
    re.VERBOSE,
)
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_OPERATORS = {"and", "or", "unless", "bool", "atan2"}
_AGGREGATIONS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
}


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, quoted value)
    ranged: bool  # followed by a [range]
    in_counter_function: bool  # the range feeds rate(), irate() or increase()


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None or match.lastgroup is None:
            raise ValueError(f"cannot read PromQL at {expr[position:]!r}")
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group()))
        position = match.end()
    return tokens


def _skip_group(tokens: list[tuple[str, str]], i: int, open_: str, close: str) -> int:
    """Index after the group that opens at ``tokens[i]``."""
    assert tokens[i][1] == open_
    depth = 0
    while i < len(tokens):
        if tokens[i][1] == open_:
            depth += 1
        elif tokens[i][1] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced {open_}{close}")


def selectors(expr: str) -> list[Selector]:
    """Every series selector in ``expr`` (raw or with variables expanded)."""
    tokens = _tokens(expr)
    found: list[Selector] = []
    calls: list[str] = []  # function name of each open parenthesis ("" for grouping)
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and text in _LABEL_LISTS:
            i = _skip_group(tokens, i + 1, "(", ")") if following == "(" else i + 1
            continue
        if kind == "ident" and text == "offset":
            i += 2
            continue
        if kind == "ident" and (text in _OPERATORS or text in _AGGREGATIONS):
            i += 1
            continue
        if kind == "ident" and following == "(":
            calls.append(text)
            i += 2
            continue
        if text == "(":
            calls.append("")
        elif text == ")":
            calls.pop()
        elif text == "[":
            i = _skip_group(tokens, i, "[", "]")
            continue
        if kind == "ident" or text == "{":
            metric = text if kind == "ident" else ""
            j = i + 1 if kind == "ident" else i
            matchers: list[tuple[str, str, str]] = []
            if j < len(tokens) and tokens[j][1] == "{":
                end = _skip_group(tokens, j, "{", "}")
                inner = [t for t in tokens[j + 1 : end - 1] if t[1] != ","]
                for k in range(0, len(inner), 3):
                    label, operator, value = (t[1] for t in inner[k : k + 3])
                    matchers.append((label, operator, value))
                j = end
            ranged = j < len(tokens) and tokens[j][1] == "["
            in_counter = ranged and bool(calls) and calls[-1] in {"rate", "irate", "increase"}
            found.append(Selector(metric, tuple(matchers), ranged, in_counter))
            i = j
            continue
        i += 1
    return found


# --- names the queries may use ----------------------------------------------------------


def documented_metrics() -> set[str]:
    """Metric names from the table of metric names (contract/metrics.py, which docs/metrics.md
    is written from), histograms with their series."""
    names: set[str] = set()
    for metric in METRICS:
        names.add(str(metric))
        if metric.type == "histogram":
            names.update(metric.part(suffix) for suffix in ("bucket", "sum", "count"))
    return names


def recording_rules() -> set[str]:
    return set(re.findall(r"^\s*- record: (\S+)$", RULES.read_text(encoding="utf-8"), re.M))


# Series Prometheus itself writes: firing alerts, and the scrape health of every target.
PROMETHEUS_SERIES = {"ALERTS", "up"}
