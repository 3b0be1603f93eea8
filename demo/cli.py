"""`make demo`: exporter, trainer, Prometheus, Alertmanager and a receiver on loopback.

    python -m demo [--scenario NAME] [--exporter HOST:PORT] [--prometheus HOST:PORT]
                   [--alertmanager HOST:PORT] [--receiver HOST:PORT] [--no-train] [--check]

The Makefile passes its variables (SCENARIO=, EXPORTER_LISTEN=, ...) as these flags, so a
mistake is said by the variable's name (demo/usage.py); ``--check`` checks them and exits, as
`make demo` does before it installs anything.

The exporter serves a simulated dual-GPU host, `mirrorwatch-train` trains a small CNN on two
CPU replicas mapped onto its GPUs (after mirrorwatch-doctor's pre-flight checklist of that
host), Prometheus (Debian's binary) scrapes it with the project's
rules (alerts/mirrorwatch.rules.yml, the file the compose stack mounts), Alertmanager routes
with alerts/alertmanager.yml, and every notification is printed here as it arrives. Ctrl-C
writes the run report (build/demo/reports/RUN-TIME/, one folder per run, made and named in the
banner at the start, never deleted by a later demo) and stops everything this started; logs
and data stay in build/demo/stack/ until the next demo starts. While it runs,
build/demo/state.json says what it is (`make report`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from demo.expect import ScalingWatch, expectation
from demo.links import prometheus_pages
from demo.notices import TerminalNotices
from demo.processes import Process, Processes, StackError
from demo.receiver import Notification, Receiver, address_argument
from demo.stack import (
    ALERTMANAGER_CONFIG,
    REPO,
    RULES,
    RUNBOOK,
    alertmanager_config,
    alertmanager_process,
    exporter_process,
    find_binary,
    port_is_free,
    prometheus_config,
    prometheus_process,
    trainer_process,
)
from demo.state import DemoState, StateError, forget, fresh_folder, running_demo
from demo.terminal import say
from demo.usage import DEMO_VARIABLES, MakeParser, MakeUsageError, refuse
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.doctor.cli import diagnose
from mirrorwatch.doctor.cli import parser as doctor_parser
from mirrorwatch.doctor.output import checklist
from mirrorwatch.exporter.simulate.scenario import ScenarioError, load_scenario
from mirrorwatch.report.cli import top_finding, write_report
from mirrorwatch.report.prometheus import PrometheusError
from mirrorwatch.report.scope import ScopeError

# Demo-only: scrape and evaluate every 5 s rather than the stack's 15 s, so the dashboards and
# Prometheus's alert page move quickly, and alerts are re-sent to Alertmanager as often, so the
# first Watchdog shows within seconds. The rules, and so every `for:`, are the production ones.
DEMO_INTERVAL = "5s"
# Steps on one CPU replica before the run, so the report and the Scaling panels show a speed-up:
# a few seconds on a small machine, enough steps past the first (tracing) one to time.
BASELINE_STEPS = 20


PROG = "make demo"


def parser() -> argparse.ArgumentParser:
    p = MakeParser(
        variables=DEMO_VARIABLES,
        prog=PROG,
        description="The whole mirrorwatch pipeline on loopback, without Docker or a GPU.",
    )
    p.add_argument("--scenario", default="healthy", help="built-in scenario or scenario file")
    p.add_argument("--exporter", type=address_argument, default=Address("127.0.0.1", 9848))
    p.add_argument("--prometheus", type=address_argument, default=Address("127.0.0.1", 9090))
    p.add_argument("--alertmanager", type=address_argument, default=Address("127.0.0.1", 9093))
    p.add_argument("--receiver", type=address_argument, default=Address("127.0.0.1", 9095))
    p.add_argument("--no-train", action="store_true", help="no training run, hardware only")
    p.add_argument("--workdir", type=Path, default=REPO / "build" / "demo")
    p.add_argument(
        "--check", action="store_true", help="check the arguments and exit (before installing)"
    )
    return p


def preflight(scenario: str) -> None:
    """The pre-flight a user runs before training (mirrorwatch-doctor), on the simulated host."""
    try:
        outcome = diagnose(doctor_parser().parse_args(["--simulate", scenario]))
    except ScenarioError:
        return  # the exporter says what is wrong with the file, and exits
    # Only what did not pass, and the count: the whole list is one command away.
    say(
        f"\npre-flight: mirrorwatch-doctor --simulate {scenario} (exit {outcome.exit_code}; "
        f"every check: .venv/bin/mirrorwatch-doctor --simulate {scenario})\n"
        + checklist(outcome, colour=sys.stdout.isatty(), only=("warn", "fail"))
    )


def demo_run(scenario: str) -> str:
    """The run id the demo's trainer reports (`make report` finds it by the same rule)."""
    return f"demo-{Path(scenario).stem}"


@dataclass(frozen=True)
class Layout:
    """Where one demo keeps things: the stack's logs and data are replaced by the next demo,
    each run's report stays."""

    workdir: Path
    began: float

    @property
    def stack(self) -> Path:
        return self.workdir / "stack"

    def report(self, scenario: str) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.began))
        return self.workdir / "reports" / f"{demo_run(scenario)}-{stamp}"


def report_on(args: argparse.Namespace, out: Path, since: float) -> None:
    """Write the run report of what the demo ran, while its Prometheus still answers. It never
    depends on stdout: a reader that went away with Ctrl-C (`| tee`) only loses the line."""
    run, instance = (None, str(args.exporter)) if args.no_train else (demo_run(args.scenario), None)
    try:
        page = write_report(
            args.prometheus.url, run, instance, since, time.time(), out, runbook=RUNBOOK
        )
    except (PrometheusError, ScopeError, OSError) as error:
        say(f"demo: no run report: {str(error).splitlines()[0]}")
        return
    say(f"demo: run report: {page}")
    findings = json.loads((page.parent / "findings.json").read_text(encoding="utf-8"))
    say(f"demo: top finding: {top_finding(findings['findings'][0])}")


def check_scenario(scenario: str) -> str | None:
    """Why ``scenario`` cannot run (one line), or None: said before anything is touched."""
    try:
        load_scenario(scenario)
    except ScenarioError as error:
        return str(error).splitlines()[0]
    return None


def busy_ports(args: argparse.Namespace) -> list[str]:
    """Each address of the demo that something already holds, as the user would set it."""
    return [
        f"{DEMO_VARIABLES[f'--{name}']}={address}"
        for name in ("exporter", "prometheus", "alertmanager", "receiver")
        if not port_is_free(address := getattr(args, name))
    ]


def refusal(args: argparse.Namespace) -> str | None:
    """Why the demo cannot start with ``args`` (one line), or None. Said before anything is
    touched, and by the Makefile before it installs anything (--check)."""
    problem = check_scenario(args.scenario)
    if problem is not None:
        return f"{DEMO_VARIABLES['--scenario']}: {problem}"
    try:
        other = running_demo(args.workdir)
    except StateError:
        pass  # none running, or a stale file: this demo replaces it
    else:
        return (
            f"a demo is already running (pid {other.pid}): stop it with Ctrl-C in its terminal "
            f"(or kill {other.pid}); `make report` reports on it meanwhile"
        )
    busy = busy_ports(args)
    if busy:
        variable, address = busy[0].split("=")
        other_port = Address.parse(address).port % 10000 + 10000
        return (
            f"port in use: {', '.join(busy)}; stop what holds it or pick another, "
            f"e.g. make demo {variable}=127.0.0.1:{other_port}"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except MakeUsageError as error:
        return refuse(PROG, str(error))
    # Everything is checked before anything is touched: a bad start keeps the last run's files.
    problem = refusal(args)
    if problem is not None:
        return refuse(PROG, problem)
    if args.check:
        return 0
    prometheus_bin = find_binary("prometheus")
    alertmanager_bin = find_binary("prometheus-alertmanager", "alertmanager")
    if prometheus_bin is None or alertmanager_bin is None:
        return refuse(
            PROG,
            "Prometheus and Alertmanager are needed: `make tools` installs Debian's "
            "prometheus and prometheus-alertmanager",
        )
    workdir: Path = args.workdir
    layout = Layout(workdir, time.time())
    shutil.rmtree(layout.stack, ignore_errors=True)
    layout.stack.mkdir(parents=True)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Ctrl-C, kill and a closing terminal all stop the demo through the cleanup. SIGINT is set
    # explicitly: a shell that starts the demo in the background leaves it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)

    notices = TerminalNotices(RUNBOOK)

    def show(notification: Notification) -> None:
        text = notices.text(notification)
        if text is not None:
            say(text)

    receiver = Receiver(args.receiver.host, args.receiver.port, on_notification=show)
    # Made now, so the banner can say where the report will be: a piped demo's reader dies with
    # the same Ctrl-C that writes it (`make demo | tee demo.log`), and `make last-report` finds it.
    report_dir = fresh_folder(layout.report(args.scenario))
    run = run_of(args)
    try:
        with receiver, Processes() as processes:
            try:
                core = start(
                    args,
                    layout.stack,
                    processes,
                    (prometheus_bin, alertmanager_bin),
                    receiver,
                    report_dir,
                )
                DemoState(
                    pid=os.getpid(),
                    scenario=args.scenario,
                    run=run,
                    instance=str(args.exporter),
                    prometheus=args.prometheus.url,
                    report_dir=str(report_dir),
                    started_at=layout.began,
                ).write(workdir)
                trainer = next((p for p in processes.started if p.name == "trainer"), None)
                scaling = ScalingWatch(args.prometheus.url, None if trainer is None else run)
                return watch(core, trainer, scaling)
            except KeyboardInterrupt:
                # A second Ctrl-C must not cut the report or the cleanup short.
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_IGN)
                say("\ndemo: writing the run report ...")
                report_on(args, report_dir, layout.began)
                say("demo: stopping ...")
                return 0
            finally:
                # A second Ctrl-C must not cut the cleanup short and leave processes behind.
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_IGN)
                forget(workdir)
    except (StackError, OSError) as error:
        say(f"demo: {error}", error=True)
        return 1
    finally:
        with contextlib.suppress(OSError):
            report_dir.rmdir()  # only when empty: no report was written (a failed start)
        say("demo: stopped everything it started.")


def run_of(args: argparse.Namespace) -> str | None:
    """The demo's run id, or None without training (the report is then of the exporter)."""
    return None if args.no_train else demo_run(args.scenario)


def start(
    args: argparse.Namespace,
    workdir: Path,
    processes: Processes,
    binaries: tuple[str, str],
    receiver: Receiver,
    report_dir: Path,
) -> list[Process]:
    prometheus_bin, alertmanager_bin = binaries
    exporter = processes.start(
        exporter_process(workdir, args.scenario, args.exporter), f"{args.exporter.url}/readyz"
    )
    run = demo_run(args.scenario)
    if not args.no_train:
        preflight(args.scenario)
        processes.start(
            trainer_process(workdir, args.exporter.url, run, baseline_steps=BASELINE_STEPS)
        )
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
    # The speed-up is of CPU replicas sharing this machine's cores, not of two GPUs: said once.
    measured = (
        ""
        if args.no_train
        else f"Speed-up: {BASELINE_STEPS} steps on 1 CPU replica first, then both; it measures "
        "this machine's CPUs, not GPUs.\n"
    )
    rules = RULES.relative_to(REPO)
    routes = ALERTMANAGER_CONFIG.relative_to(REPO)
    # The pages as this Prometheus serves them (Debian 12's only under /classic/).
    pages = prometheus_pages(args.prometheus.url)
    rows = [
        ("exporter", f"{args.exporter.url}/", "metrics at /metrics, GPUs at /api/v1/gpus"),
        ("training", training, f"log: {workdir / 'trainer.log'}"),
        ("prometheus", pages["alerts"], f"rules: {rules}, every {DEMO_INTERVAL}"),
        ("alertmanager", f"{args.alertmanager.url}/", f"routes: {routes}"),
        ("receiver", f"{receiver.url}/", "notifications are printed below as they arrive"),
    ]
    table = "\n".join(f"  {name:13} {where:34} {what}" for name, where, what in rows)
    say(
        f"\nmirrorwatch demo: scenario {args.scenario} on a simulated dual-GPU host\n{table}\n"
        f"Expect: Watchdog at once; {expectation(args.scenario, training=not args.no_train)}\n"
        f"{measured}"
        "No Grafana here (its dashboards come with `docker compose up -d`): watch this terminal, "
        f"{pages['alerts']}, {pages['graph']}, {args.alertmanager.url}/ and the run report.\n"
        f"Logs and data: {workdir}.\n"
        f"Ctrl-C writes the run report to {report_dir / 'report.html'} and stops everything; "
        "`make report` writes one now, `make last-report` says where the newest is.\n"
    )
    return [exporter, alertmanager, prometheus]


def watch(core: list[Process], trainer: Process | None, scaling: ScalingWatch) -> int:
    """Run until Ctrl-C; a service that dies ends the demo, a trainer that finishes does not.
    Once the run's speed-up is measured, it says whether TrainingScalingEfficiencyLow comes."""
    trainer_reported = False
    while True:
        time.sleep(1.0)
        if (verdict := scaling.poll()) is not None:
            say(f"{time.strftime('%H:%M:%S')} {verdict}")
        for process in core:
            if not process.alive():
                say(
                    f"demo: {process.name} exited with code {process.returncode}:\n"
                    + process.log_tail(),
                    error=True,
                )
                return 1
        if trainer is not None and not trainer.alive() and not trainer_reported:
            trainer_reported = True
            say(
                f"{time.strftime('%H:%M:%S')} training stopped (exit code {trainer.returncode}); "
                f"see {trainer.log_path}"
            )


if __name__ == "__main__":
    sys.exit(main())
