"""The table of metric names (contract/metrics.py) is what the exporter serves, and every series
the rules, dashboards and run report read is in it and in the golden exposition."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mirrorwatch.contract.metrics import BY_NAME, METRICS, Metric
from tests.contract import metrics_doc
from tests.contract.test_imports import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "exporter" / "golden"
# A series name as PromQL and the sources write it: not a recording rule's middle part
# (`instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m`).
SERIES_NAME = re.compile(r"(?<![:\w])mirrorwatch_[a-z0-9_]*[a-z0-9](?![\w:])")
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def served(golden: str) -> dict[str, tuple[str, str, frozenset[str] | None]]:
    """Each family of a golden exposition: its series name (a counter's with `_total`), and
    its type, HELP and the labels its samples carry (`le` aside; None where the golden keeps
    no sample of it: the collectors' wall-clock durations)."""
    families = {}
    for family in text_string_to_metric_families((GOLDEN / golden).read_text(encoding="utf-8")):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = frozenset(label for s in family.samples for label in s.labels if label != "le")
        families[name] = (family.type, family.documentation, labels if family.samples else None)
    return families


def as_served(metric: Metric, family: tuple[str, str, frozenset[str] | None]) -> bool:
    kind, help_text, labels = family
    same_labels = labels is None or labels == frozenset(metric.labels)
    return (kind, help_text) == (metric.type, metric.help) and same_labels


def test_the_golden_of_every_family_serves_exactly_the_table() -> None:
    families = served("every-family.prom")
    assert sorted(families) == sorted(map(str, METRICS))
    wrong = [str(m) for m in METRICS if not as_served(m, families[m])]
    assert not wrong, f"served otherwise than the table says: {wrong}"


def test_the_thermal_throttle_golden_serves_only_rows_of_the_table() -> None:
    for name, family in served("thermal-throttle-120s.prom").items():
        assert as_served(BY_NAME[name], family), name


def test_every_name_is_written_once_in_the_table() -> None:
    assert len(BY_NAME) == len(METRICS)


def test_names_follow_prometheus_naming() -> None:
    for metric in METRICS:
        assert metric.endswith("_total") == (metric.type == "counter"), metric
        assert metric.unit in metric or metric.unit in ("", "celsius"), metric


def series_read(text: str) -> set[str]:
    """The series names ``text`` reads, a histogram's parts as the histogram."""
    names = set()
    for name in SERIES_NAME.findall(text):
        for part in HISTOGRAM_PARTS:
            base = name.removesuffix(part)
            if base != name and base in BY_NAME and BY_NAME[base].type == "histogram":
                name = base
        names.add(name)
    return names


READERS = [
    ROOT / "alerts" / "mirrorwatch.rules.yml",
    *sorted((ROOT / "dashboards" / "json").glob("*.json")),
    *sorted((ROOT / "report").glob("*.py")),
    *sorted((ROOT / "alerts").rglob("*.py")),
    *sorted((ROOT / "dashboards").glob("*.py")),
    *sorted((ROOT / "doctor").glob("*.py")),
    *sorted((ROOT / "demo").glob("*.py")),
]


def test_the_readers_read_series() -> None:
    rules = series_read(READERS[0].read_text(encoding="utf-8"))
    assert {"mirrorwatch_gpu_utilization_ratio", "mirrorwatch_training_active"} <= rules


@pytest.mark.parametrize("path", READERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_series_a_reader_asks_for_is_in_the_golden_exposition(path: Path) -> None:
    golden = set(served("every-family.prom"))
    unknown = series_read(path.read_text(encoding="utf-8")) - golden
    assert not unknown, f"{path.name} reads series no exporter serves: {sorted(unknown)}"


def test_docs_metrics_md_is_written_from_the_table() -> None:
    current = metrics_doc.DOCUMENT.read_text(encoding="utf-8")
    assert metrics_doc.render(current) == current, (
        "docs/metrics.md is stale: python -m tests.contract.metrics_doc (make metrics)"
    )


# The rule text of alerts/rules/ and alerts/templates.py: PromQL as an operator reads it, with
# «fragments» for keys and thresholds; its names are checked against the golden scrape above.
RULE_TEXT = {ROOT / "alerts" / "templates.py", *(ROOT / "alerts" / "rules").glob("*.py")}
SOURCES = [
    path
    for folder in PACKAGES.values()
    for path in sorted((ROOT / folder).rglob("*.py"))
    if path != ROOT / "contract" / "metrics.py" and path not in RULE_TEXT
]


def code_strings(path: Path) -> Iterator[str]:
    """Every string the module's code holds: not its docstrings or comments."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documentation = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and id(node) not in documentation:
            yield text


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_writes_a_series_name_the_table_has(path: Path) -> None:
    written = {name for text in code_strings(path) for name in series_read(text)}
    assert not written & set(BY_NAME), (
        f"{path.name} writes {sorted(written & set(BY_NAME))}: use contract/metrics.py's rows"
    )
