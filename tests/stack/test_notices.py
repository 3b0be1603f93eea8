"""What `make demo` prints of each notification: description and an offline runbook link under
a firing alert, and Watchdog once."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from demo.notices import TerminalNotices
from demo.receiver import Notification
from demo.stack import RULES, RUNBOOK, load_yaml


def rule(name: str) -> dict[str, Any]:
    """The alerting rule as Prometheus loads it from the generated rule file."""
    for group in load_yaml(RULES)["groups"]:
        for one in group["rules"]:
            if one.get("alert") == name:
                return dict(one)
    raise AssertionError(f"no rule {name}")


def notification(name: str, status: str = "firing", **labels: str) -> Notification:
    annotations = {
        key: value.replace("{{ $labels.gpu }}", "1").replace("{{ $labels.run }}", "demo-x")
        for key, value in rule(name)["annotations"].items()
    }
    alert = {
        "status": status,
        "labels": {"alertname": name, **labels},
        "annotations": annotations,
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
    }
    payload = {"version": "4", "status": status, "receiver": "default", "alerts": [alert]}
    return Notification("/", time.time(), payload)


def anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown.read_text(encoding="utf-8"), re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def test_a_firing_alert_shows_its_description_and_a_runbook_that_opens_offline() -> None:
    text = TerminalNotices(RUNBOOK).text(
        notification("GpuUtilizationImbalance", severity="warning", run="demo-x")
    )
    assert text is not None
    first, *details = text.splitlines()
    assert "FIRING" in first
    assert "GpuUtilizationImbalance" in first
    described = " ".join(rule("GpuUtilizationImbalance")["annotations"]["description"].split())
    assert details[0].strip()[:30] == described.replace("{{ $labels.run }}", "demo-x")[:30]
    link = details[1].strip().removeprefix("runbook: ")
    path, _, anchor = link.partition("#")
    assert Path(path).is_file()
    assert anchor in anchors(Path(path))


def test_a_resolved_alert_is_one_line() -> None:
    text = TerminalNotices(RUNBOOK).text(notification("GpuUtilizationImbalance", "resolved"))
    assert text is not None
    assert len(text.splitlines()) == 1
    assert "RESOLVED" in text


def test_watchdog_is_shown_once_not_at_every_repeat() -> None:
    notices = TerminalNotices(RUNBOOK)
    first = notices.text(notification("Watchdog", severity="info"))
    assert first is not None
    assert "Watchdog" in first
    assert notices.text(notification("Watchdog", severity="info")) is None
    assert notices.text(notification("GpuThermalThrottling", severity="critical")) is not None
