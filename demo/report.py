"""`make report`: the run report of the demo that is running now, from its own Prometheus.

    python -m demo.report [--workdir build/demo] [--run RUN] [--prometheus HOST:PORT]
                          [--since DURATION] [--out DIR] [--check]

The run, the scenario's exporter and Prometheus come from the running demo's state file
(demo/state.py), so `make demo SCENARIO=imbalance PROMETHEUS_LISTEN=...` needs no repeating;
each flag given replaces what the state says. The range defaults to the demo's start until now.
Each call writes a folder of its own beside the run's (RUN-TIME-report-HHMMSS): a second call,
or the demo's own report on Ctrl-C, never overwrites it. A mistake names the make variable
(RUN=, SINCE=, REPORT_OUT=, PROMETHEUS_LISTEN=); ``--check`` only checks, as the Makefile does
before it installs anything.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from demo.receiver import address_argument
from demo.stack import REPO, RUNBOOK
from demo.state import StateError, fresh_folder, running_demo
from demo.usage import REPORT_VARIABLES, MakeParser, MakeUsageError, refuse, variable_words
from mirrorwatch.report import cli as report_cli

PROG = "make report"


def parser() -> argparse.ArgumentParser:
    p = MakeParser(variables=REPORT_VARIABLES, prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=REPO / "build" / "demo", help="the demo's")
    p.add_argument("--run", help="a run id (default: the running demo's)")
    p.add_argument(
        "--prometheus",
        type=address_argument,
        metavar="HOST:PORT",
        help="default: the running demo's",
    )
    p.add_argument("--since", metavar="DURATION", help="default: since the demo started")
    p.add_argument("--out", metavar="DIR", help="default: a new folder beside the run's report")
    p.add_argument("--check", action="store_true", help="check the arguments and exit")
    return p


def _checked(args: argparse.Namespace) -> None:
    """mirrorwatch-report's own parser on what the user gave (a stand-in for the rest): a bad
    RUN= or SINCE= is said as typed, before the running demo is looked for."""
    given = ["--run", args.run or "demo", "--since", args.since or "1h", "--out", args.out or "."]
    try:
        report_cli.parser().parse_args(["--prometheus", "http://127.0.0.1:9090", *given])
    except report_cli.UsageError as error:
        raise MakeUsageError(variable_words(str(error), REPORT_VARIABLES)) from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        _checked(args)
    except MakeUsageError as error:
        return refuse(PROG, str(error))
    try:
        state = running_demo(args.workdir)
    except StateError as error:
        return refuse(PROG, str(error))
    run = args.run or state.run
    who = ["--run", run] if run else ["--instance", state.instance]
    # Whole seconds back to the start, never less than a minute: Prometheus needs a scrape.
    since = args.since or f"{max(60, int(time.time() - state.started_at) + 1)}s"
    prometheus = state.prometheus if args.prometheus is None else args.prometheus.url
    common = ["--prometheus", prometheus, *who, "--since", since, "--runbook", str(RUNBOOK)]
    if args.check:
        return 0
    if args.out is None:
        run_dir = Path(state.report_dir)
        stamp = time.strftime("%H%M%S")
        out = str(fresh_folder(run_dir.with_name(f"{run_dir.name}-report-{stamp}")))
    else:
        out = args.out
    return report_cli.main([*common, "--out", out])


if __name__ == "__main__":
    sys.exit(main())
