"""What the demo's terminal shows of each notification: the alert with its description and a
runbook link that opens offline, and Watchdog once, not every time Alertmanager repeats it."""

from __future__ import annotations

from pathlib import Path

from demo.receiver import Notification, format_notification
from mirrorwatch.alerts.thresholds import load_thresholds

WATCHDOG = "Watchdog"


class TerminalNotices:
    """``text(notification)``: the lines to print, or None for a repeat not worth a line."""

    def __init__(self, runbook: Path) -> None:
        # thresholds.yml's runbook_url is the published runbook; every alert links an anchor
        # in it. The demo runs from a checkout that has the file itself, which needs no network.
        self._published = load_thresholds().runbook_url.split("#")[0]
        self._local = runbook
        self._watchdog_seen = False

    def runbook(self, url: str) -> str:
        if url.startswith(self._published):
            return str(self._local) + url.removeprefix(self._published)
        return url

    def text(self, notification: Notification) -> str | None:
        if all(alert.name == WATCHDOG for alert in notification.alerts):
            if self._watchdog_seen:
                return None  # Alertmanager repeats it every few minutes: it proves liveness
            self._watchdog_seen = True
            return (
                format_notification(notification)
                + "\n           the alert pipeline works end to end; its repeats are not shown"
            )
        return format_notification(notification, details=True, runbook=self.runbook)
