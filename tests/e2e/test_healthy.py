"""`healthy` with a balanced training run: nothing but Watchdog arrives."""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.drill import FastRules, running_drill, synthetic_training

# As long as the thermal drill takes to alert (its fault at ~23 s, then `for:` and
# group_wait), with room: a healthy host must stay quiet over the same window.
WINDOW_SECONDS = 45


def test_healthy_host_sends_nothing_but_watchdog(fast_rules: FastRules, tmp_path: Path) -> None:
    with (
        running_drill("healthy", fast_rules, tmp_path) as drill,
        synthetic_training(drill, "e2e-healthy"),
    ):
        time.sleep(WINDOW_SECONDS)
        pending_or_firing = drill.query('ALERTS{alertname!="Watchdog"}')
        notifications = drill.receiver.notifications()

    assert {a.name for n in notifications for a in n.alerts} == {"Watchdog"}
    # The dead-man's switch has its own receiver and path.
    assert {n.path for n in notifications} == {"/watchdog"}
    assert pending_or_firing == []
