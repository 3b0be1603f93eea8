"""Two runs side by side: which findings went away, came or changed; scopes that cannot match."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorwatch.report.analysis import Analysis
from mirrorwatch.report.comparison import Comparison, check_comparable
from mirrorwatch.report.cost import Cost
from mirrorwatch.report.evidence import Finding
from mirrorwatch.report.scope import Gpu, Scope, ScopeError


def finding(
    kind: str, gpu: str | None = "1", share: float = 0.5, cost: float | None = 0.1
) -> Finding:
    priced = None if cost is None else Cost(cost, cost / 2, cost * 2, "clock")
    return Finding(kind, gpu, "h:9848", share, kind, [], "docs/report.md", cost=priced)


def analysis(*findings: Finding, **headline: Any) -> Analysis:
    return Analysis(dict(headline), list(findings), 0.0)


def test_a_finding_only_in_the_first_run_went_away() -> None:
    c = Comparison(analysis(finding("pcie_degraded")), analysis(finding("none", None)))
    assert [f.kind for f in c.gone] == ["pcie_degraded"]
    assert c.came == []
    assert c.both == []


def test_a_finding_only_in_the_second_run_came() -> None:
    c = Comparison(analysis(finding("none", None)), analysis(finding("thermal_throttling")))
    assert [f.kind for f in c.came] == ["thermal_throttling"]
    assert c.gone == []


def test_findings_are_matched_by_kind_and_gpu_index() -> None:
    c = Comparison(analysis(finding("imbalance", "1")), analysis(finding("imbalance", "0")))
    assert [(f.kind, f.gpu) for f in c.gone] == [("imbalance", "1")]
    assert [(f.kind, f.gpu) for f in c.came] == [("imbalance", "0")]


@pytest.mark.parametrize(
    ("second", "changed"),
    [
        (finding("thermal_throttling", share=0.52, cost=0.11), False),
        (finding("thermal_throttling", share=0.9, cost=0.11), True),
        (finding("thermal_throttling", share=0.5, cost=0.3), True),
        (finding("thermal_throttling", share=0.5, cost=None), True),
    ],
)
def test_a_finding_in_both_changed_when_its_share_or_cost_moved(
    second: Finding, changed: bool
) -> None:
    c = Comparison(analysis(finding("thermal_throttling")), analysis(second))
    assert [moved for _, _, moved in c.both] == [changed]


def test_each_headline_figure_has_its_relative_change() -> None:
    c = Comparison(
        analysis(finding("none", None), examples_per_second=800.0, speedup=None),
        analysis(finding("none", None), examples_per_second=1000.0, speedup=1.8),
    )
    changes = c.changes()
    assert changes["examples_per_second"] == {"first": 800.0, "second": 1000.0, "change": 0.25}
    assert changes["speedup"] == {"first": None, "second": 1.8, "change": None}
    assert c.as_json()["compare"]["changes"] == changes


def scope(gpus: int) -> Scope:
    return Scope(
        0.0,
        60.0,
        1,
        "r",
        ("h:9848",),
        tuple(Gpu("h:9848", str(i), f"GPU-{i}", "H100") for i in range(gpus)),
    )


def test_runs_on_different_numbers_of_gpus_cannot_be_compared() -> None:
    check_comparable(scope(2), scope(2))
    with pytest.raises(ScopeError, match="2 GPUs and the second 4"):
        check_comparable(scope(2), scope(4))
