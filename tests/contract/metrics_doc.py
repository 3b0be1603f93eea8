"""docs/metrics.md's table of every series, written from the contract's table of metric names.

python -m tests.contract.metrics_doc          # rewrite the table (make metrics)
python -m tests.contract.metrics_doc --check  # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mirrorwatch.alerts.generated import splice
from mirrorwatch.contract.metrics import METRICS

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
BEGIN = "<!-- BEGIN GENERATED: make metrics (from contract/metrics.py) -->"
END = "<!-- END GENERATED -->"


def table() -> str:
    """The Markdown table of every row, in the table's order."""
    lines = ["| metric | type | unit | labels | help |", "|---|---|---|---|---|"]
    for row in METRICS:
        labels = ", ".join(f"`{label}`" for label in row.labels)
        help_text = row.help.replace("|", "\\|")
        lines.append(f"| `{row}` | {row.type} | {row.unit or '-'} | {labels} | {help_text} |")
    return "\n".join(lines) + "\n"


def render(document: str) -> str:
    """``document`` with the lines from its BEGIN to its END marker written from the table."""
    block = f"{BEGIN}\n{table()}{END}\n"
    return splice(document, block, begin=BEGIN, end=END, name=DOCUMENT.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/metrics.md's table of every series.")
    parser.add_argument("--check", action="store_true", help="exit 1 when the document is stale")
    args = parser.parse_args(argv)
    current = DOCUMENT.read_text(encoding="utf-8")
    fresh = render(current)
    if args.check:
        if fresh != current:
            sys.stderr.write(f"{DOCUMENT} is stale: python -m tests.contract.metrics_doc\n")
            return 1
        return 0
    DOCUMENT.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
