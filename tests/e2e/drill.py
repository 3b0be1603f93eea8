"""Alert drills: a real exporter, Prometheus and Alertmanager on loopback, and a receiver.

The stack is the one `make demo` runs (demo/stack.py), with test timings: Prometheus scrapes
and evaluates every second, every `for:` of the thresholds model is divided by FOR_DIVISOR
(the expressions stay the production ones; test_fast_rules.py checks that), and Alertmanager
waits 1 s before a new group's first notification and 2 s between a group's notifications.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.processes import Process, Processes, StackError
from demo.receiver import Alert, Notification, Receiver
from demo.stack import (
    PROMETHEUS_CONFIG,
    REPO,
    alertmanager_config,
    alertmanager_process,
    exporter_process,
    find_binary,
    load_yaml,
    prometheus_config,
    prometheus_process,
    route_timers,
)
from mirrorwatch.alerts.build import render
from mirrorwatch.alerts.rules.costs import COST_5M
from mirrorwatch.alerts.thresholds import THRESHOLDS_FILE, Thresholds, load_thresholds
from mirrorwatch.contract.vocabulary import Address, format_duration, parse_prometheus_duration
from mirrorwatch.report import cli as report_cli
from mirrorwatch.report.cost import LIVE_COST
from tests.exporter.ingest_snapshots import steady_training
from tests.ports import free_port

FOR_DIVISOR = 30  # 5m -> 10s, 2m -> 4s, 15m -> 30s
SCRAPE_INTERVAL = "1s"
EVALUATION_INTERVAL = "1s"
GROUP_WAIT = "1s"
GROUP_INTERVAL = "2s"
# Prometheus re-sends firing alerts this often (1m in production): the Watchdog that fires
# before Prometheus has found Alertmanager arrives in seconds. Alerts stay valid in
# Alertmanager for 4 x this, so a busy CI machine does not resolve them by accident.
RESEND_DELAY = "2s"


def fail(message: str) -> None:
    pytest.fail(message, pytrace=False)


def binary(*names: str) -> str:
    """A Debian Prometheus binary; a missing one fails the test (CI installs them)."""
    path = find_binary(*names)
    if path is None:
        fail(
            f"{names[0]} is not installed: run `make tools` (Debian packages prometheus, "
            "prometheus-alertmanager)"
        )
        raise AssertionError  # unreachable: pytest.fail raises
    return path


# --- the rules with short `for:` ------------------------------------------------------------


@dataclass(frozen=True)
class ReportedCost:
    """A report's finding, the live cost it quotes, and the recorded series at its end."""

    finding: dict[str, Any]
    quoted: float
    recorded: float | None


@dataclass(frozen=True)
class FastRules:
    """A test copy of the rules, built by mirrorwatch.alerts.build from the thresholds with
    every `for:` divided by FOR_DIVISOR."""

    rules: Path
    thresholds: Thresholds

    def hold(self, alert: str) -> float:
        return self.thresholds.alert(alert).hold_seconds


def build_fast_rules(directory: Path) -> FastRules:
    thresholds = load_thresholds().with_holds_divided(FOR_DIVISOR)
    rules = directory / "mirrorwatch.rules.yml"
    rules.write_text(render(thresholds), encoding="utf-8")
    return FastRules(rules, thresholds)


# --- time to alert ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """What sets how long an alert takes: Prometheus's intervals, the `for:` durations and
    Alertmanager's route timers."""

    scrape_interval: float
    evaluation_interval: float
    thresholds: Thresholds
    alertmanager: Mapping[str, Any]

    def bounds(
        self, alert: str, labels: Mapping[str, str], resolved: bool = False
    ) -> tuple[float, float]:
        """Earliest and latest seconds from an event to its notification.

        Firing: the condition is first seen at the next scrape (up to one scrape interval) and
        the next evaluation after it (up to one evaluation interval, one more where a recording
        rule of another group feeds the alert); then `for:` must pass, then the group_wait of
        the alert's route. Resolved: detected the same way, then sent at the group's next flush
        (up to one group_interval). Delivery itself takes milliseconds.
        """
        timers = route_timers(self.alertmanager, {"alertname": alert, **labels})
        detect = self.scrape_interval + 2 * self.evaluation_interval
        if resolved:
            return 0.0, detect + timers["group_interval"]
        least = self.thresholds.alert(alert).hold_seconds + timers["group_wait"]
        return least, least + detect


def compose_timings() -> Timings:
    """The compose stack's defaults: prometheus/prometheus.yml, the thresholds and
    prometheus/alertmanager.yml (the routes of alerts/alertmanager.yml)."""
    glob = load_yaml(PROMETHEUS_CONFIG)["global"]
    return Timings(
        scrape_interval=parse_prometheus_duration(str(glob["scrape_interval"])),
        evaluation_interval=parse_prometheus_duration(str(glob["evaluation_interval"])),
        thresholds=load_thresholds(),
        alertmanager=load_yaml(REPO / "prometheus" / "alertmanager.yml"),
    )


def drill_timings(rules: FastRules) -> Timings:
    return Timings(
        scrape_interval=parse_prometheus_duration(SCRAPE_INTERVAL),
        evaluation_interval=parse_prometheus_duration(EVALUATION_INTERVAL),
        thresholds=rules.thresholds,
        alertmanager=alertmanager_config(group_wait=GROUP_WAIT, group_interval=GROUP_INTERVAL),
    )


# The name under which a drill's Latency travels on its test report (user_properties), from
# the pytest-xdist worker that ran it to the summary (tests/conftest.py).
LATENCY_PROPERTY = "alert_latency"


@dataclass(frozen=True)
class Latency:
    """One measured time to alert, with what the model predicts for the test and the stack."""

    case: str
    alert: str
    status: str
    event: str
    seconds: float
    model_test: tuple[float, float]
    model_compose: tuple[float, float]

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Latency:
        """The Latency that dataclasses.asdict gave ``fields`` (tuples may come back lists)."""
        return cls(
            case=str(fields["case"]),
            alert=str(fields["alert"]),
            status=str(fields["status"]),
            event=str(fields["event"]),
            seconds=float(fields["seconds"]),
            model_test=(float(fields["model_test"][0]), float(fields["model_test"][1])),
            model_compose=(float(fields["model_compose"][0]), float(fields["model_compose"][1])),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "alert": self.alert,
            "status": self.status,
            "event": self.event,
            "measured_seconds": round(self.seconds, 2),
            # What detection and delivery added to `for:` + group_wait (the model's minimum).
            "beyond_minimum_seconds": round(self.seconds - self.model_test[0], 2),
            "model_at_test_intervals_seconds": list(self.model_test),
            "model_at_compose_defaults_seconds": list(self.model_compose),
        }


def measure(
    rules: FastRules,
    case: str,
    event: str,
    event_at: float,
    notification: Notification,
    alert: Alert,
) -> Latency:
    """The latency of ``alert`` since ``event_at``, checked against the model's lower bound."""
    labels = dict(alert.labels)
    resolved = alert.status == "resolved"
    model_test = drill_timings(rules).bounds(alert.name, labels, resolved)
    model_compose = compose_timings().bounds(alert.name, labels, resolved)
    seconds = notification.received_at - event_at
    # Never earlier than `for:` + group_wait allow: that would mean the drill measured the
    # wrong event (or Prometheus ignored `for:`). Prometheus timestamps a scrape when it
    # starts it, so allow for clock granularity only.
    assert seconds >= model_test[0] - 0.5, (
        f"{alert.name} arrived {seconds:.1f} s after {event}, sooner than the "
        f"{model_test[0]:.1f} s its `for:` and group_wait allow"
    )
    return Latency(case, alert.name, alert.status, event, seconds, model_test, model_compose)


# --- the running stack ------------------------------------------------------------------------


@dataclass
class Drill:
    workdir: Path
    receiver: Receiver
    processes: Processes
    exporter: Process
    exporter_address: Address
    prometheus: Address
    alertmanager: Address
    notes: list[str] = field(default_factory=list)

    @property
    def exporter_url(self) -> str:
        return self.exporter_address.url

    def gpus(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.exporter_url}/api/v1/gpus", timeout=5)
        assert response.status_code == 200, response.text
        gpus: list[dict[str, Any]] = response.json()["gpus"]
        return gpus

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.prometheus.url}/api/v1/query", params={"query": expr}, timeout=10
        )
        body = response.json()
        assert response.status_code == 200, f"{expr}: {body}"
        assert body["status"] == "success", f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def report_live_cost(self, run: str, kind: str, gpu: str, out: Path) -> ReportedCost:
        """The run report of the last two minutes, written now: its one finding of ``kind``,
        the live 5-minute cost that finding quotes, and the recorded cost series of ``gpu`` at
        the report's own end (its range ends at the run's last scrape, report/scope.py)."""
        end = time.time() - 1
        page = report_cli.write_report(self.prometheus.url, run, None, end - 120, end, out)
        findings = json.loads((page.parent / "findings.json").read_text(encoding="utf-8"))
        (finding,) = [f for f in findings["findings"] if f["kind"] == kind]
        quoted = {f["name"]: f["value"] for f in finding["evidence"]["figures"]}[LIVE_COST]
        recorded = self.query_at(
            f'{COST_5M}{{run="{run}",cause="{kind}",gpu="{gpu}"}}', findings["headline"]["end"]
        )
        return ReportedCost(finding, quoted, float(recorded[0]["value"][1]) if recorded else None)

    def query_at(self, expr: str, at: float) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.prometheus.url}/api/v1/query", params={"query": expr, "time": at}, timeout=10
        )
        assert response.status_code == 200, response.text
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def first_sample_time(self, selector: str, value: float = 1.0) -> float:
        """Wall-clock time of the earliest scraped sample of ``selector`` equal to ``value``
        in the last 10 minutes."""
        times = [
            float(ts)
            for series in self.query(f"{selector}[10m]")
            for ts, v in series["values"]
            if float(v) == value
        ]
        assert times, f"no sample of {selector} equal to {value} in Prometheus"
        return min(times)

    def alertmanager_alerts(self, **labels: str) -> list[dict[str, Any]]:
        """Alertmanager's alerts with these labels, silenced and inhibited ones included."""
        filters = [f'{k}="{v}"' for k, v in labels.items()]
        query = urllib.parse.urlencode([("filter", f) for f in filters])
        response = httpx.get(f"{self.alertmanager.url}/api/v2/alerts?{query}", timeout=10)
        assert response.status_code == 200, response.text
        alerts: list[dict[str, Any]] = response.json()
        return alerts

    def wait_alert(
        self, alert: str, timeout: float, status: str = "firing", **labels: str
    ) -> tuple[Notification, Alert]:
        """The first notification carrying ``alert`` in ``status`` with ``labels``; the test
        fails, saying what did arrive and what Prometheus holds, after ``timeout`` seconds."""

        def matches(notification: Notification, candidate: Alert) -> bool:
            return (
                candidate.name == alert
                and candidate.status == status
                and all(candidate.labels.get(k) == v for k, v in labels.items())
            )

        found = self.receiver.wait_for(matches, timeout)
        if found is None:
            fail(
                f"no {status} {alert} {labels} within {timeout:.0f} s.\n"
                f"Received: {self.summary()}\n"
                f"Prometheus ALERTS: {self.prometheus_alerts()}\n"
                + "\n".join(f"--- {p.name} log:\n{p.log_tail()}" for p in self.processes.started)
            )
            raise AssertionError  # unreachable
        return found

    def summary(self) -> list[str]:
        return [
            f"{a.status} {a.name} {dict(a.labels)}"
            for n in self.receiver.notifications()
            for a in n.alerts
        ]

    def prometheus_alerts(self) -> list[str]:
        try:
            return [
                f"{s['metric'].get('alertname')} {s['metric'].get('alertstate')}"
                for s in self.query("ALERTS")
            ]
        except (httpx.HTTPError, AssertionError) as error:
            return [f"(cannot ask Prometheus: {error})"]


def start_alertmanager(
    processes: Processes, workdir: Path, listen: Address, receiver_url: str
) -> None:
    """alerts/alertmanager.yml on ``listen`` with the drills' short group timers, notifying
    ``receiver_url``; returns once it is ready."""
    config = alertmanager_config(
        receiver_url=receiver_url, group_wait=GROUP_WAIT, group_interval=GROUP_INTERVAL
    )
    processes.start(
        alertmanager_process(
            binary("prometheus-alertmanager", "alertmanager"), workdir, listen, config
        ),
        f"{listen.url}/-/ready",
    )


@contextmanager
def running_drill(
    scenario: str, rules: FastRules, workdir: Path, exporter_args: Sequence[str] = ()
) -> Iterator[Drill]:
    """The stack on free loopback ports; every process is stopped when the block ends."""
    prometheus_bin = binary("prometheus")
    exporter_address = Address("127.0.0.1", free_port())
    prometheus = Address("127.0.0.1", free_port())
    alertmanager = Address("127.0.0.1", free_port())
    with Receiver("127.0.0.1", 0) as receiver, Processes() as processes:
        try:
            exporter = processes.start(
                exporter_process(workdir, scenario, exporter_address, exporter_args),
                f"{exporter_address.url}/readyz",
            )
            start_alertmanager(processes, workdir, alertmanager, receiver.url)
            config = prometheus_config(
                exporter=exporter_address,
                alertmanager=alertmanager,
                prometheus=prometheus,
                rule_files=[rules.rules],
                scrape_interval=SCRAPE_INTERVAL,
                evaluation_interval=EVALUATION_INTERVAL,
            )
            processes.start(
                prometheus_process(
                    prometheus_bin, workdir, prometheus, config, resend_delay=RESEND_DELAY
                ),
                f"{prometheus.url}/-/ready",
            )
        except StackError as error:
            fail(str(error))
            raise
        yield Drill(
            workdir, receiver, processes, exporter, exporter_address, prometheus, alertmanager
        )


# --- training telemetry without TensorFlow -----------------------------------------------------


def balanced_snapshot(
    gpus: Sequence[Mapping[str, Any]], sequence: int, frozen_after: int | None = None
) -> str:
    """A worker's cumulative state after ``sequence`` seconds of 20 steps/s on every GPU (no
    step after ``frozen_after`` seconds, where given)."""
    return steady_training(
        gpus,
        sequence,
        session="e2e",
        model="cnn",
        steps_per_second=20,
        step_seconds=0.05,
        epoch=0,
        loss=1.0,
        trained_seconds=frozen_after,
    )


@contextmanager
def synthetic_training(
    drill: Drill,
    run: str,
    interval: float = 1.0,
    extra: Mapping[str, Any] | None = None,
    frozen_after: int | None = None,
) -> Iterator[None]:
    """Push a steady, balanced training run through the ingest API every ``interval`` s, as
    the callback does, until the block ends; ``extra`` fields join every snapshot. Push
    failures fail the test afterwards."""
    gpus = drill.gpus()
    stop = threading.Event()
    errors: list[str] = []

    def push() -> None:
        sequence = 0
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                sequence += 1
                body = balanced_snapshot(gpus, sequence, frozen_after)
                if extra:
                    body = json.dumps({**json.loads(body), **extra})
                response = client.put(
                    f"{drill.exporter_url}/api/v1/runs/{run}/workers/0",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                if response.status_code != 200:
                    errors.append(f"push {sequence}: {response.status_code} {response.text}")
                stop.wait(interval)

    thread = threading.Thread(target=push, name="synthetic-training", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors, errors[:3]


def write_report(path: Path, latencies: Sequence[Latency], machine: Mapping[str, Any]) -> None:
    """bench/results/alert-latency.json: measured times and the model at both timings."""
    compose = compose_timings()
    report = {
        "benchmark": "time from a fault to its Alertmanager webhook notification (tests/e2e)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": dict(machine),
        "test_timings": {
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": EVALUATION_INTERVAL,
            "for_divisor": FOR_DIVISOR,
            "group_wait": GROUP_WAIT,
            "group_interval": GROUP_INTERVAL,
            "resend_delay": RESEND_DELAY,
        },
        "compose_timings": {
            "scrape_interval": format_duration(compose.scrape_interval),
            "evaluation_interval": format_duration(compose.evaluation_interval),
            "alertmanager": "prometheus/alertmanager.yml",
            "thresholds": str(THRESHOLDS_FILE.relative_to(REPO)),
        },
        "results": [latency.as_dict() for latency in latencies],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
