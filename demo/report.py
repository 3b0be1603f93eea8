"""`make report`: the run report of the demo that is running now, from its own Prometheus.

    python -m demo.report [--workdir build/demo] [--run RUN] [--prometheus URL]
                          [--since DURATION] [--out DIR]

The run, the scenario's exporter and Prometheus come from the running demo's state file
(demo/state.py), so `make demo SCENARIO=imbalance PROMETHEUS_LISTEN=...` needs no repeating;
each flag given replaces what the state says. The range defaults to the demo's start until now.
Each call writes a folder of its own beside the run's (RUN-TIME-report-HHMMSS): a second call,
or the demo's own report on Ctrl-C, never overwrites it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from demo.stack import REPO, RUNBOOK
from demo.state import StateError, fresh_folder, running_demo
from mirrorwatch.report import cli as report_cli

PROG = "make report"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=REPO / "build" / "demo", help="the demo's")
    p.add_argument("--run", help="a run id (default: the running demo's)")
    p.add_argument("--prometheus", metavar="URL", help="default: the running demo's")
    p.add_argument("--since", metavar="DURATION", help="default: since the demo started")
    p.add_argument("--out", metavar="DIR", help="default: a new folder beside the run's report")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        state = running_demo(args.workdir)
    except StateError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    run = args.run or state.run
    who = ["--run", run] if run else ["--instance", state.instance]
    # Whole seconds back to the start, never less than a minute: Prometheus needs a scrape.
    since = args.since or f"{max(60, int(time.time() - state.started_at) + 1)}s"
    if args.out is None:
        run_dir = Path(state.report_dir)
        stamp = time.strftime("%H%M%S")
        out = str(fresh_folder(run_dir.with_name(f"{run_dir.name}-report-{stamp}")))
    else:
        out = args.out
    return report_cli.main(
        [
            "--prometheus",
            args.prometheus or state.prometheus,
            *who,
            "--since",
            since,
            "--out",
            out,
            "--runbook",
            str(RUNBOOK),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
