"""Every check of the report, in one pass over a scope: the headline and the ordered findings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mirrorwatch.alerts import causes
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.report import cost, hardware, processes, workload
from mirrorwatch.report.evidence import Ask, Finding, ordered
from mirrorwatch.report.headline import headline

THROTTLE_KINDS = tuple(cause.kind for cause in causes.THROTTLES)


@dataclass(frozen=True)
class Analysis:
    headline: dict[str, Any]
    findings: list[Finding]
    at: float

    def as_json(self) -> dict[str, Any]:
        return {
            "headline": self.headline,
            "findings": [f.as_json(self.at) for f in self.findings],
        }


def analyse(ask: Ask, t: Thresholds) -> Analysis:
    found: list[Finding] = [
        *hardware.gpu_errors(ask),
        *hardware.throttling(ask, t),
        *hardware.pcie(ask, t),
        *processes.foreign_processes(ask),
        *workload.imbalance(ask, t),
        *hardware.interconnect(ask),
        *hardware.temperature_headroom(ask, t),
        *workload.telemetry_gaps(ask, t),
    ]
    throttled = any(f.kind in THROTTLE_KINDS for f in found)
    found += workload.input_bound(ask, t, throttled)
    if not found:
        found = [nothing_wrong(ask)]
    findings = ordered([cost.costed(ask, t, f) for f in found])
    return Analysis(cost.without_causes(headline(ask, t), findings), findings, ask.scope.end)


def nothing_wrong(ask: Ask) -> Finding:
    return Finding(
        "none",
        None,
        None,
        1.0,
        "Nothing wrong found: balanced GPUs, no throttling, links at their maximum, no errors "
        "and no gaps in the telemetry over the whole range.",
        [],
        "docs/report.md#none",
        ("utilization", "spread"),
    )
