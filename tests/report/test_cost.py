"""What the findings cost together, and how the page says it (the methods themselves are tested
against the truth in test_report.py)."""

from __future__ import annotations

import pytest

from mirrorwatch.report.cost import (
    INTERCONNECT_MEASURED,
    METHODS,
    PCIE_MEASURED,
    Cost,
    combined,
    in_words,
    method_of,
    without_causes,
)
from mirrorwatch.report.evidence import KINDS, Finding


def finding(kind: str, fraction: float | None, instance: str = "h:9848", gpu: str = "1") -> Finding:
    method = METHODS[kind].name
    cost = None if fraction is None else Cost(fraction, fraction / 2, fraction * 1.5, method)
    return Finding(kind, gpu, instance, 0.5, kind, [], "docs/report.md", cost=cost)


def test_every_kind_has_a_method_that_says_what_it_assumes() -> None:
    assert sorted(METHODS) == sorted(KINDS)
    methods = [*METHODS.values(), *(m.measured for m in METHODS.values() if m.measured)]
    assert all(len(m.assumes) > 30 and m.assumes.endswith(".") for m in methods)


def test_the_links_are_measured_where_the_run_publishes_its_all_reduce() -> None:
    measured = {kind for kind, m in METHODS.items() if m.measured is not None}
    assert measured == {"pcie_degraded", "interconnect"}
    assert method_of("pcie_degraded", "measured all-reduce") is PCIE_MEASURED
    assert method_of("interconnect", "measured all-reduce") is INTERCONNECT_MEASURED
    assert method_of("interconnect", "all-reduce over PCIe") is METHODS["interconnect"]


def test_the_page_says_whether_a_link_cost_was_measured_or_estimated() -> None:
    measured = Cost(0.144, 0.072, 0.172, "measured all-reduce", allreduce=0.09)
    assert in_words(measured, "pcie_degraded").endswith(
        "by the measured all-reduce method, from the all-reduce time the run's workers measured."
    )
    estimated = Cost(0.082, 0.041, 0.11, "link")
    assert in_words(estimated, "pcie_degraded").endswith(
        "by the link method, estimated from the link's traffic."
    )


def test_a_measured_all_reduce_counts_once_under_a_measured_interconnect() -> None:
    # The x8 link's cost holds 0.09 of all-reduce, which NVLink would take away with the rest
    # of the all-reduce (the interconnect's 0.19): only its input copies count beside it.
    link = Cost(0.144, 0.072, 0.172, "measured all-reduce", allreduce=0.09)
    pair = Cost(0.19, 0.095, 0.19, "measured all-reduce")
    both = [
        Finding("pcie_degraded", "1", "h:9848", 0.9, "", [], "", cost=link),
        Finding("interconnect", "0", "h:9848", 1.0, "", [], "", cost=pair),
    ]
    total = combined(both)
    assert total is not None
    assert total.fraction == pytest.approx(1 - (1 - 0.054) * (1 - 0.19))
    assert total.low == pytest.approx(1 - (1 - 0.027) * (1 - 0.095))
    assert total.high == pytest.approx(1 - (1 - 0.082) * (1 - 0.19))
    # An estimated interconnect cost (the transmit traffic) does not hold it: both count.
    estimated = [
        both[0],
        Finding(
            "interconnect",
            "0",
            "h:9848",
            1.0,
            "",
            [],
            "",
            cost=Cost(0.03, 0.015, 0.12, "all-reduce over PCIe"),
        ),
    ]
    alone = combined(estimated)
    assert alone is not None
    assert alone.fraction == pytest.approx(1 - (1 - 0.144) * (1 - 0.03))


def test_independent_causes_leave_the_product_of_what_each_leaves() -> None:
    total = combined([finding("pcie_degraded", 0.1), finding("input_bound", 0.2)])
    assert total is not None
    assert total.fraction == pytest.approx(1 - 0.9 * 0.8)
    assert total.low == pytest.approx(1 - 0.95 * 0.9)
    assert total.high == pytest.approx(1 - 0.85 * 0.7)


def test_an_imbalance_beside_its_cause_is_not_counted_twice() -> None:
    both = [finding("thermal_throttling", 0.15), finding("imbalance", 0.1, gpu="0")]
    total = combined(both)
    assert total is not None
    assert total.fraction == pytest.approx(0.15)
    # On another host, with nothing there to explain it, it counts.
    elsewhere = combined([both[0], finding("imbalance", 0.1, instance="other:9848")])
    assert elsewhere is not None
    assert elsewhere.fraction == pytest.approx(1 - 0.85 * 0.9)


def test_of_one_hosts_throttled_gpus_the_slowest_gates() -> None:
    total = combined([finding("power_capping", 0.1, gpu="0"), finding("hardware_slowdown", 0.4)])
    assert total is not None
    assert total.fraction == pytest.approx(0.4)


def test_findings_without_a_number_leave_no_total() -> None:
    assert combined([finding("telemetry_gap", None), finding("foreign_process", None)]) is None


def test_the_headline_gives_the_throughput_without_the_causes() -> None:
    headline = without_causes(
        {"examples_per_second": 1134.0, "speedup": 1.5}, [finding("thermal_throttling", 0.25)]
    )
    assert headline["cost"]["fraction"] == 0.25
    assert headline["examples_per_second_without_causes"] == pytest.approx(1512.0)
    assert headline["speedup_without_causes"] == pytest.approx(2.0)


def test_without_a_baseline_there_is_no_speedup_without_the_causes() -> None:
    headline = without_causes({"examples_per_second": None}, [finding("none", 0.0)])
    assert headline["examples_per_second_without_causes"] is None
    assert headline["speedup_without_causes"] is None


def test_the_page_says_the_cost_and_its_bounds_in_words() -> None:
    cost = Cost(0.158, 0.093, 0.165, "clock")
    assert in_words(cost, "thermal_throttling") == (
        "Cost: about 16 % of the run's throughput (between 9.3 % and 16 %), by the clock method."
    )
    assert in_words(Cost(0, 0, 0, "nothing lost"), "none") == "Cost: none."
    assert in_words(None, "telemetry_gap").startswith("Cost: no number. What happened")
