"""`make last-report`: where the newest run report of the demo is, and its top finding.

    python -m demo.last_report [--workdir build/demo]

The demo's own report on Ctrl-C and each `make report` land in build/demo/reports/; this finds
the newest written one, so a piped demo (`make demo | tee demo.log`, whose reader the Ctrl-C
took with it) leaves its report findable. Exit 2 and one line when there is none yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from demo.stack import REPO
from mirrorwatch.report.cli import top_finding

PROG = "make last-report"
PAGE = "report.html"


def newest_report(workdir: Path) -> Path | None:
    """The newest report.html under ``workdir``/reports, or None."""
    pages = [page for page in (workdir / "reports").glob(f"*/{PAGE}") if page.is_file()]
    return max(pages, key=lambda page: page.stat().st_mtime, default=None)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=REPO / "build" / "demo", help="the demo's")
    args = p.parse_args(argv)
    page = newest_report(args.workdir)
    if page is None:
        print(
            f"{PROG}: no run report in {args.workdir / 'reports'} yet: `make demo` writes one "
            "on Ctrl-C, `make report` while it runs",
            file=sys.stderr,
        )
        return 2
    print(page)
    try:
        findings = json.loads((page.parent / "findings.json").read_text(encoding="utf-8"))
        print(f"top finding: {top_finding(findings['findings'][0])}")
    except (OSError, ValueError, KeyError, IndexError):
        pass  # a report without its findings still has its page
    return 0


if __name__ == "__main__":
    sys.exit(main())
