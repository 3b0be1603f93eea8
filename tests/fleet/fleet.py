"""A fleet on loopback: simulated GPU hosts, their agents, the central store and rule evaluator.

Every program is a real Debian binary: `vmagent` and `prometheus --enable-feature=agent` on the
hosts, `victoria-metrics` single-node as the central store, `vmalert` evaluating the generated
rules, `prometheus-alertmanager`. Their configuration is the shipped one (deploy/fleet/) with
only addresses and, for speed, intervals replaced, the way demo/stack.py starts the single-host
stack from prometheus/prometheus.yml. A central Prometheus with the remote-write receiver takes
the same samples and evaluates the same rules, to hold MetricsQL's answers against PromQL's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from demo.processes import Process, Processes, StackError
from demo.stack import REPO, exporter_process, find_binary, load_yaml, write_yaml
from mirrorwatch.contract.vocabulary import Address
from tests.ports import free_port

DEPLOY = REPO / "deploy" / "fleet"
VMAGENT_CONFIG = DEPLOY / "vmagent" / "scrape.yml"
PROMETHEUS_AGENT_CONFIG = DEPLOY / "prometheus-agent" / "prometheus.yml"
CENTRAL_COMPOSE = DEPLOY / "central.compose.yml"
HOST_COMPOSE = DEPLOY / "host.compose.yml"
EXPORTER_JOB = "mirrorwatch"


def binary(name: str) -> str:
    """A Debian binary; a missing one fails the test (`make tools` installs it)."""
    path = find_binary(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make tools` (Debian packages victoria-metrics, "
            "prometheus, prometheus-alertmanager)",
            pytrace=False,
        )
    return path


# --- configuration: the shipped files, addresses replaced -------------------------------------


def _scrape_exporter_only(config: dict[str, Any], source: Path, exporter: Address) -> None:
    jobs = config["scrape_configs"]
    names = [job["job_name"] for job in jobs]
    if names != [EXPORTER_JOB]:
        raise ValueError(f"{source}: expected only the {EXPORTER_JOB} scrape job, got {names}")
    jobs[0]["static_configs"] = [{"targets": [str(exporter)]}]


def _intervals(config: dict[str, Any], scrape_interval: str) -> None:
    config["global"]["scrape_interval"] = scrape_interval
    config["global"]["scrape_timeout"] = scrape_interval


def vmagent_config(exporter: Address, scrape_interval: str) -> dict[str, Any]:
    """deploy/fleet/vmagent/scrape.yml scraping ``exporter``; %{...} placeholders kept."""
    config: dict[str, Any] = load_yaml(VMAGENT_CONFIG)
    _intervals(config, scrape_interval)
    _scrape_exporter_only(config, VMAGENT_CONFIG, exporter)
    return config


def prometheus_agent_config(
    exporter: Address, write_urls: Sequence[str], scrape_interval: str
) -> dict[str, Any]:
    """deploy/fleet/prometheus-agent/prometheus.yml scraping ``exporter``, writing to
    ``write_urls`` with the shipped remote_write settings."""
    config: dict[str, Any] = load_yaml(PROMETHEUS_AGENT_CONFIG)
    _intervals(config, scrape_interval)
    _scrape_exporter_only(config, PROMETHEUS_AGENT_CONFIG, exporter)
    (shipped,) = config["remote_write"]
    # Flush at once: the test's `for:` are seconds, production's minutes.
    config["remote_write"] = [
        {**shipped, "url": url, "queue_config": {"batch_send_deadline": "1s"}} for url in write_urls
    ]
    return config


def compose_command(service: str) -> list[str]:
    """The command of ``service`` in deploy/fleet/central.compose.yml, as written."""
    compose = yaml.safe_load(CENTRAL_COMPOSE.read_text(encoding="utf-8"))
    return [str(arg) for arg in compose["services"][service]["command"]]


def with_flags(command: Sequence[str], replace: Mapping[str, str | None]) -> list[str]:
    """``command``'s -name=value flags with those in ``replace`` set (None: dropped). Every
    flag replaced must be in the command: the test must track the shipped file."""
    missing = set(replace) - {arg.partition("=")[0] for arg in command}
    if missing:
        raise ValueError(f"{CENTRAL_COMPOSE}: no {sorted(missing)} in {list(command)}")
    kept = [arg for arg in command if arg.partition("=")[0] not in replace]
    return kept + [f"{name}={value}" for name, value in replace.items() if value is not None]


# --- processes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """One simulated GPU host: its scenario, how its agent runs, and the labels it writes."""

    name: str
    scenario: str
    agent: str  # "vmagent" or "prometheus-agent"


def victoria_metrics_process(workdir: Path, listen: Address) -> Process:
    args = with_flags(
        compose_command("victoria-metrics"),
        {
            "-storageDataPath": str(workdir / "vm-data"),
            "-retentionPeriod": "1d",
            "-httpListenAddr": str(listen),
        },
    )
    # -search.latencyOffset (30s by default) hides the newest samples from queries so that
    # late ones do not change answers; here every `for:` is seconds, so 1 s.
    args += ["-search.latencyOffset=1s", "-loggerLevel=WARN"]
    return Process("victoria-metrics", [binary("victoria-metrics"), *args], workdir / "vm.log")


def vmagent_process(
    workdir: Path,
    host: Host,
    cluster: str,
    exporter: Address,
    write_urls: Sequence[str],
    listen: Address,
    scrape_interval: str,
) -> Process:
    config = write_yaml(
        workdir / f"{host.name}-vmagent.yml", vmagent_config(exporter, scrape_interval)
    )
    args = [
        binary("vmagent"),
        f"-promscrape.config={config}",
        *(f"-remoteWrite.url={url}" for url in write_urls),
        f"-remoteWrite.tmpDataPath={workdir / (host.name + '-vmagent-data')}",
        "-remoteWrite.flushInterval=1s",
        f"-httpListenAddr={listen}",
        "-loggerLevel=WARN",
    ]
    env = {"PATH": "/usr/bin:/bin", "MIRRORWATCH_HOST": host.name, "MIRRORWATCH_CLUSTER": cluster}
    return Process(f"{host.name}-vmagent", args, workdir / f"{host.name}-vmagent.log", env)


def prometheus_agent_process(
    workdir: Path,
    host: Host,
    cluster: str,
    exporter: Address,
    write_urls: Sequence[str],
    listen: Address,
    scrape_interval: str,
) -> Process:
    config = write_yaml(
        workdir / f"{host.name}-prometheus-agent.yml",
        prometheus_agent_config(exporter, write_urls, scrape_interval),
    )
    args = [
        binary("prometheus"),
        "--enable-feature=agent,expand-external-labels",
        f"--config.file={config}",
        f"--storage.agent.path={workdir / (host.name + '-agent-data')}",
        f"--web.listen-address={listen}",
        "--log.level=warn",
    ]
    env = {"PATH": "/usr/bin:/bin", "MIRRORWATCH_HOST": host.name, "MIRRORWATCH_CLUSTER": cluster}
    return Process(f"{host.name}-prometheus-agent", args, workdir / f"{host.name}-agent.log", env)


def vmalert_process(
    workdir: Path,
    rules: Path,
    store: Address,
    alertmanager: Address,
    listen: Address,
    evaluation_interval: str,
) -> Process:
    args = with_flags(
        compose_command("vmalert"),
        {
            "-rule": str(rules),
            "-datasource.url": store.url,
            "-remoteWrite.url": store.url,
            "-remoteRead.url": store.url,
            "-notifier.url": alertmanager.url,
            "-evaluationInterval": evaluation_interval,
            "-external.url": f"{listen.url}/",
            "-httpListenAddr": str(listen),
        },
    )
    # Recording-rule results feed the alerts: send them within the test's 1 s evaluations
    # (5 s by default).
    args += ["-remoteWrite.flushInterval=1s", "-loggerLevel=WARN"]
    return Process("vmalert", [binary("vmalert"), *args], workdir / "vmalert.log")


def central_prometheus_process(
    workdir: Path, rules: Path, listen: Address, evaluation_interval: str
) -> Process:
    """A Prometheus that only receives remote writes and evaluates the rules (no alerting):
    PromQL's answers on the same samples."""
    config = write_yaml(
        workdir / "central-prometheus.yml",
        {"global": {"evaluation_interval": evaluation_interval}, "rule_files": [str(rules)]},
    )
    args = [
        binary("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'central-prometheus-data'}",
        f"--web.listen-address={listen}",
        "--web.enable-remote-write-receiver",
        "--log.level=warn",
    ]
    return Process("central-prometheus", args, workdir / "central-prometheus.log")


def loopback() -> Address:
    return Address("127.0.0.1", free_port())


def start_simulated_exporter(
    processes: Processes, workdir: Path, name: str, scenario: str, args: Sequence[str] = ()
) -> tuple[Address, Process]:
    """A simulated exporter on a free loopback port, started and ready. The port is chosen just
    before the start, and the process must still run once /readyz answers: where other jobs
    take free ports too, another server may have taken it (and answered) meanwhile."""
    for _ in range(5):
        address = loopback()
        process = exporter_process(workdir / name, scenario, address, args)
        process.name = name
        processes.start(process, f"{address.url}/readyz")
        time.sleep(0.5)
        if process.alive():
            return address, process
    raise StackError(f"{name} could not keep a free port:\n{process.log_tail()}")


# --- asking the stores ------------------------------------------------------------------------


def instant(
    url: str, expr: str, at: float | None = None, timeout: float = 20
) -> list[dict[str, Any]]:
    """An instant query through the Prometheus query API (VictoriaMetrics answers it too)."""
    params: dict[str, str] = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    # VictoriaMetrics caches recent answers unless told not to.
    params["nocache"] = "1"
    response = httpx.get(f"{url}/api/v1/query", params=params, timeout=timeout)
    body = response.json()
    assert response.status_code == 200, f"{url}: {expr}: {body}"
    assert body["status"] == "success", f"{url}: {expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_for(
    url: str, expr: str, timeout: float, what: str, least: int = 1
) -> list[dict[str, Any]]:
    """The answer to ``expr`` once it has at least ``least`` series."""
    deadline = time.monotonic() + timeout
    while True:
        result = instant(url, expr)
        if len(result) >= least:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: {expr} has {len(result)} series after {timeout:.0f} s")
        time.sleep(0.5)


def labels(series: Mapping[str, Any], drop: Sequence[str] = ("__name__",)) -> dict[str, str]:
    return {k: str(v) for k, v in series["metric"].items() if k not in drop}
