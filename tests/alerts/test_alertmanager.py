"""alerts/alertmanager.yml: valid, routes as documented, and inhibits on a live Alertmanager."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.tools import (
    ALERTMANAGER_CONFIG,
    ALERTMANAGER_EXAMPLE,
    TEMPLATE,
    binary,
    firing_alert,
    load_yaml,
    render_template,
    run,
)
from tests.ports import free_port

SECRETS_DIR = "/etc/alertmanager/secrets/"
DEMO_RECEIVER = "127.0.0.1:9095"
START_TIMEOUT_S = 20.0
INHIBIT_TIMEOUT_S = 10.0


def test_alertmanager_config_passes_amtool_check_config() -> None:
    result = run([binary("amtool"), "check-config", str(ALERTMANAGER_CONFIG)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 templates" in result.stdout


def test_slack_email_example_passes_amtool_check_config_with_secret_files(
    tmp_path: Path,
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "slack_api_url").write_text("https://hooks.slack.com/services/T0/B0/X")
    (secrets / "smtp_password").write_text("not-a-real-password")
    config = tmp_path / "alertmanager.yml"
    text = ALERTMANAGER_EXAMPLE.read_text(encoding="utf-8")
    assert SECRETS_DIR in text
    config.write_text(text.replace(SECRETS_DIR, f"{secrets}/"), encoding="utf-8")
    shutil.copy(TEMPLATE, tmp_path / TEMPLATE.name)
    result = run([binary("amtool"), "check-config", str(config)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_slack_email_example_keeps_the_same_routes_and_inhibitions() -> None:
    main, example = load_yaml(ALERTMANAGER_CONFIG), load_yaml(ALERTMANAGER_EXAMPLE)
    assert example["route"] == main["route"]
    assert example["inhibit_rules"] == main["inhibit_rules"]
    assert {r["name"] for r in example["receivers"]} == {r["name"] for r in main["receivers"]}
    for key in ("slack_api_url_file", "smtp_auth_password_file"):
        assert example["global"][key].startswith(SECRETS_DIR)


def test_critical_alerts_repeat_sooner_than_the_rest() -> None:
    route = load_yaml(ALERTMANAGER_CONFIG)["route"]
    assert route["group_by"] == ["alertname", "cluster", "host", "instance", "run"]
    (critical,) = [r for r in route["routes"] if r["matchers"] == ['severity="critical"']]
    hours = {"1h": 1, "4h": 4}
    assert hours[critical["repeat_interval"]] < hours[route["repeat_interval"]]


# Labels of an alert -> the receiver `amtool config routes test` must resolve.
ROUTING_CASES = [
    ({"alertname": "Watchdog", "severity": "info"}, "watchdog"),
    (
        {"alertname": "GpuLost", "severity": "critical", "instance": "h1:9848", "gpu": "1"},
        "critical",
    ),
    ({"alertname": "GpuXidError", "severity": "critical", "xid": "79"}, "critical"),
    ({"alertname": "GpuXidError", "severity": "warning", "xid": "13"}, "default"),
    ({"alertname": "GpuUtilizationImbalance", "severity": "warning", "run": "resnet"}, "default"),
    ({"alertname": "GpuThermalThrottling", "severity": "warning", "gpu": "0"}, "default"),
    ({"alertname": "GpuPowerCapped", "severity": "info", "gpu": "0"}, "info"),
    ({"alertname": "TrainingStalled", "severity": "critical", "run": "resnet"}, "critical"),
    ({"alertname": "MirrorwatchExporterDown", "severity": "warning"}, "default"),
    ({"alertname": "MirrorwatchNvmlUnavailable", "severity": "critical"}, "critical"),
    ({"alertname": "SomethingElse"}, "default"),
]


@pytest.mark.parametrize(
    ("labels", "receiver"),
    ROUTING_CASES,
    ids=[f"{c[0]['alertname']}->{c[1]}" for c in ROUTING_CASES],
)
def test_alert_routes_to_its_receiver(labels: dict[str, str], receiver: str) -> None:
    result = run(
        [
            binary("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={ALERTMANAGER_CONFIG}",
            f"--verify.receivers={receiver}",
            *(f"{k}={v}" for k, v in labels.items()),
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_notification_template_names_the_host_behind_an_agent(tmp_path: Path) -> None:
    """Hosts behind agents share `instance` (localhost:9848): the `host` label names them."""
    alert = firing_alert(
        {
            "alertname": "GpuMissing",
            "severity": "critical",
            "cluster": "lab",
            "host": "gpu-b",
            "instance": "localhost:9848",
        },
        {"summary": "gpu-b has fewer GPUs than expected", "value": "1 missing"},
    )
    assert render_template(tmp_path, alert, "mirrorwatch.title") == (
        "[FIRING:1] GpuMissing on gpu-b"
    )
    assert "host: gpu-b | GPU: -" in render_template(tmp_path, alert, "mirrorwatch.text")
    assert "host <code>gpu-b</code>" in render_template(tmp_path, alert, "mirrorwatch.email.html")


def test_notification_template_shows_host_gpu_run_value_and_runbook(tmp_path: Path) -> None:
    alert = firing_alert(
        {
            "alertname": "GpuUtilizationImbalance",
            "severity": "warning",
            "instance": "h1:9848",
            "gpu": "1",
            "uuid": "GPU-1",
            "run": "resnet",
        },
        {
            "summary": "GPU utilisation imbalance in run resnet",
            "description": "GPU 1 lags the most.",
            "value": "36%",
            "runbook_url": "https://example.org/runbook.md#gpuutilizationimbalance",
        },
    )

    def render(name: str) -> str:
        return render_template(tmp_path, alert, name)

    assert render("mirrorwatch.title") == (
        "[FIRING:1] GpuUtilizationImbalance on h1:9848 (run resnet)"
    )
    text = render("mirrorwatch.text")
    assert "host: h1:9848 | GPU: 1 (GPU-1) | run: resnet | value: 36%" in text
    assert "Runbook: https://example.org/runbook.md#gpuutilizationimbalance" in text


# --- a live Alertmanager -----------------------------------------------------------------


@dataclass
class Alertmanager:
    url: str
    log: Path

    def request(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    """The project's alertmanager.yml served on a free loopback port; always stopped after."""
    config = tmp_path / "alertmanager.yml"
    # Notifications go to a closed port, never to a demo receiver that may be running.
    dead_receiver = f"127.0.0.1:{free_port()}"
    config.write_text(
        ALERTMANAGER_CONFIG.read_text(encoding="utf-8").replace(DEMO_RECEIVER, dead_receiver)
    )
    shutil.copy(TEMPLATE, tmp_path / TEMPLATE.name)
    port = free_port()
    log = tmp_path / "alertmanager.log"
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [
                binary("prometheus-alertmanager"),
                f"--config.file={config}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    am = Alertmanager(url=f"http://127.0.0.1:{port}", log=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"alertmanager exited with {process.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"{am.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"alertmanager not ready in {START_TIMEOUT_S} s:\n{log.read_text()}")
            time.sleep(0.1)
        yield am
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": name},
    }


def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def wait_for_inhibition(
    am: Alertmanager, sent: list[dict[str, Any]], inhibited: int
) -> dict[tuple[tuple[str, str], ...], dict[str, Any]]:
    """Alertmanager's view of the sent alerts, once `inhibited` of them are inhibited."""
    deadline = time.monotonic() + INHIBIT_TIMEOUT_S
    while True:
        got = {key(a["labels"]): a for a in am.request("GET", "/api/v2/alerts")}
        count = sum(1 for a in got.values() if a["status"]["inhibitedBy"])
        if len(got) == len(sent) and count >= inhibited:
            return got
        if time.monotonic() > deadline:
            states = {str(dict(k)): a["status"]["inhibitedBy"] for k, a in got.items()}
            pytest.fail(f"{count} of {inhibited} inhibitions after {INHIBIT_TIMEOUT_S} s: {states}")
        time.sleep(0.2)


def test_live_alertmanager_inhibits_as_documented(alertmanager: Alertmanager) -> None:
    nvml_down = alert("MirrorwatchNvmlUnavailable", "critical", instance="h1:9848")
    exporter_down = alert("MirrorwatchExporterDown", "warning", instance="h4:9848")
    gpu_lost = alert("GpuLost", "critical", instance="h2:9848", gpu="1", uuid="GPU-1")
    critical_xid = alert("GpuXidError", "critical", instance="h3:9848", gpu="0", xid="79")
    # Behind per-host agents (deploy/fleet/) every host's exporter may be `localhost:9848`:
    # `host` (an agent's external label) tells them apart. Alertmanager takes a label missing
    # from both alerts as equal (inhibit.go, `equal`), so single-host alerts work as before.
    agent_down = alert(
        "MirrorwatchExporterDown", "warning", instance="localhost:9848", host="gpu-a"
    )
    silenced = [
        # NVML unavailable / exporter down on a host silence that host's GPU alerts...
        alert("GpuMissing", "critical", instance="h1:9848"),
        alert("GpuThermalThrottling", "warning", instance="h1:9848", gpu="0"),
        alert("GpuPcieLinkDegraded", "warning", instance="h4:9848", gpu="0"),
        # ...a lost GPU silences its other alerts...
        alert("GpuPcieLinkDegraded", "warning", instance="h2:9848", gpu="1", uuid="GPU-1"),
        alert("GpuUtilizationImbalance", "warning", instance="h2:9848", gpu="1", run="r"),
        # ...and a critical alert silences the warning of the same alert on the same GPU.
        alert("GpuXidError", "warning", instance="h3:9848", gpu="0", xid="13"),
        # ...and an exporter down behind an agent silences its own host only.
        alert("GpuThermalThrottling", "warning", instance="localhost:9848", host="gpu-a", gpu="0"),
    ]
    sources = {
        key(silenced[0]["labels"]): nvml_down,
        key(silenced[1]["labels"]): nvml_down,
        key(silenced[2]["labels"]): exporter_down,
        key(silenced[3]["labels"]): gpu_lost,
        key(silenced[4]["labels"]): gpu_lost,
        key(silenced[5]["labels"]): critical_xid,
        key(silenced[6]["labels"]): agent_down,
    }
    untouched = [
        nvml_down,
        exporter_down,
        gpu_lost,
        critical_xid,
        # Another host, another GPU, a training alert: not silenced.
        alert("GpuThermalThrottling", "warning", instance="h9:9848", gpu="0"),
        alert("TrainingStalled", "critical", instance="h1:9848", run="r", worker="0"),
        alert("GpuPcieLinkDegraded", "warning", instance="h2:9848", gpu="0", uuid="GPU-0"),
        alert("GpuXidError", "warning", instance="h3:9848", gpu="1", xid="13"),
        agent_down,
        # The same instance on another host behind its own agent: not silenced.
        alert("GpuThermalThrottling", "warning", instance="localhost:9848", host="gpu-b", gpu="0"),
    ]
    sent = silenced + untouched
    alertmanager.request("POST", "/api/v2/alerts", sent)

    got = wait_for_inhibition(alertmanager, sent, inhibited=len(silenced))

    for target in silenced:
        labels = key(target["labels"])
        source = got[key(sources[labels]["labels"])]
        status = got[labels]["status"]
        assert status["state"] == "suppressed", (labels, status)
        assert status["inhibitedBy"] == [source["fingerprint"]], (labels, status)
    for other in untouched:
        status = got[key(other["labels"])]["status"]
        assert status["inhibitedBy"] == [], (other["labels"], status)
        assert status["state"] == "active", (other["labels"], status)


def test_live_alertmanager_groups_hosts_behind_agents_apart(alertmanager: Alertmanager) -> None:
    """One notification group per host, even where every host's exporter is `localhost:9848`."""
    sent = [
        alert("GpuThermalThrottling", "warning", instance="localhost:9848", host=h, gpu="0")
        for h in ("gpu-a", "gpu-b")
    ]
    alertmanager.request("POST", "/api/v2/alerts", sent)
    deadline = time.monotonic() + INHIBIT_TIMEOUT_S
    while True:
        groups = alertmanager.request("GET", "/api/v2/alerts/groups")
        hosts = sorted(g["labels"].get("host", "") for g in groups)
        if hosts == ["gpu-a", "gpu-b"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert hosts == ["gpu-a", "gpu-b"], groups
    assert all(len(g["alerts"]) == 1 for g in groups), groups
