"""The doctor's two outputs: a checklist for people (colour only on a terminal) and JSON."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from mirrorwatch.doctor.model import Check, Outcome, Status

_MARKS: Mapping[Status, str] = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}
# ANSI SGR colours: green, yellow, red, dim.
_COLOURS: Mapping[Status, str] = {"pass": "32", "warn": "33", "fail": "31", "skip": "2"}
_WORDS: tuple[tuple[Status, str], ...] = (
    ("pass", "passed"),
    ("warn", "warned"),
    ("fail", "failed"),
    ("skip", "skipped"),
)


def _folded(checks: Sequence[Check]) -> list[list[Check]]:
    """The checks in order, each run of skips of one area for one reason as one group: the
    seven TensorFlow checks a simulated host skips are one line, not seven."""
    groups: list[list[Check]] = []
    for check in checks:
        last = groups[-1][0] if groups else None
        if (
            last is not None
            and check.status == last.status == "skip"
            and check.value == last.value
            and check.gpu == last.gpu
            and check.id.partition(".")[0] == last.id.partition(".")[0]
        ):
            groups[-1].append(check)
        else:
            groups.append([check])
    return groups


def as_json(outcome: Outcome) -> str:
    return json.dumps(outcome.as_json(), indent=2, ensure_ascii=False)


def checklist(
    outcome: Outcome, *, colour: bool, only: Collection[Status] = ("pass", "warn", "fail", "skip")
) -> str:
    """One line per check: mark, id, the GPU(s), the value found; then the expected value and
    the fix under every check that did not pass; then the summary and exit meaning. ``only``
    folds the list to the checks of those statuses (the summary still counts every check)."""

    def paint(status: Status, text: str) -> str:
        return f"\033[{_COLOURS[status]}m{text}\033[0m" if colour else text

    lines = []
    for group in _folded(outcome.checks):
        check = group[0]
        if check.status not in only:
            continue
        where = f" [GPU {check.gpu}]" if check.gpu is not None else ""
        name = check.id
        if len(group) > 1:
            area = check.id.partition(".")[0]
            parts = ", ".join(c.id.partition(".")[2] for c in group)
            name = f"{area}.* ({len(group)} checks: {parts})"
        lines.append(f"{paint(check.status, _MARKS[check.status])} {name}{where}: {check.value}")
        if check.status in ("warn", "fail"):
            lines.append(f"       expected: {check.expected}")
            if check.fix:
                lines.append(f"       fix: {check.fix}")
            lines.append(f"       runbook: {check.runbook}")
    if outcome.expected_speedup is not None:
        lines.append(f"speed-up: {outcome.expected_speedup.get('text')}")
    summary = outcome.summary
    lines.append(", ".join(f"{summary[status]} {word}" for status, word in _WORDS))
    return "\n".join(lines)
