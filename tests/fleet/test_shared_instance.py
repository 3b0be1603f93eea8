"""Two hosts behind Prometheus agents that share `instance`: alerts, report and dashboards
each speak of one host, by its name.

On every real host the agent scrapes its own exporter as `localhost:9848`, and the shipped
agent config (deploy/fleet/prometheus-agent/prometheus.yml) keeps that address as `instance`:
only the external label `host` tells the hosts apart at the central store. Here both exporters
run on loopback ports, so each agent's target is relabelled to that one address, as it reads on
a real host. gpu-a is healthy, gpu-b throttles GPU 1 for heat; a central Prometheus receives
both and evaluates the rules (every `for:` divided by 30, as in tests/e2e).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.processes import Process, Processes, StackError
from demo.stack import write_yaml
from mirrorwatch.alerts.thresholds import load_thresholds
from mirrorwatch.contract.labels import GPU_KEY
from mirrorwatch.contract.metrics import GPU_INFO
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.report import hardware
from mirrorwatch.report.cli import main as report_main
from mirrorwatch.report.evidence import Ask
from mirrorwatch.report.prometheus import Prometheus
from mirrorwatch.report.scope import Gpu, Scope
from tests.dashboards.queries import expand, load_dashboards, targets
from tests.e2e.drill import build_fast_rules
from tests.fleet.fleet import (
    binary,
    central_prometheus_process,
    instant,
    loopback,
    prometheus_agent_config,
    start_simulated_exporter,
    wait_for,
)

SHARED_INSTANCE = "localhost:9848"
CLUSTER = "lab"
HOSTS = {"gpu-a": "healthy", "gpu-b": "thermal-throttle"}
SCRAPE_INTERVAL = "1s"
# GPU 1 of gpu-b passes its slowdown temperature ~23 s after start, then `for:` (10 s).
ALERT_DEADLINE_SECONDS = 120


@dataclass
class Central:
    prometheus: Address
    processes: Processes


def agent_process(
    workdir: Path, host: str, exporter: Address, write_url: str, listen: Address
) -> Process:
    config = prometheus_agent_config(exporter, [write_url], SCRAPE_INTERVAL)
    config["scrape_configs"][0]["relabel_configs"] = [
        {"target_label": "instance", "replacement": SHARED_INSTANCE}
    ]
    path = write_yaml(workdir / f"{host}-agent.yml", config)
    args = [
        binary("prometheus"),
        "--enable-feature=agent,expand-external-labels",
        f"--config.file={path}",
        f"--storage.agent.path={workdir / (host + '-agent-data')}",
        f"--web.listen-address={listen}",
        "--log.level=warn",
    ]
    env = {"PATH": "/usr/bin:/bin", "MIRRORWATCH_HOST": host, "MIRRORWATCH_CLUSTER": CLUSTER}
    return Process(f"{host}-agent", args, workdir / f"{host}-agent.log", env)


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Central]:
    workdir = tmp_path_factory.mktemp("shared-instance")
    rules = build_fast_rules(workdir)
    prometheus = loopback()
    with Processes() as processes:
        try:
            processes.start(
                central_prometheus_process(workdir, rules.rules, prometheus, "1s"),
                f"{prometheus.url}/-/ready",
            )
            for host, scenario in HOSTS.items():
                exporter, _ = start_simulated_exporter(
                    processes, workdir, f"{host}-exporter", scenario
                )
                listen = loopback()
                processes.start(
                    agent_process(
                        workdir, host, exporter, f"{prometheus.url}/api/v1/write", listen
                    ),
                    f"{listen.url}/-/ready",
                )
        except StackError as error:
            pytest.fail(str(error), pytrace=False)
        wait_for(
            prometheus.url,
            f'count by (host) (mirrorwatch_up{{instance="{SHARED_INSTANCE}"}})',
            60,
            "both hosts at the central store",
            least=len(HOSTS),
        )
        yield Central(prometheus, processes)


def firing(central: Central, name: str) -> list[dict[str, Any]]:
    """The central Prometheus's firing ``name`` alerts, once there is one."""
    deadline = time.monotonic() + ALERT_DEADLINE_SECONDS
    while True:
        alerts = httpx.get(f"{central.prometheus.url}/api/v1/alerts", timeout=10).json()
        found = [
            a
            for a in alerts["data"]["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"
        ]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(1)


def temperature(central: Central, host: str) -> float:
    (series,) = instant(
        central.prometheus.url, f'mirrorwatch_gpu_temperature_celsius{{host="{host}",gpu="1"}}'
    )
    return float(series["value"][1])


def test_the_thermal_alert_names_its_host_and_quotes_that_hosts_temperature(
    central: Central,
) -> None:
    alerts = firing(central, "GpuThermalThrottling")
    assert [a["labels"]["host"] for a in alerts] == ["gpu-b"], alerts
    (alert,) = alerts
    assert alert["labels"]["instance"] == SHARED_INSTANCE
    description = alert["annotations"]["description"]
    assert description.startswith(f"GPU 1 ({alert['labels']['uuid']}) on gpu-b, "), description
    assert SHARED_INSTANCE not in description + alert["annotations"]["summary"]
    match = re.search(r"now at ([0-9.]+) °C", description)
    assert match, description
    quoted = float(match[1])
    hot, cool = temperature(central, "gpu-b"), temperature(central, "gpu-a")
    assert abs(quoted - hot) < 2, (quoted, hot)
    assert hot - cool > 10, "the two hosts must differ for this test to tell them apart"


def report(central: Central, out: Path, *host: str) -> int:
    return report_main(
        [
            "--prometheus",
            central.prometheus.url,
            "--instance",
            SHARED_INSTANCE,
            *(("--host", host[0]) if host else ()),
            "--since",
            "5m",
            "--out",
            str(out),
        ]
    )


def test_the_report_refuses_a_shared_instance_without_a_host(
    central: Central, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report(central, tmp_path) == 2
    error = capsys.readouterr().err.strip()
    assert "shared by hosts gpu-a, gpu-b" in error, error
    assert "add --host NAME" in error, error
    assert len(error.splitlines()) == 1


def test_the_report_of_one_host_holds_only_that_hosts_findings(
    central: Central, tmp_path: Path
) -> None:
    firing(central, "GpuThermalThrottling")  # gpu-b has throttled long enough to show
    kinds = {}
    for host in HOSTS:
        assert report(central, tmp_path / host, host) == 0
        findings = json.loads((tmp_path / host / "findings.json").read_text())["findings"]
        kinds[host] = {f["kind"] for f in findings}
    assert "thermal_throttling" in kinds["gpu-b"]
    assert "thermal_throttling" not in kinds["gpu-a"], kinds


def test_a_report_over_both_hosts_keeps_their_gpu_1s_apart(central: Central) -> None:
    """The scope of a run with a worker on each host holds both hosts' GPUs, whose indexes and
    instance are the same: the report keys them by the target key, so the thermal finding is
    gpu-b's GPU 1 alone, every figure of it gpu-b's."""
    firing(central, "GpuThermalThrottling")  # gpu-b has throttled long enough to show
    prometheus = Prometheus(central.prometheus.url)
    end = time.time()
    info = prometheus.instant(
        f'max by ({GPU_KEY}, name) ({GPU_INFO}{{instance="{SHARED_INSTANCE}"}})', end
    )
    gpus = tuple(
        Gpu(*(s.label(k) for k in ("instance", "gpu", "uuid", "name", "cluster", "host", "job")))
        for s in info
    )
    assert sorted((g.host, g.gpu) for g in gpus) == [
        (host, index) for host in sorted(HOSTS) for index in ("0", "1")
    ]
    ask = Ask(prometheus, Scope(end - 60, end, 1, None, (SHARED_INSTANCE,), gpus))
    findings = hardware.throttling(ask, load_thresholds())
    thermal = [f for f in findings if f.kind == "thermal_throttling"]
    assert [(f.labels["host"], f.gpu) for f in thermal] == [("gpu-b", "1")], findings
    assert {figure.labels["host"] for figure in thermal[0].figures} == {"gpu-b"}


def test_the_gpu_host_dashboard_shows_the_chosen_host_only(central: Central) -> None:
    (dashboard,) = (d for d in load_dashboards().values() if d["title"] == "GPU host")
    chosen = {
        "job": ".+",
        "host": "gpu-b",
        "instance": SHARED_INSTANCE,
        "gpu": ".+",
        "run": ".*",
        "datasource": "prometheus",
        "__rate_interval": "4s",
        "__rate_interval_ms": "4000",
    }
    hosts_seen: set[str] = set()
    for target in targets(dashboard):
        for series in instant(central.prometheus.url, expand(target.expr, chosen)):
            if "host" in series["metric"]:
                hosts_seen.add(series["metric"]["host"])
    assert hosts_seen == {"gpu-b"}
