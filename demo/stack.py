"""The mirrorwatch pipeline as local processes: configuration files and process lifetimes.

Shared by `make demo` (demo/cli.py) and the end-to-end tests (tests/e2e/): the exporter on a
simulated host, `mirrorwatch-train` on CPU replicas, and Debian's Prometheus and Alertmanager
started from the project's own configuration (prometheus/prometheus.yml, alerts/) with only
the addresses, and where asked the intervals, replaced.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS_CONFIG = REPO / "prometheus" / "prometheus.yml"
RULES = REPO / "alerts" / "mirrorwatch.rules.yml"
THRESHOLDS = REPO / "alerts" / "thresholds.yml"
ALERTMANAGER_CONFIG = REPO / "alerts" / "alertmanager.yml"
TEMPLATE = REPO / "alerts" / "mirrorwatch.tmpl"
# Where alerts/alertmanager.yml sends every notification: the demo receiver's default address.
DEMO_RECEIVER_URL = "http://127.0.0.1:9095"
# The scrape job that prometheus/prometheus.yml points at the exporter (the rules want it).
EXPORTER_JOB = "mirrorwatch"

_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 7 * 86400,
    "y": 365 * 86400,
}


class StackError(RuntimeError):
    """A part of the stack could not start; the message names it and why."""


@dataclass(frozen=True)
class Address:
    """A TCP listen address, HOST:PORT."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT such as 127.0.0.1:9090, got {text!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self}"


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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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


# --- durations ----------------------------------------------------------------------------------


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration: 90s, 5m, 1h30m, 250ms, 0s."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """A Prometheus duration for ``seconds``, in whole milliseconds below a second."""
    if seconds <= 0:
        return "0s"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


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
        timeout = parse_duration(str(glob.get("scrape_timeout", "10s")))
        glob["scrape_timeout"] = format_duration(min(timeout, parse_duration(scrape_interval)))
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
        if group_wait is not None and parse_duration(str(route.get("group_wait", "0s"))) > 0:
            route["group_wait"] = group_wait
        if group_interval is not None and "group_interval" in route:
            route["group_interval"] = group_interval
    return config


def thresholds() -> dict[str, Any]:
    """alerts/thresholds.yml as parsed YAML."""
    data: dict[str, Any] = load_yaml(THRESHOLDS)
    return data


def route_timers(config: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, float]:
    """group_wait, group_interval and repeat_interval (seconds) of the route an alert with
    ``labels`` takes: the first matching child route, its unset timers inherited."""
    route = config["route"]
    timers = {
        key: parse_duration(str(route.get(key, default)))
        for key, default in (
            ("group_wait", "30s"),
            ("group_interval", "5m"),
            ("repeat_interval", "4h"),
        )
    }
    for child in route.get("routes", []):
        if all(_matches(matcher, labels) for matcher in child.get("matchers", [])):
            for key in timers:
                if key in child:
                    timers[key] = parse_duration(str(child[key]))
            break
    return timers


def _matches(matcher: str, labels: Mapping[str, str]) -> bool:
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


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    """Status and body of a GET; an HTTP error status is an answer, not an exception."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def get_json(url: str, timeout: float = 5) -> Any:
    status, body = http_get(url, timeout)
    if status != 200:
        raise StackError(f"GET {url}: HTTP {status}: {body[:200]!r}")
    return json.loads(body)


class Process:
    """A child process in its own session, logging to a file; stop() ends it and its children.

    Its own session keeps a terminal's Ctrl-C away from it: the demo stops its children itself,
    in order, and waits for each.
    """

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        if self.alive():
            raise StackError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def _signal_group(self, signum: int) -> None:
        if self._popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signum)

    def kill(self) -> None:
        """SIGKILL at once, as a crash would end it."""
        if self._popen is None:
            return
        self._signal_group(signal.SIGKILL)
        self._popen.wait()

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; reaps it either way."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._popen.wait()
        # Anything it left in its session (there should be nothing) goes too.
        self._signal_group(signal.SIGKILL)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, url: str, timeout: float = 60) -> None:
        """Wait until ``url`` answers 200; StackError (with the log's end) if the process
        exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            if not self.alive():
                raise StackError(
                    f"{self.name} exited with code {self.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            try:
                status, body = http_get(url, timeout=2)
                if status == 200:
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except (OSError, urllib.error.URLError) as error:
                last = str(error)
            if time.monotonic() > deadline:
                raise StackError(
                    f"{self.name} not ready at {url} after {timeout:.0f} s ({last}):\n"
                    + self.log_tail()
                )
            time.sleep(0.1)


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
) -> Process:
    """mirrorwatch-train on two CPU replicas standing in for the exporter's first two GPUs.

    It runs at low priority (nice 10) so that the exporter and Prometheus stay responsive on a
    small machine, and trains until stopped unless ``steps`` x ``epochs`` runs out first.
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


class Processes:
    """Started processes, stopped in reverse order on close (also on an exception)."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self.started: list[Process] = []

    def start(self, process: Process, ready_url: str | None = None, timeout: float = 60) -> Process:
        # Registered first: an interrupt between the two must still stop the process.
        self._stack.callback(process.stop)
        self.started.append(process)
        process.start()
        if ready_url is not None:
            process.wait_ready(ready_url, timeout)
        return process

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
