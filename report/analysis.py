"""Every check of the report, in one pass over a scope: the headline and the ordered findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract import causes
from mirrorwatch.report import cost, hardware, processes, workload
from mirrorwatch.report.evidence import Ask, Finding, ordered
from mirrorwatch.report.headline import accounted, headline

THROTTLE_KINDS = tuple(cause.kind for cause in causes.THROTTLES)


NOTHING_WRONG = "Nothing wrong found"
# Of a run that reported no GPUs, what is still the run's own: its pushes stopping.
RUN_KINDS = frozenset({"telemetry_gap"})


@dataclass(frozen=True)
class Analysis:
    headline: dict[str, Any]
    findings: list[Finding]
    at: float
    # Findings on the GPUs of the run's instances where the run reported none of its own:
    # shown apart, costed, but never pinned on the run (nor in its headline's cost).
    host_findings: list[Finding] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "headline": self.headline,
            "findings": [f.as_json(self.at) for f in self.findings],
            "host_findings": [f.as_json(self.at) for f in self.host_findings],
        }


def analyse(ask: Ask, t: Thresholds) -> Analysis:
    found: list[Finding] = [
        *hardware.gpu_errors(ask),
        *hardware.throttling(ask, t),
        *hardware.pcie(ask, t),
        *processes.foreign_processes(ask),
        *workload.imbalance(ask, t),
        *workload.stragglers(ask, t),
        *hardware.interconnect(ask),
        *hardware.temperature_headroom(ask, t),
        *workload.telemetry_gaps(ask, t),
    ]
    throttled = any(f.kind in THROTTLE_KINDS for f in found)
    found += workload.input_bound(ask, t, throttled)
    host: list[Finding] = []
    if not ask.scope.gpus_reported:
        host = ordered([cost.costed(ask, t, f) for f in found if f.kind not in RUN_KINDS])
        found = [f for f in found if f.kind in RUN_KINDS]
    top = headline(ask, t)
    if not found:
        found = [nothing_wrong(top)]
    findings = ordered([cost.costed(ask, t, f) for f in found])
    return Analysis(accounted(top, findings), findings, ask.scope.end, host)


def nothing_wrong(h: dict[str, Any]) -> Finding:
    """The finding of a range where no check found anything: "nothing wrong" only where the
    run also met its scaling target (or has no baseline to miss it by)."""
    if not h["gpus_reported"]:
        summary = (
            "No cause found: the run reported no GPUs of its own, so the GPU checks "
            "(balance, throttling, links, errors) could not be pinned on it."
        )
    elif h.get("meets_target") is False:
        summary = (
            "No cause found among the checks: balanced GPUs, no throttling, links at their "
            "maximum, no errors and no gaps in the telemetry, yet the run missed its scaling "
            "target (see the unexplained share above)."
        )
    else:
        summary = (
            f"{NOTHING_WRONG}: balanced GPUs, no throttling, links at their maximum, no "
            "errors and no gaps in the telemetry over the whole range."
        )
    return Finding(
        "none", None, None, 1.0, summary, [], "docs/report.md#none", ("utilization", "spread")
    )
