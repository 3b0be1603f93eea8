"""The doctor's check model: one check's outcome, a run's summary, its exit code."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

# The runbook the alerts and the run report link to: one file, the doctor's sections in it.
from mirrorwatch.contract.causes import RUNBOOK

Status = Literal["pass", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = get_args(Status)


def runbook_anchor(check_id: str) -> str:
    """The runbook link of a check: its section is headed ``Doctor: <id>``.

    GitHub's heading anchors (github-slugger): lower case, every character that is not a
    letter, digit, space, ``-`` or ``_`` dropped, spaces turned into ``-``.
    """
    slug = re.sub(r"[^\w\- ]", "", f"Doctor: {check_id}".lower()).replace(" ", "-")
    return f"{RUNBOOK}#{slug}"


@dataclass(frozen=True)
class Check:
    """One check's outcome. ``gpu`` is the GPU (or "0,1" for a pair) it is about, or None."""

    id: str
    status: Status
    value: str
    expected: str
    fix: str = ""
    gpu: str | None = None

    @property
    def runbook(self) -> str:
        return runbook_anchor(self.id)

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "status": self.status,
            "gpu": self.gpu,
            "value": self.value,
            "expected": self.expected,
            "fix": self.fix,
            "runbook": self.runbook,
        }


def skipped(check_id: str, why: str, gpu: str | None = None) -> Check:
    return Check(check_id, "skip", f"skipped: {why}", "", gpu=gpu)


@dataclass(frozen=True)
class Outcome:
    """Every check of one doctor run and, with ``--probe``, the expected speed-up."""

    checks: Sequence[Check]
    expected_speedup: Mapping[str, object] | None = None

    @property
    def summary(self) -> dict[Status, int]:
        return {status: sum(c.status == status for c in self.checks) for status in STATUSES}

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, 1 when a check did."""
        return 1 if any(c.status == "fail" for c in self.checks) else 0

    def as_json(self) -> dict[str, object]:
        return {
            "checks": [c.as_json() for c in self.checks],
            "summary": self.summary,
            "expected_speedup": self.expected_speedup,
        }
