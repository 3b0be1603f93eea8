"""mirrorwatch-report: query Prometheus for one run (or host and range), write the report.

    mirrorwatch-report --prometheus URL (--run RUN | --instance HOST:PORT)
                       [--since 1h | --start T --end T] --out DIR [--runbook FILE]

Writes DIR/findings.json and DIR/report.html. Bad flags, an unreachable Prometheus, an unknown
run or an empty range: one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from mirrorwatch.alerts.thresholds import ThresholdsError, load_thresholds
from mirrorwatch.exporter.vocabulary import (
    RUN_RULE,
    is_prometheus_duration,
    is_run_id,
    parse_prometheus_duration,
)
from mirrorwatch.report.analysis import analyse
from mirrorwatch.report.charts import Charts
from mirrorwatch.report.evidence import Ask
from mirrorwatch.report.page import render
from mirrorwatch.report.prometheus import Prometheus, PrometheusError
from mirrorwatch.report.scope import ScopeError, find_scope, parse_time

PROG = "mirrorwatch-report"
_INSTANCE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


class UsageError(ValueError):
    """A flag is missing or wrong; the message names it."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _run(text: str) -> str:
    if not is_run_id(text):
        raise argparse.ArgumentTypeError(f"expected {RUN_RULE}, got {text!r}")
    return text


def _instance(text: str) -> str:
    if not _INSTANCE.match(text):
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT as Prometheus labels it, got {text!r}"
        )
    return text


def _prometheus_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if "://" not in text:
        raise argparse.ArgumentTypeError(f"add http:// (or https://): http://{text}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"expected an http:// or https:// URL such as http://127.0.0.1:9090, got {text!r}"
        )
    return text


def _runbook_file(text: str) -> Path:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return Path(text)


def _since(text: str) -> float:
    if not is_prometheus_duration(text) or parse_prometheus_duration(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30m, 1h or 2d, got {text!r}")
    return parse_prometheus_duration(text)


def _time(text: str) -> float:
    try:
        return parse_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, got {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Why a training run was slower than it should have been.")
    p.add_argument(
        "--prometheus",
        required=True,
        type=_prometheus_url,
        metavar="URL",
        help="Prometheus-compatible URL, e.g. http://127.0.0.1:9090",
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--run", type=_run, help="the run id the trainer reported")
    who.add_argument("--instance", type=_instance, metavar="HOST:PORT", help="an exporter")
    p.add_argument("--since", type=_since, metavar="DURATION", help="range ending now (default 1h)")
    p.add_argument("--start", type=_time, metavar="T", help="range start: unix seconds or RFC 3339")
    p.add_argument("--end", type=_time, metavar="T", help="range end: unix seconds or RFC 3339")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="where to write")
    p.add_argument(
        "--runbook",
        type=_runbook_file,
        metavar="FILE",
        help="a local copy of docs/runbook.md to link, relative to the page, so that it opens "
        "offline (default: thresholds.yml's runbook_url)",
    )
    return p


def _range(args: argparse.Namespace) -> tuple[float, float]:
    if args.since is not None and (args.start is not None or args.end is not None):
        raise UsageError("argument --since: not allowed with --start/--end")
    if (args.start is None) != (args.end is None):
        raise UsageError(
            f"argument {'--end' if args.end is None else '--start'}: needed with the other"
        )
    if args.start is not None:
        if args.end <= args.start:
            raise UsageError("argument --end: must be after --start")
        return float(args.start), float(args.end)
    now = time.time()
    return now - (args.since or 3600.0), now


def write_report(
    url: str,
    run: str | None,
    instance: str | None,
    start: float,
    end: float,
    out: Path,
    *,
    runbook: Path | None = None,
) -> Path:
    """Ask Prometheus and write DIR/findings.json and DIR/report.html; the page's path.

    ``runbook``: a local runbook file, linked relative to the page so it opens offline (the
    demo's checkout has docs/runbook.md); without it the page links thresholds.yml's
    runbook_url.
    """
    thresholds = load_thresholds()
    prometheus = Prometheus(url)
    prometheus.check()
    scope = find_scope(prometheus, run, instance, start, end)
    analysis = analyse(Ask(prometheus, scope), thresholds)
    charts = Charts(prometheus, scope, thresholds).all()
    out.mkdir(parents=True, exist_ok=True)
    findings = out / "findings.json"
    findings.write_text(json.dumps(analysis.as_json(), indent=2) + "\n", encoding="utf-8")
    page = out / "report.html"
    runbook_url = (
        thresholds.runbook_url
        if runbook is None
        else os.path.relpath(runbook.resolve(), out.resolve()).replace(os.sep, "/")
    )
    page.write_text(render(analysis, charts, url, runbook_url), encoding="utf-8")
    return page


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        start, end = _range(args)
        page = write_report(
            args.prometheus, args.run, args.instance, start, end, args.out, runbook=args.runbook
        )
    except UsageError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    except (PrometheusError, ScopeError, ThresholdsError) as error:
        print(f"{PROG}: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{PROG}: cannot write the report: {error}", file=sys.stderr)
        return 2
    findings = json.loads((page.parent / "findings.json").read_text(encoding="utf-8"))["findings"]
    print(f"{page}  (top finding: {findings[0]['kind']}: {findings[0]['summary']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
