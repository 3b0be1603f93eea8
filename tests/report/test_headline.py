"""The headline's loss against the ideal, the part of it no finding explains, the bounds no
"without causes" figure may pass, and how the page says them (no Prometheus needed)."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest

from mirrorwatch.report.analysis import Analysis, nothing_wrong
from mirrorwatch.report.cost import METHODS, Cost
from mirrorwatch.report.evidence import Finding
from mirrorwatch.report.headline import accounted, allreduce_estimate, verdict
from mirrorwatch.report.page import cost_html, render
from mirrorwatch.report.words import percent, plural


def finding(kind: str, fraction: float, gpu: str = "1", instance: str = "h:9848") -> Finding:
    cost = Cost(fraction, fraction / 2, min(1.0, fraction * 1.5), METHODS[kind].name)
    return Finding(kind, gpu, instance, 0.9, f"{kind} summary.", [], "docs/report.md", cost=cost)


def base(speedup: float | None = 1.12, ideal: float | None = 2.0) -> dict[str, Any]:
    """A headline before the findings' costs: a 2-replica run at ``speedup``."""
    efficiency = None if speedup is None or not ideal else speedup / ideal
    return {
        "run": "demo-healthy",
        "instances": ["h:9848"],
        "gpus": [{"instance": "h:9848", "gpu": "0", "uuid": "GPU-0", "name": "H100"}],
        "gpus_reported": True,
        "start": 0.0,
        "end": 300.0,
        "start_text": "1970-01-01 00:00:00 UTC",
        "end_text": "1970-01-01 00:05:00 UTC",
        "duration_seconds": 300,
        "step_seconds": 1,
        "steps": 3000.0,
        "examples": 192000.0,
        "examples_per_second": 640.0,
        "speedup": speedup,
        "scaling_efficiency": efficiency,
        "ideal_speedup": ideal,
        "replicas": ideal,
        "efficiency_target": 0.9,
        "meets_target": None if efficiency is None else efficiency >= 0.9,
        "lost": None if efficiency is None else max(0.0, 1 - efficiency),
        "allreduce_share": None,
        "mean_utilization": 0.62,
        "verdict": verdict(speedup, ideal, efficiency, 0.9),
        "queries": {"mean_utilization": "q", "steps": "q"},
    }


def test_lost_is_the_share_of_the_ideal_not_reached() -> None:
    headline = accounted(base(1.12), [])
    assert headline["lost"] == pytest.approx(0.44)
    # No finding has a cost: all of it is unexplained.
    assert headline["unexplained"] == pytest.approx(0.44)


def test_the_unexplained_share_is_what_is_left_without_the_causes() -> None:
    headline = accounted(base(1.5), [finding("thermal_throttling", 0.1)])
    # 1.5x of 2x; without the throttling 1.5 / 0.9 = 1.667x: 1 - 1.667 / 2 is unexplained.
    assert headline["unexplained"] == pytest.approx(1 - 1.5 / 0.9 / 2, abs=1e-4)
    assert 0 <= headline["unexplained"] <= headline["lost"]
    # More cost leaves less unexplained: the high bound gives the low end.
    assert headline["unexplained_low"] <= headline["unexplained"] <= headline["unexplained_high"]


def test_costs_that_overlap_past_the_loss_are_bounded_by_it() -> None:
    # Three causes, each estimated alone, that together claim 1 - 0.7 * 0.75 * 0.8 = 58 %
    # of a run that lost only 10 % against its ideal (1.8x of 2x).
    findings = [
        finding("thermal_throttling", 0.3),
        finding("pcie_degraded", 0.25, gpu="0"),
        finding("input_bound", 0.2, gpu="0", instance="other:9848"),
    ]
    headline = accounted(base(1.8), findings)
    assert headline["cost_before_bound"]["fraction"] == pytest.approx(0.58, abs=1e-3)
    cost = headline["cost"]
    assert cost["fraction"] == pytest.approx(0.1)
    assert cost["low"] <= cost["fraction"] <= cost["high"] <= headline["lost"] + 1e-9
    assert headline["speedup_without_causes"] <= headline["ideal_speedup"]
    assert headline["speedup_without_causes"] == pytest.approx(2.0)
    assert headline["unexplained"] == 0
    assert headline["examples_per_second_without_causes"] == pytest.approx(640 / 0.9)


def test_no_without_causes_figure_passes_the_ideal_on_the_page() -> None:
    findings = [finding("imbalance", 0.4, instance="h:9848")]
    analysis = Analysis(accounted(base(1.77), findings), findings, 300.0)
    page = unescape(render(analysis, {}, "http://p:9090", "docs/runbook.md"))
    speedups = [float(x) for x in re.findall(r"a speed-up of ([\d.]+)x", page)]
    assert speedups
    assert all(s <= 2.0 for s in speedups), speedups
    assert "they count as no more than the loss" in page


def test_without_a_baseline_nothing_is_lost_or_unexplained() -> None:
    headline = accounted(base(None, 2.0), [finding("thermal_throttling", 0.2)])
    assert headline["lost"] is None
    assert headline["unexplained"] is None
    assert headline["speedup_without_causes"] is None
    assert headline["cost"]["fraction"] == pytest.approx(0.2)


def test_a_run_below_its_target_with_no_finding_is_never_nothing_wrong() -> None:
    headline = accounted(base(1.12), [])
    none = nothing_wrong(headline)
    assert "Nothing wrong" not in none.summary
    analysis = Analysis(accounted(base(1.12), [none]), [none], 300.0)
    page = unescape(render(analysis, {}, "http://p:9090", "docs/runbook.md"))
    assert "Nothing wrong found" not in page
    assert 'class="why ok"' not in page
    assert "Unexplained: 44 % of the ideal throughput." in page
    for hiding in ("The all-reduce, not measured", "input pipeline and CPU", "model's own"):
        assert hiding in page
    assert "an estimate, not this run's own" in page
    assert "busy 62 % of the time" in page


def test_a_run_meeting_its_target_with_no_finding_is_nothing_wrong() -> None:
    headline = accounted(base(1.9), [])
    none = nothing_wrong(headline)
    assert none.summary.startswith("Nothing wrong found")
    analysis = Analysis(accounted(base(1.9), [none]), [none], 300.0)
    page = render(analysis, {}, "http://p:9090", "docs/runbook.md")
    assert 'class="why ok"' in page
    assert "Unexplained" not in page


def test_a_measured_all_reduce_is_named_with_its_share() -> None:
    h = base(1.12) | {"allreduce_share": 0.21}
    none = nothing_wrong(h)
    page = unescape(render(Analysis(accounted(h, [none]), [none], 300.0), {}, "p", "r"))
    assert "The all-reduce, measured: the run's workers spent 21 % of each step" in page


def test_the_all_reduce_estimate_is_a_ring_over_the_slowest_pcie_link() -> None:
    """ResNet-50's 25,557,032 float32 parameters on 2 replicas over PCIe gen 4 x16: each replica
    moves 2 (n - 1) / n of them (nccl-tests PERFORMANCE.md's bus bandwidth) at 16 GT/s a lane
    after 128b/130b encoding (PCI-SIG), 1.969 GB/s a lane: 102.2 MB / 31.5 GB/s = 3.24 ms."""
    lane = 16e9 * 128 / 130 / 8
    estimate = allreduce_estimate(4 * 25_557_032, 2, 4, 16, 0.1)
    assert estimate is not None
    assert estimate["seconds"] == pytest.approx(4 * 25_557_032 / (16 * lane), abs=1e-6)
    assert estimate["seconds"] == pytest.approx(3.245e-3, abs=1e-5)
    assert estimate["share"] == pytest.approx(0.0324, abs=1e-4)
    assert estimate["link"] == "PCIe gen 4 x16"
    # Four replicas move 3/2 of the gradients, not 1: the ring's 2 (n - 1) / n.
    four = allreduce_estimate(4 * 25_557_032, 4, 4, 16, 0.1)
    assert four is not None
    assert four["seconds"] == pytest.approx(1.5 * estimate["seconds"], rel=1e-3)
    # One replica has nothing to all-reduce; an unknown generation has no rate.
    assert allreduce_estimate(1e8, 1, 4, 16, 0.1) is None
    assert allreduce_estimate(1e8, 2, 9, 16, 0.1) is None


def test_an_estimated_all_reduce_is_named_as_an_estimate_with_its_share() -> None:
    estimate = allreduce_estimate(4 * 25_557_032, 2, 3, 8, 0.05)
    h = base(1.12) | {"allreduce_estimate": estimate}
    none = nothing_wrong(h)
    page = unescape(render(Analysis(accounted(h, [none]), [none], 300.0), {}, "p", "r"))
    assert "The all-reduce, estimated (not measured)" in page
    assert "97.5 MiB of gradients over its GPUs' slowest link (PCIe gen 3 x8)" in page
    assert "takes about 13.0 ms, 26 % of a median step" in page
    assert "The all-reduce, not measured" not in page


def test_a_run_without_gpus_says_so_and_which_gpus_were_looked_at() -> None:
    h = base(1.12) | {"gpus_reported": False, "queries": {"steps": "q"}}
    del h["mean_utilization"]
    none = nothing_wrong(h)
    host = finding("thermal_throttling", 0.2, gpu="0")
    analysis = Analysis(accounted(h, [none]), [none], 300.0, [host])
    page = unescape(render(analysis, {}, "p", "r"))
    assert "No GPUs reported:" in page
    assert "every GPU of h:9848 (GPU 0)" in page
    assert "On the host's GPUs, not pinned on the run (1)" in page
    assert "mean GPU utilisation" not in page
    assert analysis.as_json()["findings"][0]["kind"] == "none"
    assert analysis.as_json()["host_findings"][0]["kind"] == "thermal_throttling"


def test_the_verdict_counts_replicas_in_the_plural() -> None:
    assert verdict(1.0, 1.0, 1.0, 0.9).startswith("1.00x on 1 replica: 100 % of ideal")
    assert "on 2 replicas instead of 1.80x: 56 % of ideal (2x)" in verdict(1.12, 2, 0.56, 0.9)


def test_numbers_read_one_way() -> None:
    assert (percent(0.15), percent(0.042), percent(0)) == ("15 %", "4.2 %", "0 %")
    assert percent(1 - 0.9) == "10 %"
    assert (plural(1, "GPU"), plural(2, "GPU"), plural(3, "process", "processes")) == (
        "1 GPU",
        "2 GPUs",
        "3 processes",
    )


def test_an_xid_without_a_lost_gpu_does_not_speak_of_one() -> None:
    xid = Finding("gpu_error", "1", "h:9848", 0.1, "GPU 1 reported XID 43.", [], "r")
    html = unescape(cost_html(xid))
    assert "Cost: no number." in html
    assert "lost" not in html


def test_a_cost_method_reads_in_one_sentence_with_its_workings_folded() -> None:
    html = unescape(cost_html(finding("thermal_throttling", 0.2)))
    said, _, folded = html.partition("<details>")
    assert "by the clock method." in said
    assert said.count(". ") <= 2  # the cost, then the method's first sentence
    assert "Low bound" in folded
    assert "<summary>How the clock method counts it</summary>" in folded
