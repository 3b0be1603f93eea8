"""The demo's banner promises exactly what its receiver prints: each scenario's expected alerts
less those Alertmanager's generated inhibitions hold back, checked against a real Alertmanager
running alerts/alertmanager.yml."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from demo.expect import (
    SCALING_ALERT,
    ScalingWatch,
    arrivals,
    expectation,
    expected_alerts,
    held_back_by,
    scaling_verdict,
)
from demo.processes import Processes
from demo.stack import alertmanager_config, alertmanager_process
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.exporter.simulate.scenario import (
    ExpectedAlert,
    builtin_expected_alerts,
    builtin_scenarios,
    load_scenario,
)
from tests.e2e.drill import binary
from tests.ports import free_port

SETTLE_SECONDS = 30


def test_the_expected_alerts_come_from_the_scenario_files() -> None:
    table = expected_alerts()
    assert set(table) == set(builtin_scenarios())
    assert table["thermal-throttle"] == tuple(
        alert.alert for alert in load_scenario("thermal-throttle").expected_alerts or ()
    )
    assert table["xid"] == ("GpuXidError", "GpuEccUncorrectable")  # two severities, one name
    assert table["healthy"] == ()


def test_the_critical_xid_holds_back_the_warning_one() -> None:
    xid = builtin_expected_alerts()["xid"]
    warning = ExpectedAlert(alert="GpuXidError", severity="warning")
    critical = ExpectedAlert(alert="GpuXidError", severity="critical")
    assert held_back_by(warning, xid) == critical
    assert held_back_by(critical, xid) is None
    # A critical alert of another name does not: that inhibition wants the same alertname.
    hung = ExpectedAlert(alert="TrainingHungInCollective", severity="critical")
    assert held_back_by(warning, [warning, hung]) is None
    # A lost GPU holds back everything else that GPU says once it fires (for: 1m) ...
    lost = ExpectedAlert(alert="GpuLost", severity="critical")
    spread = ExpectedAlert(alert="GpuTemperatureSpread", severity="warning")
    assert held_back_by(spread, [spread, lost]) == lost
    # ... but not what was sent before: the critical XID's notification leaves at once.
    assert held_back_by(critical, [critical, lost]) is None


def test_the_xid_banner_promises_no_warning_xid() -> None:
    said = expectation("xid")
    assert "GpuXidError after ~0.6 min (warning" not in said
    assert "not GpuXidError (warning): the GpuXidError (critical) of the same GPU" in said
    assert "GpuXidError after ~0.2 min (critical; for: 0 s + 10 s)" in said
    assert "GpuEccUncorrectable after ~0.2 min (critical;" in said


def test_the_healthy_banner_says_the_cpu_replicas_raise_the_scaling_alert() -> None:
    said = expectation("healthy")
    assert said.startswith("nothing else from the GPUs; TrainingScalingEfficiencyLow after ~15.5")
    assert "share this machine's cores, so that depends on its load" in said
    # Without training there is no speed-up, so no such alert.
    assert expectation("healthy", training=False) == "nothing else from the GPUs."


def test_the_measured_speed_up_says_whether_the_scaling_alert_comes() -> None:
    low = scaling_verdict(0.52, 1.05, 0.0)
    assert "1.05x over one replica, a scaling efficiency of 52% (below 90%" in low
    assert f"{SCALING_ALERT} will arrive at about" in low
    assert scaling_verdict(0.95, 1.9, 0.0).endswith(
        f"{SCALING_ALERT} will not come while it stays there."
    )


def test_a_custom_scenario_may_say_what_it_drills(tmp_path: Path) -> None:
    unsaid = tmp_path / "unsaid.yaml"
    unsaid.write_text("description: d\n")
    assert expectation(str(unsaid)).startswith("a custom scenario")
    said = tmp_path / "said.yaml"
    said.write_text("description: d\nexpected_alerts: [{alert: GpuLost, severity: critical}]\n")
    assert expectation(str(said)).startswith("GpuLost after ~")


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """alerts/alertmanager.yml, inhibitions and all, on a free port; its URL."""
    listen = Address("127.0.0.1", free_port())
    workdir = tmp_path_factory.mktemp("alertmanager")
    config = alertmanager_config(receiver_url=f"http://127.0.0.1:{free_port()}")
    binary_path = binary("prometheus-alertmanager", "alertmanager")
    with Processes() as processes:
        processes.start(
            alertmanager_process(binary_path, workdir, listen, config), f"{listen.url}/-/ready"
        )
        yield listen.url


def _post(url: str, alerts: list[dict[str, object]]) -> None:
    request = urllib.request.Request(
        f"{url}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


def _held_back(url: str, instance: str) -> dict[tuple[str, str], bool]:
    query = f"{url}/api/v2/alerts?filter=instance%3D%22{instance}%22"
    with urllib.request.urlopen(query, timeout=5) as answer:
        alerts = json.load(answer)
    return {
        (a["labels"]["alertname"], a["labels"]["severity"]): bool(a["status"]["inhibitedBy"])
        for a in alerts
    }


def test_every_scenario_banner_matches_what_alertmanager_lets_through(alertmanager: str) -> None:
    # Each scenario's expected alerts, as its one host, GPU and run raise them, into the real
    # Alertmanager: the ones it inhibits are exactly those the banner says are held back.
    now = datetime.now(UTC)
    posted = {}
    for scenario, expected in builtin_expected_alerts().items():
        instance = f"{scenario}:9848"
        labels = {"job": "mirrorwatch", "instance": instance, "gpu": "1", "uuid": "GPU-1"}
        labels["run"] = f"demo-{scenario}"
        _post(
            alertmanager,
            [
                {
                    "labels": {**labels, "alertname": a.alert, "severity": a.severity},
                    "startsAt": now.isoformat(),
                    "endsAt": (now + timedelta(minutes=10)).isoformat(),
                }
                for a in expected
            ],
        )
        posted[scenario] = instance
    for scenario, instance in posted.items():
        promised = {
            (a.alert.alert, a.alert.severity): a.held is not None
            for a in arrivals(builtin_expected_alerts()[scenario])
        }
        deadline = time.monotonic() + SETTLE_SECONDS
        while (seen := _held_back(alertmanager, instance)) != promised:
            assert time.monotonic() < deadline, (scenario, seen, promised)
            time.sleep(0.2)


class _Answers(BaseHTTPRequestHandler):
    """A Prometheus query API that answers each metric with the value the test set."""

    values: ClassVar[dict[str, float]] = {}

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        metric = query.split("{")[0]
        result = (
            [{"metric": {}, "value": [0, str(self.values[metric])]}]
            if metric in self.values
            else []
        )
        body = json.dumps({"status": "success", "data": {"result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_scaling_watch_speaks_when_measured_and_when_the_efficiency_crosses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("demo.expect.SCALING_POLL_SECONDS", 0.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        watch = ScalingWatch(f"http://127.0.0.1:{server.server_address[1]}", "demo-healthy")
        assert watch.poll() is None  # not measured yet
        _Answers.values.update(
            mirrorwatch_training_scaling_efficiency_ratio=0.95,
            mirrorwatch_training_scaling_speedup=1.9,
        )
        said = watch.poll()
        assert said is not None
        assert said.endswith("will not come while it stays there.")
        assert watch.poll() is None  # the same side: nothing new to say
        _Answers.values["mirrorwatch_training_scaling_efficiency_ratio"] = 0.5
        said = watch.poll()
        assert said is not None
        assert f"{SCALING_ALERT} will arrive at about" in said
    finally:
        server.shutdown()
        server.server_close()
