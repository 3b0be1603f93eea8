"""Every dashboard query is valid PromQL (promtool) and reads only known series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.dashboards.queries import (
    PROMETHEUS_SERIES,
    Target,
    all_targets,
    documented_metrics,
    expand,
    label_values,
    load_dashboards,
    query_variables,
    recording_rules,
    selectors,
)
from tests.hang import HANG_SECONDS

TARGETS = all_targets()
# Any syntactically right value does for parsing; a range for $__rate_interval.
PARSE_VALUES = {
    "__rate_interval": "1m",
    "__rate_interval_ms": "60000",
    "job": ".+",
    "host": ".*",
    "instance": ".+",
    "run": ".+",
    "gpu": ".+",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed: run `make tools` (Debian package prometheus)",
            pytrace=False,
        )
    return path


def variable_selectors() -> list[tuple[str, str]]:
    """(where, selector) of every label_values() variable query."""
    found = []
    for dashboard in load_dashboards().values():
        for variable in query_variables(dashboard):
            selector, _ = label_values(variable["query"])
            found.append((f"{dashboard['title']} ${variable['name']}", selector))
    return found


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    exprs = [(str(t), expand(t.expr, PARSE_VALUES)) for t in TARGETS]
    exprs += [(where, expand(sel, PARSE_VALUES)) for where, sel in variable_selectors()]
    rules = [
        {"record": f"dashboard:query:{i}", "expr": expr, "labels": {"where": where[:200]}}
        for i, (where, expr) in enumerate(exprs)
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    broken = {"record": "dashboard:query:0", "expr": "sum by (gpu (up)"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": [broken]}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )
    assert result.returncode != 0


def allowed_names() -> set[str]:
    return documented_metrics() | recording_rules() | PROMETHEUS_SERIES


def test_the_allowed_names_are_read_from_the_docs_and_rules() -> None:
    names = allowed_names()
    assert "mirrorwatch_gpu_utilization_ratio" in names
    assert "mirrorwatch_training_step_duration_seconds_bucket" in names
    assert "run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m" in names
    assert len(names) > 60


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_every_query_reads_contract_metrics_or_recording_rules(target: Target) -> None:
    names = {s.metric for s in selectors(expand(target.expr, PARSE_VALUES))}
    assert names, f"no series selector found in {target.expr}"
    assert names <= allowed_names(), f"unknown series {names - allowed_names()}"


@pytest.mark.parametrize(("where", "selector"), variable_selectors())
def test_every_variable_reads_contract_metrics(where: str, selector: str) -> None:
    names = {s.metric for s in selectors(selector)}
    assert names, where
    assert names <= allowed_names(), where


def test_the_reader_finds_every_selector() -> None:
    expr = (
        'sum by (run, le) (rate(a_total{job=~"$job"}[$__rate_interval])) '
        "/ on (job) group_left (gpu) max without (x) (b:c:d) or vector(1) "
        "unless e offset 5m and histogram_quantile(0.9, f_bucket) > 3.6e6"
    )
    found = {s.metric: s for s in selectors(expr)}
    assert sorted(found) == ["a_total", "b:c:d", "e", "f_bucket"]
    assert found["a_total"].in_counter_function
    assert not found["f_bucket"].in_counter_function
    assert found["a_total"].matchers == (("job", "=~", '"$job"'),)
