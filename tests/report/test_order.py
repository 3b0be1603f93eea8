"""The findings' order: what explains an imbalance comes before it, a foreign process too."""

from __future__ import annotations

from mirrorwatch.report.evidence import KINDS, Finding, ordered


def finding(kind: str, share: float = 0.5, gpu: str = "0") -> Finding:
    return Finding(kind, gpu, "h1:9848", share, kind, [], "docs/report.md")


def test_a_foreign_process_comes_after_the_hardware_causes_and_before_the_imbalance() -> None:
    kinds = [
        "imbalance",
        "foreign_process",
        "pcie_degraded",
        "gpu_error",
        "thermal_throttling",
        "power_capping",
        "hardware_slowdown",
        "input_bound",
    ]
    assert [f.kind for f in ordered([finding(k) for k in kinds])] == [
        "gpu_error",
        "hardware_slowdown",
        "thermal_throttling",
        "power_capping",
        "pcie_degraded",
        "foreign_process",
        "imbalance",
        "input_bound",
    ]


def test_every_contract_kind_has_a_place_in_the_order() -> None:
    assert sorted(f.kind for f in ordered([finding(k) for k in KINDS])) == sorted(KINDS)
