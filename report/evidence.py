"""Findings and their evidence: every figure carries the PromQL query and time that gave it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirrorwatch.contract import causes
from mirrorwatch.report.prometheus import Prometheus
from mirrorwatch.report.scope import Key, Scope, gpu_key, target_key

if TYPE_CHECKING:
    from mirrorwatch.report.cost import Cost

# The kinds and their order (most important first) are the cause table's, which the live
# rules read too: a report and an alert never rank two causes differently.
KINDS = causes.KINDS


def runbook(alert: str) -> str:
    """The runbook anchor of an alert: GitHub's anchor is the heading in lower case."""
    return f"{causes.RUNBOOK}#{alert.lower()}"


@dataclass(frozen=True)
class Figure:
    """One number: ``query`` asked at the range's end; ``labels`` pick its series."""

    name: str
    value: float
    unit: str
    query: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "query": self.query,
            "labels": dict(self.labels),
        }


@dataclass(frozen=True)
class Finding:
    kind: str
    gpu: str | None
    instance: str | None
    share: float
    summary: str
    figures: Sequence[Figure]
    runbook: str
    charts: Sequence[str] = ()
    # What it cost (report/cost.py); None where the evidence supports no number.
    cost: Cost | None = None
    # The GPU_KEY labels of its GPU, or (a finding of a whole host) the TARGET_KEY labels of
    # its host: what picks its series in an answer where hosts share `instance`.
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def target(self) -> Key:
        """The TARGET_KEY values of its host."""
        return target_key(self.labels or {"instance": self.instance or ""})

    def as_json(self, at: float) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "gpu": self.gpu,
            "instance": self.instance,
            "share": round(self.share, 4),
            "summary": self.summary,
            "evidence": {"time": at, "figures": [f.as_json() for f in self.figures]},
            "runbook": self.runbook,
            "cost": None if self.cost is None else self.cost.as_json(),
        }


def ordered(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (causes.RANK[f.kind], -f.share, f.gpu or ""))


class Ask:
    """Asks instant queries at the range's end, remembering each answer."""

    def __init__(self, prometheus: Prometheus, scope: Scope) -> None:
        self.prometheus = prometheus
        self.scope = scope
        self._answers: dict[str, list[dict[str, Any]]] = {}

    def rows(self, query: str) -> list[dict[str, Any]]:
        """The answer's series as their labels plus ``value``."""
        if query not in self._answers:
            self._answers[query] = [
                {**s.labels, "value": s.value}
                for s in self.prometheus.instant(query, self.scope.end)
            ]
        return self._answers[query]

    def by_gpu(self, query: str) -> dict[Key, float]:
        """The answer's values by GPU (GPU_KEY values, as ``Gpu.key``)."""
        return {gpu_key(r): r["value"] for r in self.rows(query)}

    def by_target(self, query: str) -> dict[Key, float]:
        """The answer's values by target (TARGET_KEY values, as ``Gpu.target``)."""
        return {target_key(r): r["value"] for r in self.rows(query)}

    def one(self, query: str) -> float | None:
        rows = self.rows(query)
        return float(rows[0]["value"]) if rows else None

    def figure(self, name: str, unit: str, query: str, labels: Mapping[str, str]) -> Figure | None:
        """The figure of the series with ``labels`` in the answer to ``query``, if any."""
        for row in self.rows(query):
            if all(row.get(k) == v for k, v in labels.items()):
                return Figure(name, float(row["value"]), unit, query, labels)
        return None


def share_of(value: float | None) -> float:
    """A held-share answer as a share: absent is never; a step's rounding may pass 1."""
    return 0.0 if value is None else max(0.0, min(1.0, value))
