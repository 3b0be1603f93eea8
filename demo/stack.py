"""The mirrorwatch pipeline as local processes: their configuration files and command lines.

Shared by `make demo` (demo/cli.py) and the end-to-end tests (tests/e2e/): the exporter on a
simulated host, `mirrorwatch-train` on CPU replicas, and Debian's Prometheus and Alertmanager
started from the project's own configuration (prometheus/prometheus.yml, alerts/) with only
the addresses, and where asked the intervals, replaced.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from demo.processes import Process, StackError, get_json
from mirrorwatch.alerts.thresholds import load_thresholds
from mirrorwatch.contract.vocabulary import Address, format_duration, parse_prometheus_duration

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS_CONFIG = REPO / "prometheus" / "prometheus.yml"
RULES = REPO / "alerts" / "mirrorwatch.rules.yml"
THRESHOLDS = REPO / "alerts" / "thresholds.yml"
ALERTMANAGER_CONFIG = REPO / "alerts" / "alertmanager.yml"
TEMPLATE = REPO / "alerts" / "mirrorwatch.tmpl"
# The checkout's runbook: the demo's terminal and reports link it by path, which opens offline.
RUNBOOK = REPO / "docs" / "runbook.md"
# Where alerts/alertmanager.yml sends every notification: the demo receiver's default address.
DEMO_RECEIVER_URL = "http://127.0.0.1:9095"
# The scrape job that prometheus/prometheus.yml points at the exporter (the rules want it).
EXPORTER_JOB = "mirrorwatch"


def port_is_free(address: Address) -> bool:
    """Whether a server could listen on ``address`` now (bound as servers bind, SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address.host, address.port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def find_binary(*names: str) -> str | None:
    """The first of ``names`` on PATH (Debian names Alertmanager prometheus-alertmanager)."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def project_script(name: str) -> str | None:
    """A console script of this project: beside the running interpreter (the venv), or on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


# --- configuration ------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def write_yaml(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def prometheus_config(
    *,
    exporter: Address,
    alertmanager: Address,
    prometheus: Address,
    rule_files: Sequence[Path] = (RULES,),
    scrape_interval: str | None = None,
    evaluation_interval: str | None = None,
) -> dict[str, Any]:
    """prometheus/prometheus.yml with local addresses, rule paths and, if given, intervals.

    Each scrape job keeps its name and settings; its targets become the local process it
    stands for. A job this function does not know is an error, so the demo never silently
    differs from the compose stack.
    """
    config: dict[str, Any] = load_yaml(PROMETHEUS_CONFIG)
    glob = config.setdefault("global", {})
    if scrape_interval is not None:
        glob["scrape_interval"] = scrape_interval
        # A scrape must end before the next one starts: Prometheus refuses the config otherwise.
        timeout = parse_prometheus_duration(str(glob.get("scrape_timeout", "10s")))
        glob["scrape_timeout"] = format_duration(
            min(timeout, parse_prometheus_duration(scrape_interval))
        )
    if evaluation_interval is not None:
        glob["evaluation_interval"] = evaluation_interval
    config["rule_files"] = [str(path) for path in rule_files]
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [str(alertmanager)]}]}]}
    targets = {EXPORTER_JOB: exporter, "prometheus": prometheus, "alertmanager": alertmanager}
    for job in config["scrape_configs"]:
        name = job["job_name"]
        if name not in targets:
            raise ValueError(f"{PROMETHEUS_CONFIG}: scrape job {name!r} has no local stand-in")
        job["static_configs"] = [{"targets": [str(targets[name])]}]
    return config


def _routes(route: dict[str, Any]) -> Iterable[dict[str, Any]]:
    yield route
    for child in route.get("routes", []):
        yield from _routes(child)


def alertmanager_config(
    *,
    receiver_url: str = DEMO_RECEIVER_URL,
    source: Path = ALERTMANAGER_CONFIG,
    group_wait: str | None = None,
    group_interval: str | None = None,
) -> dict[str, Any]:
    """alerts/alertmanager.yml with its webhooks sent to ``receiver_url`` instead of
    127.0.0.1:9095 and its template found from anywhere.

    ``group_wait`` replaces every non-zero group_wait and ``group_interval`` every
    group_interval: the tests' short timers. Routes, matchers and inhibitions stay as they are.
    """
    config: dict[str, Any] = load_yaml(source)
    config["templates"] = [str(source.parent / name) for name in config.get("templates", [])]
    for receiver in config.get("receivers", []):
        for webhook in receiver.get("webhook_configs", []):
            url = str(webhook["url"])
            if url.startswith(DEMO_RECEIVER_URL):
                webhook["url"] = receiver_url.rstrip("/") + url.removeprefix(DEMO_RECEIVER_URL)
    for route in _routes(config["route"]):
        if (
            group_wait is not None
            and parse_prometheus_duration(str(route.get("group_wait", "0s"))) > 0
        ):
            route["group_wait"] = group_wait
        if group_interval is not None and "group_interval" in route:
            route["group_interval"] = group_interval
    return config


def thresholds() -> dict[str, Any]:
    """alerts/thresholds.yml as plain data, validated by the alerts' own model."""
    return load_thresholds().model_dump(by_alias=True)


def route_timers(config: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, float]:
    """group_wait, group_interval and repeat_interval (seconds) of the route an alert with
    ``labels`` takes: the first matching child route, its unset timers inherited."""
    route = config["route"]
    timers = {
        key: parse_prometheus_duration(str(route.get(key, default)))
        for key, default in (
            ("group_wait", "30s"),
            ("group_interval", "5m"),
            ("repeat_interval", "4h"),
        )
    }
    for child in route.get("routes", []):
        if all(matches(matcher, labels) for matcher in child.get("matchers", [])):
            for key in timers:
                if key in child:
                    timers[key] = parse_prometheus_duration(str(child[key]))
            break
    return timers


def matches(matcher: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy one Alertmanager matcher (`name="v"`, `=~`, `!=`, `!~`)."""
    found = re.fullmatch(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*', matcher)
    if found is None:
        raise ValueError(f"cannot read matcher {matcher!r}")
    name, op, value = found.groups()
    actual = labels.get(name, "")
    if op == "=":
        return actual == value
    if op == "!=":
        return actual != value
    hit = re.fullmatch(value, actual) is not None
    return hit if op == "=~" else not hit


# --- processes ----------------------------------------------------------------------------------


def exporter_process(
    workdir: Path, scenario: str, listen: Address, extra_args: Sequence[str] = ()
) -> Process:
    exporter = project_script("mirrorwatch-exporter")
    if exporter is None:
        raise StackError("mirrorwatch-exporter is not installed: run `make install`")
    args = [exporter, "--simulate", scenario, "--listen", str(listen), "--log-format", "text"]
    return Process("exporter", [*args, *extra_args], workdir / "exporter.log")


def trainer_process(
    workdir: Path,
    exporter_url: str,
    run: str,
    *,
    batch_size: int = 64,
    interval: float = 5.0,
    steps: int = 1000,
    epochs: int = 100_000,
    baseline_steps: int = 0,
) -> Process:
    """mirrorwatch-train on two CPU replicas standing in for the exporter's first two GPUs.

    It runs at low priority (nice 10) so that the exporter and Prometheus stay responsive on a
    small machine, and trains until stopped unless ``steps`` x ``epochs`` runs out first. With
    ``baseline_steps`` it first trains that many on one replica, so that the run publishes its
    speed-up and scaling efficiency.
    """
    trainer = project_script("mirrorwatch-train")
    if trainer is None:
        raise StackError("mirrorwatch-train is not installed: run `make install`")
    gpus = get_json(f"{exporter_url}/api/v1/gpus")["gpus"]
    bus_ids = ",".join(gpu["pci_bus_id"] for gpu in gpus[:2])
    env = {**os.environ, "MIRRORWATCH_REPLICA_PCI_BUS_IDS": bus_ids, "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [
        *(["nice", "-n", "10"] if shutil.which("nice") else []),
        trainer,
        "--cpu-replicas=2",
        "--model=cnn",
        f"--batch-size={batch_size}",
        f"--steps={steps}",
        f"--epochs={epochs}",
        f"--url={exporter_url}",
        f"--run={run}",
        f"--interval={interval:g}",
        f"--baseline-steps={baseline_steps}",
        "--verbose=0",
    ]
    return Process("trainer", args, workdir / "trainer.log", env)


def prometheus_process(
    binary: str,
    workdir: Path,
    listen: Address,
    config: object,
    resend_delay: str | None = None,
) -> Process:
    """Prometheus on ``config``. ``resend_delay`` shortens --rules.alert.resend-delay (1m): an
    alert that fires before Prometheus has found Alertmanager (Watchdog, at once) is dropped
    and only sent again after it."""
    path = write_yaml(workdir / "prometheus.yml", config)
    resend = [f"--rules.alert.resend-delay={resend_delay}"] if resend_delay else []
    args = [
        binary,
        f"--config.file={path}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address={listen}",
        f"--web.external-url={listen.url}/",
        *resend,
        "--log.level=warn",
    ]
    return Process("prometheus", args, workdir / "prometheus.log")


def alertmanager_process(binary: str, workdir: Path, listen: Address, config: object) -> Process:
    path = write_yaml(workdir / "alertmanager.yml", config)
    args = [
        binary,
        f"--config.file={path}",
        f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address={listen}",
        f"--web.external-url={listen.url}/",
        # A single Alertmanager: no gossip listener on 0.0.0.0:9094.
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    return Process("alertmanager", args, workdir / "alertmanager.log")
