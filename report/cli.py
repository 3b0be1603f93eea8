"""mirrorwatch-report: query Prometheus for one run (or host and range), write the report.

    mirrorwatch-report --prometheus URL (--run RUN | --instance HOST:PORT [--host NAME])
                       [--since 1h | --start T --end T] --out DIR
                       [--compare RUN] [--compare-start T --compare-end T] [--runbook FILE]

Writes DIR/findings.json and DIR/report.html. Bad flags, an unreachable Prometheus, an unknown
run or an empty range (of either run): one line on stderr and exit code 2.
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
from dataclasses import dataclass
from pathlib import Path

from mirrorwatch.alerts.thresholds import Thresholds, ThresholdsError, load_thresholds
from mirrorwatch.contract.vocabulary import (
    RUN_RULE,
    is_prometheus_duration,
    is_run_id,
    parse_prometheus_duration,
)
from mirrorwatch.report.analysis import Analysis, analyse
from mirrorwatch.report.charts import Charts
from mirrorwatch.report.comparison import Comparison, check_comparable, side_by_side
from mirrorwatch.report.comparison_page import render_comparison
from mirrorwatch.report.evidence import Ask
from mirrorwatch.report.page import render, subject
from mirrorwatch.report.prometheus import Prometheus, PrometheusError
from mirrorwatch.report.scope import Scope, ScopeError, find_scope, parse_time
from mirrorwatch.report.words import percent

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


def _host(text: str) -> str:
    # A label value quoted into PromQL: no quote or backslash can end the string.
    if not text or any(c in text for c in '"\\\n'):
        raise argparse.ArgumentTypeError(f"expected a host label value, got {text!r}")
    return text


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
    p.add_argument(
        "--host",
        type=_host,
        metavar="NAME",
        help="with --instance: the agents' host label, where hosts share an instance",
    )
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
    p.add_argument("--compare", type=_run, metavar="RUN", help="a second run, set beside the first")
    p.add_argument(
        "--compare-start",
        type=_time,
        metavar="T",
        help="the second range's start (default: the first's)",
    )
    p.add_argument("--compare-end", type=_time, metavar="T", help="the second range's end")
    return p


@dataclass(frozen=True)
class Second:
    """What to set beside the first: a run (None: the first's run or instance) over a range."""

    run: str | None
    start: float
    end: float


def _second(args: argparse.Namespace, start: float, end: float) -> Second | None:
    ranged = args.compare_start is not None or args.compare_end is not None
    if args.compare is None and not ranged:
        return None
    if args.compare is not None and args.instance is not None:
        raise UsageError(
            "argument --compare: needs --run (an instance's second range is "
            "--compare-start and --compare-end)"
        )
    if (args.compare_start is None) != (args.compare_end is None):
        missing = "--compare-end" if args.compare_end is None else "--compare-start"
        raise UsageError(f"argument {missing}: needed with the other")
    if ranged:
        if args.compare_end <= args.compare_start:
            raise UsageError("argument --compare-end: must be after --compare-start")
        return Second(args.compare, float(args.compare_start), float(args.compare_end))
    return Second(args.compare, start, end)


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


def _analysed(
    prometheus: Prometheus,
    run: str | None,
    instance: str | None,
    start: float,
    end: float,
    thresholds: Thresholds,
    host: str | None = None,
) -> tuple[Scope, Analysis, Charts]:
    scope = find_scope(prometheus, run, instance, start, end, host)
    analysis = analyse(Ask(prometheus, scope), thresholds)
    return scope, analysis, Charts(prometheus, scope, thresholds)


def write_report(
    url: str,
    run: str | None,
    instance: str | None,
    start: float,
    end: float,
    out: Path,
    host: str | None = None,
    compare: Second | None = None,
    *,
    runbook: Path | None = None,
) -> Path:
    """Ask Prometheus and write DIR/findings.json and DIR/report.html; the page's path. With
    ``compare``, the second run or range is set beside the first on both.

    ``runbook``: a local runbook file, linked relative to the page so it opens offline (the
    demo's checkout has docs/runbook.md); without it the page links thresholds.yml's
    runbook_url.
    """
    thresholds = load_thresholds()
    prometheus = Prometheus(url)
    prometheus.check()
    runbook_url = (
        thresholds.runbook_url
        if runbook is None
        else os.path.relpath(runbook.resolve(), out.resolve()).replace(os.sep, "/")
    )
    scope, analysis, charts = _analysed(prometheus, run, instance, start, end, thresholds, host)
    if compare is None:
        data = analysis.as_json()
        html = render(analysis, charts.all(), url, runbook_url)
    else:
        try:
            other = _analysed(
                prometheus,
                compare.run or run,
                instance,
                compare.start,
                compare.end,
                thresholds,
                host,
            )
            check_comparable(scope, other[0])
        except ScopeError as error:
            raise ScopeError(f"--compare: {str(error).removeprefix('--compare: ')}") from None
        comparison = Comparison(analysis, other[1])
        names = (subject(analysis.headline), subject(other[1].headline))
        both = side_by_side((scope, charts), (other[0], other[2]), names)
        data = comparison.as_json()
        html = render_comparison(comparison, charts.all(), both, url, runbook_url)
    out.mkdir(parents=True, exist_ok=True)
    findings = out / "findings.json"
    findings.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    page = out / "report.html"
    page.write_text(html, encoding="utf-8")
    return page


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        start, end = _range(args)
        if args.host is not None and args.instance is None:
            raise UsageError("argument --host: needs --instance")
        second = _second(args, start, end)
        page = write_report(
            args.prometheus,
            args.run,
            args.instance,
            start,
            end,
            args.out,
            args.host,
            second,
            runbook=args.runbook,
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
    data = json.loads((page.parent / "findings.json").read_text(encoding="utf-8"))
    print(f"{page}  (top finding: {top_finding(data['findings'][0])})")
    return 0


def top_finding(finding: dict[str, object]) -> str:
    """The top finding and its cost, in one line (the CLI's and the demo's)."""
    cost = finding.get("cost")
    said = f"{finding['kind']}: {finding['summary']}"
    if isinstance(cost, dict) and cost["fraction"] > 0:
        said += (
            f" Cost: about {percent(cost['fraction'])} of the throughput "
            f"({percent(cost['low'])} to {percent(cost['high'])})."
        )
    return said


if __name__ == "__main__":
    sys.exit(main())
