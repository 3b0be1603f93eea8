"""alerts/alertmanager.yml: valid, routes as documented, and inhibits on a live Alertmanager."""

from __future__ import annotations

import copy
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
import yaml

from tests.alerts.tools import (
    ALERTMANAGER_CONFIG,
    ALERTMANAGER_EXAMPLE,
    GENERATE_INHIBITIONS,
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


def test_slack_email_example_keeps_the_same_routes() -> None:
    main, example = load_yaml(ALERTMANAGER_CONFIG), load_yaml(ALERTMANAGER_EXAMPLE)
    assert example["route"] == main["route"]
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


# --- the generated inhibit rules -------------------------------------------------------------


def test_committed_alertmanager_configs_carry_the_generated_inhibitions() -> None:
    result = run([*GENERATE_INHIBITIONS, "--check"])
    assert result.returncode == 0, result.stderr


def test_check_mode_reports_a_hand_edited_inhibition(tmp_path: Path) -> None:
    edited = tmp_path / "alertmanager.yml"
    text = ALERTMANAGER_CONFIG.read_text(encoding="utf-8")
    assert "equal: [cluster, host, job, instance]\n" in text
    edited.write_text(text.replace("equal: [cluster, host, job, instance]\n", "equal: [job]\n"))
    result = run([*GENERATE_INHIBITIONS, "--check", str(edited)])
    assert result.returncode == 1
    assert f"{edited} is out of date" in result.stderr


def test_a_config_without_the_markers_exits_2_naming_it(tmp_path: Path) -> None:
    bare = tmp_path / "alertmanager.yml"
    bare.write_text("route:\n  receiver: default\nreceivers:\n  - name: default\n")
    result = run([*GENERATE_INHIBITIONS, str(bare)])
    assert result.returncode == 2
    assert str(bare) in result.stderr
    assert "BEGIN GENERATED inhibit_rules" in result.stderr


def test_generation_keeps_the_hand_written_rest_of_the_file(tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    original = ALERTMANAGER_EXAMPLE.read_text(encoding="utf-8")
    begin, end = original.index("# BEGIN GENERATED"), original.index("# END GENERATED")
    stale = original[:begin] + "# BEGIN GENERATED inhibit_rules\n" + original[end:]
    config.write_text(stale, encoding="utf-8")
    result = run([*GENERATE_INHIBITIONS, str(config)])
    assert result.returncode == 0, result.stderr
    assert config.read_text(encoding="utf-8") == original


# --- a live Alertmanager -----------------------------------------------------------------


@dataclass
class Alertmanager:
    url: str
    log: Path
    config: Path

    def request(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None

    def reload(self, config: dict[str, Any]) -> None:
        """Serve ``config`` from now on (the running Alertmanager keeps its alerts)."""
        self.config.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.request("POST", "/-/reload")


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    """The project's alertmanager.yml served on a free loopback port, one for the module (the
    tests send alerts of their own labels); always stopped after."""
    tmp_path = tmp_path_factory.mktemp("alertmanager")
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
    am = Alertmanager(url=f"http://127.0.0.1:{port}", log=log, config=config)
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


Labels = tuple[tuple[str, str], ...]


def alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": name},
    }


def key(labels: dict[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def moved(target: dict[str, Any], label: str) -> dict[str, Any]:
    """``target`` with ``label`` of another value (or set where it was absent): the same alert
    about another host, GPU, run, job or cluster, or another alert on the same GPU."""
    labels = dict(target["labels"])
    labels[label] = f"{labels[label]}-other" if label in labels else "other"
    return {**target, "labels": labels}


# The label keys that tell targets apart (contract/labels.py's keys, spelt out here as the
# specification: a change to them must change this test too).
TARGET = ("cluster", "host", "job", "instance")
GPU = (*TARGET, "gpu", "uuid")


@dataclass(frozen=True)
class Silences:
    """While ``source`` fires, ``target`` is held back by it, and no copy of ``target`` that
    differs from it in one label of ``apart`` is held back by anything."""

    source: dict[str, Any]
    target: dict[str, Any]
    apart: tuple[str, ...]


def gpu_alert(name: str, severity: str, instance: str, gpu: str, **labels: str) -> dict[str, Any]:
    """A GPU alert as the rules label it: job, instance, gpu and uuid."""
    return alert(
        name, severity, job="mirrorwatch", instance=instance, gpu=gpu, uuid=f"GPU-{gpu}", **labels
    )


NVML_DOWN = alert("MirrorwatchNvmlUnavailable", "critical", job="mirrorwatch", instance="h1:9848")
EXPORTER_DOWN = alert("MirrorwatchExporterDown", "warning", job="mirrorwatch", instance="h4:9848")
GPU_LOST = gpu_alert("GpuLost", "critical", "h2:9848", "1")
THERMAL = gpu_alert("GpuThermalThrottling", "warning", "h5:9848", "0")
CRITICAL_XID = gpu_alert("GpuXidError", "critical", "h3:9848", "0", xid="79")
CRITICAL_MEMORY = gpu_alert("GpuMemoryNearlyFull", "critical", "h6:9848", "0", run="r", scope="run")
# Behind per-host agents (deploy/fleet/) every host's exporter may be `localhost:9848`:
# `cluster` and `host` (an agent's external labels) tell them apart. Alertmanager takes a label
# missing from both alerts as equal (inhibit.go, `equal`), so single-host alerts work as before.
AGENT_DOWN = alert(
    "MirrorwatchExporterDown",
    "warning",
    cluster="lab",
    host="gpu-a",
    job="mirrorwatch",
    instance="localhost:9848",
)

SILENCES = [
    # NVML unavailable / exporter down on a host silence that host's GPU alerts...
    Silences(
        NVML_DOWN, alert("GpuMissing", "critical", job="mirrorwatch", instance="h1:9848"), TARGET
    ),
    Silences(NVML_DOWN, gpu_alert("GpuThermalThrottling", "warning", "h1:9848", "0"), TARGET),
    Silences(EXPORTER_DOWN, gpu_alert("GpuPcieLinkDegraded", "warning", "h4:9848", "0"), TARGET),
    Silences(
        AGENT_DOWN,
        gpu_alert(
            "GpuThermalThrottling", "warning", "localhost:9848", "0", cluster="lab", host="gpu-a"
        ),
        TARGET,
    ),
    # ...a lost GPU silences its other alerts, the run's imbalance naming it included...
    Silences(GPU_LOST, gpu_alert("GpuPcieLinkDegraded", "warning", "h2:9848", "1"), GPU),
    Silences(
        GPU_LOST,
        gpu_alert("GpuUtilizationImbalance", "warning", "h2:9848", "1", run="r", scope="run"),
        GPU,
    ),
    # ...a GPU throttling for heat silences its early warning of heat...
    Silences(THERMAL, gpu_alert("GpuTemperatureNearSlowdown", "warning", "h5:9848", "0"), GPU),
    # ...a run hung in a collective silences its stall, on every host of the run...
    Silences(
        alert(
            "TrainingHungInCollective",
            "critical",
            job="mirrorwatch",
            instance="h7:9848",
            run="hung",
            gpu="1",
            uuid="GPU-1",
        ),
        alert(
            "TrainingStalled",
            "critical",
            job="mirrorwatch",
            instance="h8:9848",
            run="hung",
            worker="0",
        ),
        ("run",),
    ),
    # ...and a critical alert silences the warning of the same alert on the same GPU or run.
    Silences(
        CRITICAL_XID,
        gpu_alert("GpuXidError", "warning", "h3:9848", "0", xid="13"),
        ("alertname", *GPU),
    ),
    Silences(
        CRITICAL_MEMORY,
        gpu_alert("GpuMemoryNearlyFull", "warning", "h6:9848", "0", run="r", scope="run"),
        ("alertname", *GPU, "run"),
    ),
]
# Firing beside the sources, and held back by nothing: the pages an inhibition must not hide.
UNTOUCHED = [
    # A training alert of a host whose NVML is down: the run's own telemetry still arrives.
    alert(
        "TrainingStalled", "critical", job="mirrorwatch", instance="h1:9848", run="r", worker="0"
    ),
    # Heat does not hide what else holds the GPU back, nor what it costs the run.
    gpu_alert("GpuHardwareSlowdown", "critical", "h5:9848", "0", reason="hw_slowdown"),
    gpu_alert("GpuPowerCapped", "info", "h5:9848", "0"),
    gpu_alert("GpuUtilizationImbalance", "warning", "h5:9848", "0", run="r", scope="run"),
    gpu_alert("GpuTemperatureSpread", "warning", "h5:9848", "0"),
]


def expected() -> dict[Labels, list[Labels]]:
    """Every alert the test sends -> the alerts that must hold it back."""
    want: dict[Labels, list[Labels]] = {}
    for case in SILENCES:
        want[key(case.source["labels"])] = []
        want[key(case.target["labels"])] = [key(case.source["labels"])]
        for label in case.apart:
            want[key(moved(case.target, label)["labels"])] = []
    for other in UNTOUCHED:
        want[key(other["labels"])] = []
    return want


def sent_alerts() -> list[dict[str, Any]]:
    by_labels = {key(a["labels"]): a for case in SILENCES for a in (case.source, case.target)}
    by_labels |= {
        key(moved(c.target, label)["labels"]): moved(c.target, label)
        for c in SILENCES
        for label in c.apart
    }
    by_labels |= {key(a["labels"]): a for a in UNTOUCHED}
    assert len(by_labels) == len(expected())
    return list(by_labels.values())


def differences(am: Alertmanager, want: dict[Labels, list[Labels]]) -> dict[Labels, str]:
    """The sent alerts whose inhibitions differ from ``want`` now -> what Alertmanager says."""
    got = {key(a["labels"]): a for a in am.request("GET", "/api/v2/alerts")}
    fingerprints = {labels: a["fingerprint"] for labels, a in got.items()}
    found = {}
    for labels, sources in want.items():
        if labels not in got:
            found[labels] = "not received"
            continue
        status = got[labels]["status"]
        wanted = sorted(fingerprints.get(source, "?") for source in sources)
        state = "suppressed" if sources else "active"
        if sorted(status["inhibitedBy"]) != wanted or status["state"] != state:
            found[labels] = f"{status['state']} by {status['inhibitedBy']}"
    return found


def agreed(am: Alertmanager, want: dict[Labels, list[Labels]]) -> list[str]:
    """The differences once there are none, or when time runs out."""
    deadline = time.monotonic() + INHIBIT_TIMEOUT_S
    while (found := differences(am, want)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"{dict(labels)}: {what}" for labels, what in found.items()]


def held_back_wrongly(am: Alertmanager, want: dict[Labels, list[Labels]]) -> list[Labels]:
    """The alerts that nothing should hold back and something does, once there are some, or
    when time runs out. A reloaded Alertmanager refills its inhibitor's cache in the
    background, so a missing inhibition may be a moment's; one too many never is."""
    deadline = time.monotonic() + INHIBIT_TIMEOUT_S
    while True:
        wrong = [labels for labels in differences(am, want) if not want[labels]]
        if wrong or time.monotonic() > deadline:
            return wrong
        time.sleep(0.1)


def mutants(config: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The config with one key left out of one inhibit rule's `equal`."""
    for i, rule in enumerate(config["inhibit_rules"]):
        for label in rule["equal"]:
            mutant = copy.deepcopy(config)
            mutant["inhibit_rules"][i]["equal"].remove(label)
            yield f"inhibit rule {i} without {label!r} in equal", mutant


def test_live_alertmanager_inhibits_exactly_as_documented(alertmanager: Alertmanager) -> None:
    alertmanager.request("POST", "/api/v2/alerts", sent_alerts())
    assert agreed(alertmanager, expected()) == []


def test_every_key_of_every_generated_inhibition_is_needed(alertmanager: Alertmanager) -> None:
    """A mutant of the served config (one key left out of one rule's `equal`) silences some
    near miss above on a live Alertmanager: every key of every rule keeps something apart."""
    alertmanager.request("POST", "/api/v2/alerts", sent_alerts())
    want = expected()
    served = yaml.safe_load(alertmanager.config.read_text(encoding="utf-8"))
    survivors = []
    try:
        for name, mutant in mutants(served):
            alertmanager.reload(mutant)
            if not held_back_wrongly(alertmanager, want):
                survivors.append(name)
    finally:
        alertmanager.reload(served)
    assert survivors == []
    assert agreed(alertmanager, want) == []


def test_live_alertmanager_groups_hosts_behind_agents_apart(alertmanager: Alertmanager) -> None:
    """One notification group per host, even where every host's exporter is `localhost:9848`."""
    sent = [
        alert("GpuNvlinkErrors", "warning", instance="localhost:9848", host=h, gpu="0")
        for h in ("gpu-a", "gpu-b")
    ]
    alertmanager.request("POST", "/api/v2/alerts", sent)
    deadline = time.monotonic() + INHIBIT_TIMEOUT_S
    while True:
        groups = [
            g
            for g in alertmanager.request("GET", "/api/v2/alerts/groups")
            if g["labels"]["alertname"] == "GpuNvlinkErrors"
        ]
        hosts = sorted(g["labels"].get("host", "") for g in groups)
        if hosts == ["gpu-a", "gpu-b"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert hosts == ["gpu-a", "gpu-b"], groups
    assert all(len(g["alerts"]) == 1 for g in groups), groups
