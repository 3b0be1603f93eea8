"""What the demo's banner promises: the alerts its receiver will print for a scenario, and when.

A scenario's ``expected_alerts`` (its file) are what its story raises in Prometheus; the banner
lists only those Alertmanager lets through. An expected alert that another of the same scenario
inhibits (alerts/inhibitions.py: the critical XID 48 holds back the warning XID 43 of the same
GPU) is said to be held back, and by what. A built-in scenario tells of one host, one GPU and one
run, so an inhibition's ``equal`` labels other than the alert's name and severity hold between
two of its alerts.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from demo.processes import StackError, get_json
from demo.stack import alertmanager_config, route_timers, thresholds
from demo.stack import matches as matcher_matches
from mirrorwatch.alerts.inhibitions import INHIBITIONS
from mirrorwatch.contract.metrics import (
    TRAINING_SCALING_EFFICIENCY_RATIO,
    TRAINING_SCALING_SPEEDUP,
)
from mirrorwatch.contract.vocabulary import parse_prometheus_duration
from mirrorwatch.exporter.simulate.scenario import (
    ExpectedAlert,
    ScenarioError,
    builtin_expected_alerts,
    load_scenario,
)

# Alerts a scenario drills that need the run's steps to stop: the demo's CPU trainer never
# hangs, whatever the simulated GPUs show.
NEEDS_FROZEN_STEPS = frozenset({"TrainingHungInCollective"})
# What a demo with training may raise: its two CPU replicas share this machine's cores, so their
# speed-up over one replica rises and falls with the machine's load (README, "make demo").
SCALING_ALERT = "TrainingScalingEfficiencyLow"
SCALING_POLL_SECONDS = 15.0  # Prometheus is asked this often; the trainer pushes every 5 s


def _labels(alert: ExpectedAlert) -> dict[str, str]:
    return {"alertname": alert.alert, "severity": alert.severity}


def held_back_by(alert: ExpectedAlert, scenario: Sequence[ExpectedAlert]) -> ExpectedAlert | None:
    """The alert of ``scenario`` whose inhibition keeps ``alert`` from the receiver, or None.
    Only one that fires by the time ``alert``'s first notification is due (its `for:` and
    group_wait) holds it back: a later one cannot unsay what was sent."""
    target = _labels(alert)
    settings, routes = thresholds(), alertmanager_config()
    hold, wait = _timed(alert, settings, routes)
    for inhibition in INHIBITIONS:
        if not all(matcher_matches(m, target) for m in inhibition.target):
            continue
        for other in scenario:
            source = _labels(other)
            if other == alert or not all(matcher_matches(m, source) for m in inhibition.source):
                continue
            if any(source[key] != target[key] for key in inhibition.equal if key in source):
                continue
            if _timed(other, settings, routes)[0] <= hold + wait:
                return other
    return None


@dataclass(frozen=True)
class Arrival:
    """One expected alert as the receiver will show it: after ``seconds``, or never (``held``
    names what inhibits it; ``frozen`` says it needs steps that stop)."""

    alert: ExpectedAlert
    hold_seconds: float
    wait_seconds: float
    held: ExpectedAlert | None = None
    frozen: bool = False

    @property
    def arrives(self) -> bool:
        return self.held is None and not self.frozen

    def words(self) -> str:
        name, severity = self.alert.alert, self.alert.severity
        if self.frozen:
            return (
                f"{name} only once the run's steps stop ({severity}): the demo's trainer keeps "
                "stepping on CPU, so it stays quiet here "
                "(tests/e2e/test_collective_hang.py drills it with a frozen worker)"
            )
        if self.held is not None:
            return (
                f"not {name} ({severity}): the {self.held.alert} ({self.held.severity}) of the "
                "same GPU holds it back in Alertmanager (alerts/inhibitions.py)"
            )
        return (
            f"{name} after ~{(self.hold_seconds + self.wait_seconds) / 60:.1f} min "
            f"({severity}; for: {self.hold_seconds:.0f} s + {self.wait_seconds:.0f} s)"
        )


def _timed(
    alert: ExpectedAlert, settings: Mapping[str, Any], routes: Mapping[str, Any]
) -> tuple[float, float]:
    hold = parse_prometheus_duration(str(settings[alert.alert]["for"]))
    wait = route_timers(routes, _labels(alert))["group_wait"]
    return hold, wait


def arrivals(expected: Sequence[ExpectedAlert]) -> list[Arrival]:
    """Each expected alert with when, or why not, the receiver prints it."""
    settings, routes = thresholds(), alertmanager_config()
    found = []
    for alert in expected:
        hold, wait = _timed(alert, settings, routes)
        found.append(
            Arrival(
                alert,
                hold,
                wait,
                held=held_back_by(alert, expected),
                frozen=alert.alert in NEEDS_FROZEN_STEPS,
            )
        )
    return found


def scaling_words(replicas: int = 2) -> str:
    """What the CPU replicas' speed-up raises, said before it is measured."""
    settings = thresholds()[SCALING_ALERT]
    alert = ExpectedAlert(alert=SCALING_ALERT, severity="warning")
    hold, wait = _timed(alert, thresholds(), alertmanager_config())
    target = replicas * float(settings["efficiency_ratio"])
    return (
        f"{SCALING_ALERT} after ~{(hold + wait) / 60:.1f} min (warning; for: {hold:.0f} s + "
        f"{wait:.0f} s) if the {replicas} CPU replicas stay below {target:.1f}x over one: they "
        "share this machine's cores, so that depends on its load (the demo says which once the "
        "speed-up is measured)"
    )


def expectation(scenario: str, *, training: bool = True) -> str:
    """What the receiver will print beside Watchdog, and when: from the scenario's file,
    thresholds.yml, alertmanager.yml and its inhibitions."""
    try:
        expected = load_scenario(scenario).expected_alerts
    except ScenarioError:
        expected = None  # the exporter says what is wrong with the file, and exits
    scaling = [scaling_words()] if training else []
    if expected is None:
        parts = ["a custom scenario: its alerts arrive after their `for:` and group_wait", *scaling]
        return "; ".join(parts) + "."
    if not expected:
        return "; ".join(["nothing else from the GPUs", *scaling]) + "."
    parts = [arrival.words() for arrival in arrivals(expected)]
    return "; ".join([*parts, *scaling]) + " -- plus the scenario's own start (docs/scenarios.md)."


def expected_alerts() -> dict[str, tuple[str, ...]]:
    """The alerts each built-in scenario is meant to raise, by name, from its file's
    ``expected_alerts`` (docs/scenarios.md); an alert expected with two severities once."""
    return {
        scenario: tuple(dict.fromkeys(expected.alert for expected in alerts))
        for scenario, alerts in builtin_expected_alerts().items()
    }


class ScalingWatch:
    """Says, when the run's speed-up over one replica is first measured and again whenever its
    efficiency crosses the alert's threshold, whether TrainingScalingEfficiencyLow will come
    and at about what time (each crossing restarts its `for:`)."""

    def __init__(self, prometheus_url: str, run: str | None) -> None:
        self._url = prometheus_url.rstrip("/")
        self._run = run
        self._below: bool | None = None  # the side of the threshold last said
        self._next_poll = 0.0

    def _value(self, metric: str) -> float | None:
        query = urllib.parse.urlencode({"query": f'{metric}{{run="{self._run}"}}'})
        try:
            result = get_json(f"{self._url}/api/v1/query?{query}")["data"]["result"]
        except (OSError, StackError, ValueError, KeyError):
            return None  # Prometheus is busy or restarting: asked again in a second
        return float(result[0]["value"][1]) if result else None

    def poll(self) -> str | None:
        """The line to print when the efficiency is first known or changes side; else None."""
        if self._run is None or time.monotonic() < self._next_poll:
            return None
        self._next_poll = time.monotonic() + SCALING_POLL_SECONDS
        efficiency = self._value(TRAINING_SCALING_EFFICIENCY_RATIO)
        if efficiency is None:
            return None
        below = efficiency < float(thresholds()[SCALING_ALERT]["efficiency_ratio"])
        if below == self._below:
            return None
        self._below = below
        speedup = self._value(TRAINING_SCALING_SPEEDUP)
        return scaling_verdict(efficiency, speedup, time.time())


def scaling_verdict(efficiency: float, speedup: float | None, now: float) -> str:
    """Whether a run at ``efficiency`` raises TrainingScalingEfficiencyLow, and when."""
    threshold = float(thresholds()[SCALING_ALERT]["efficiency_ratio"])
    alert = ExpectedAlert(alert=SCALING_ALERT, severity="warning")
    hold, wait = _timed(alert, thresholds(), alertmanager_config())
    reached = f"{speedup:.2f}x over one replica, " if speedup is not None else ""
    measured = f"demo: speed-up measured: {reached}a scaling efficiency of {efficiency:.0%}"
    if efficiency >= threshold:
        return (
            f"{measured} (at least {threshold:.0%}): {SCALING_ALERT} will not come while it "
            "stays there."
        )
    at = time.strftime("%H:%M", time.localtime(now + hold + wait))
    return (
        f"{measured} (below {threshold:.0%}: CPU replicas share this machine's cores): "
        f"{SCALING_ALERT} will arrive at about {at}, if the efficiency stays below."
    )
