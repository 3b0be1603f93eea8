"""`make demo`: exporter, trainer, Prometheus, Alertmanager and a receiver on loopback.

    python -m demo [--scenario NAME] [--exporter HOST:PORT] [--prometheus HOST:PORT]
                   [--alertmanager HOST:PORT] [--receiver HOST:PORT] [--no-train]

The exporter serves a simulated dual-GPU host, `mirrorwatch-train` trains a small CNN on two
CPU replicas mapped onto its GPUs, Prometheus (Debian's binary) scrapes it with the project's
rules (alerts/mirrorwatch.rules.yml, the file the compose stack mounts), Alertmanager routes
with alerts/alertmanager.yml, and every notification is printed here as it arrives. Ctrl-C
stops everything this started; state and logs stay in build/demo/.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from demo.receiver import Notification, Receiver, format_notification
from demo.stack import (
    ALERTMANAGER_CONFIG,
    REPO,
    RULES,
    Address,
    Process,
    Processes,
    StackError,
    alertmanager_config,
    alertmanager_process,
    exporter_process,
    find_binary,
    parse_duration,
    port_is_free,
    prometheus_config,
    prometheus_process,
    route_timers,
    thresholds,
    trainer_process,
)

# Demo-only: scrape and evaluate every 5 s rather than the stack's 15 s, so the dashboards and
# Prometheus's alert page move quickly, and alerts are re-sent to Alertmanager as often, so the
# first Watchdog shows within seconds. The rules, and so every `for:`, are the production ones.
DEMO_INTERVAL = "5s"

# What each built-in scenario is meant to raise (docs/scenarios.md).
EXPECTED_ALERTS: dict[str, tuple[str, ...]] = {
    "healthy": (),
    "imbalance": ("GpuUtilizationImbalance",),
    "thermal-throttle": (
        "GpuThermalThrottling",
        "GpuTemperatureNearSlowdown",
        "GpuTemperatureSpread",
    ),
    "pcie-degraded": ("GpuPcieLinkDegraded",),
    "nvlink-errors": ("GpuNvlinkErrors", "GpuNvlinkDown"),
    "xid": ("GpuXidError", "GpuEccUncorrectable"),
    "gpu-lost": ("GpuLost",),
}
SEVERITY = {"GpuXidError": "critical", "GpuEccUncorrectable": "critical", "GpuLost": "critical"}


def _address(text: str) -> Address:
    try:
        return Address.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make demo",
        description="The whole mirrorwatch pipeline on loopback, without Docker or a GPU.",
    )
    p.add_argument("--scenario", default="healthy", help="built-in scenario or scenario file")
    p.add_argument("--exporter", type=_address, default=Address("127.0.0.1", 9848))
    p.add_argument("--prometheus", type=_address, default=Address("127.0.0.1", 9090))
    p.add_argument("--alertmanager", type=_address, default=Address("127.0.0.1", 9093))
    p.add_argument("--receiver", type=_address, default=Address("127.0.0.1", 9095))
    p.add_argument("--no-train", action="store_true", help="no training run, hardware only")
    p.add_argument("--workdir", type=Path, default=REPO / "build" / "demo")
    return p


def expectation(scenario: str) -> str:
    """When the scenario's alerts should arrive, from thresholds.yml and alertmanager.yml."""
    names = EXPECTED_ALERTS.get(scenario)
    if names is None:
        return "a custom scenario: its alerts arrive after their `for:` and group_wait."
    if not names:
        return "nothing but Watchdog (every minute, on /watchdog)."
    settings = thresholds()
    routes = alertmanager_config()
    parts = []
    for name in names:
        hold = parse_duration(str(settings[name]["for"]))
        severity = SEVERITY.get(name, "warning")
        wait = route_timers(routes, {"alertname": name, "severity": severity})["group_wait"]
        parts.append(
            f"{name} after ~{(hold + wait) / 60:.1f} min (for: {hold:.0f} s + {wait:.0f} s)"
        )
    return "; ".join(parts) + " -- plus the scenario's own start (docs/scenarios.md)."


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    prometheus_bin = find_binary("prometheus")
    alertmanager_bin = find_binary("prometheus-alertmanager", "alertmanager")
    if prometheus_bin is None or alertmanager_bin is None:
        print(
            "demo: Prometheus and Alertmanager are needed: `make tools` installs Debian's "
            "prometheus and prometheus-alertmanager",
            file=sys.stderr,
        )
        return 2
    addresses = {
        "exporter": args.exporter,
        "prometheus": args.prometheus,
        "alertmanager": args.alertmanager,
        "receiver": args.receiver,
    }
    busy = [f"{name} {address}" for name, address in addresses.items() if not port_is_free(address)]
    if busy:
        print(
            f"demo: port in use: {', '.join(busy)}; stop what holds it or pick another, "
            "e.g. make demo PROMETHEUS_LISTEN=127.0.0.1:19090",
            file=sys.stderr,
        )
        return 2

    workdir: Path = args.workdir
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Ctrl-C, kill and a closing terminal all stop the demo through the cleanup. SIGINT is set
    # explicitly: a shell that starts the demo in the background leaves it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)

    def show(notification: Notification) -> None:
        print(format_notification(notification), flush=True)

    receiver = Receiver(args.receiver.host, args.receiver.port, on_notification=show)
    try:
        with receiver, Processes() as processes:
            try:
                core = start(args, workdir, processes, prometheus_bin, alertmanager_bin, receiver)
                trainer = next((p for p in processes.started if p.name == "trainer"), None)
                return watch(core, trainer)
            except KeyboardInterrupt:
                print("\ndemo: stopping ...", flush=True)
                return 0
            finally:
                # A second Ctrl-C must not cut the cleanup short and leave processes behind.
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_IGN)
    except (StackError, OSError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    finally:
        print("demo: stopped everything it started.", flush=True)


def start(
    args: argparse.Namespace,
    workdir: Path,
    processes: Processes,
    prometheus_bin: str,
    alertmanager_bin: str,
    receiver: Receiver,
) -> list[Process]:
    exporter = processes.start(
        exporter_process(workdir, args.scenario, args.exporter), f"{args.exporter.url}/readyz"
    )
    run = f"demo-{Path(args.scenario).stem}"
    if not args.no_train:
        processes.start(trainer_process(workdir, args.exporter.url, run))
    alertmanager = processes.start(
        alertmanager_process(
            alertmanager_bin,
            workdir,
            args.alertmanager,
            alertmanager_config(receiver_url=receiver.url),
        ),
        f"{args.alertmanager.url}/-/ready",
    )
    config = prometheus_config(
        exporter=args.exporter,
        alertmanager=args.alertmanager,
        prometheus=args.prometheus,
        rule_files=[RULES],
        scrape_interval=DEMO_INTERVAL,
        evaluation_interval=DEMO_INTERVAL,
    )
    prometheus = processes.start(
        prometheus_process(
            prometheus_bin, workdir, args.prometheus, config, resend_delay=DEMO_INTERVAL
        ),
        f"{args.prometheus.url}/-/ready",
    )
    training = "off (--no-train)" if args.no_train else f"run {run} on 2 CPU replicas"
    rules = RULES.relative_to(REPO)
    routes = ALERTMANAGER_CONFIG.relative_to(REPO)
    rows = [
        ("exporter", f"{args.exporter.url}/", "metrics at /metrics, GPUs at /api/v1/gpus"),
        ("training", training, f"log: {workdir / 'trainer.log'}"),
        ("prometheus", f"{args.prometheus.url}/alerts", f"rules: {rules}, every {DEMO_INTERVAL}"),
        ("alertmanager", f"{args.alertmanager.url}/", f"routes: {routes}"),
        ("receiver", f"{receiver.url}/", "notifications are printed below as they arrive"),
    ]
    table = "\n".join(f"  {name:13} {where:34} {what}" for name, where, what in rows)
    print(
        f"\nmirrorwatch demo: scenario {args.scenario} on a simulated dual-GPU host\n{table}\n"
        f"Expect: Watchdog at once; {expectation(args.scenario)}\n"
        f"Logs and data: {workdir}. Ctrl-C stops everything.\n",
        flush=True,
    )
    return [exporter, alertmanager, prometheus]


def watch(core: list[Process], trainer: Process | None) -> int:
    """Run until Ctrl-C; a service that dies ends the demo, a trainer that finishes does not."""
    trainer_reported = False
    while True:
        time.sleep(1.0)
        for process in core:
            if not process.alive():
                print(
                    f"demo: {process.name} exited with code {process.returncode}:\n"
                    + process.log_tail(),
                    file=sys.stderr,
                )
                return 1
        if trainer is not None and not trainer.alive() and not trainer_reported:
            trainer_reported = True
            print(
                f"{time.strftime('%H:%M:%S')} training stopped (exit code {trainer.returncode}); "
                f"see {trainer.log_path}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
