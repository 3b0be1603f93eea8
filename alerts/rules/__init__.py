"""The rules, one module per area, as Prometheus will read them but for «fragments».

An `Alert` says what only it knows: its expression, severity and annotations. Its `for` (the
alert's section of thresholds.yml), its runbook link and the fragments of its text are
attached by mirrorwatch.alerts.build, in one pass over every rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mirrorwatch.alerts.fragments import Fragment

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class Record:
    """A recording rule: ``name`` (level:metric:operation) records ``expr``, whose «names» are
    the shared settings of thresholds.yml and ``fragments``; ``labels`` are added to what it
    records (several rules may record one name, each with its own labels)."""

    name: str
    expr: str
    fragments: Mapping[str, Fragment] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Alert:
    """An alerting rule named for its contract alert (and its section of thresholds.yml).

    ``expr``, ``summary``, ``description`` and ``value`` may name fragments as «name»: the
    alert's own settings, the shared ones of thresholds.yml (`busy`, `job_regex`), the
    annotation pieces of mirrorwatch.alerts.templates and ``fragments``.
    """

    name: str
    severity: Severity
    expr: str
    summary: str
    description: str
    value: str
    labels: Mapping[str, str] = field(default_factory=dict)
    fragments: Mapping[str, Fragment] = field(default_factory=dict)
