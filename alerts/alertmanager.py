"""Write the inhibit rules of mirrorwatch.alerts.inhibitions into each Alertmanager configuration.

Usage:
    python -m mirrorwatch.alerts.alertmanager           # rewrite the inhibit_rules blocks
    python -m mirrorwatch.alerts.alertmanager --check   # exit 1 when a committed file is stale

Only the block between the BEGIN/END GENERATED markers is generated: each file's routes,
receivers and comments stay hand-written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mirrorwatch.alerts.build import RULES_FILE
from mirrorwatch.alerts.generated import GeneratedBlockError, dump, splice, write_or_check
from mirrorwatch.alerts.inhibitions import INHIBITIONS

TOOL = "mirrorwatch.alerts.alertmanager"
# In the source tree: the project's, the Slack/e-mail example, and the compose stack's.
ALERTS_DIR = RULES_FILE.parent
CONFIGS = (
    ALERTS_DIR / "alertmanager.yml",
    ALERTS_DIR / "alertmanager.slack-email.example.yml",
    ALERTS_DIR.parent / "prometheus" / "alertmanager.yml",
)
BEGIN = "# BEGIN GENERATED inhibit_rules"
END = "# END GENERATED inhibit_rules"


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line for line in text.splitlines(keepends=True))


def block() -> str:
    """The generated `inhibit_rules:` with its markers, each rule under its reason."""
    parts = [
        f"{BEGIN}: from alerts/inhibitions.py by `make alerts`\n",
        f"# (python -m {TOOL}); edit that file, not these lines.\n",
        "inhibit_rules:\n",
    ]
    for inhibition in INHIBITIONS:
        parts += [f"  # {line}\n" for line in inhibition.why.splitlines()]
        parts.append(_indent(dump([inhibition.rule()]), "  "))
    parts.append(f"{END}\n")
    return "".join(parts)


def render(text: str, name: str) -> str:
    """The configuration ``text`` with its inhibit_rules block generated afresh."""
    return splice(text, block(), begin=BEGIN, end=END, name=name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {TOOL}", description=__doc__.splitlines()[0])
    parser.add_argument(
        "configs", nargs="*", type=Path, default=list(CONFIGS), help="default: the project's three"
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 when a file is out of date"
    )
    args = parser.parse_args(argv)
    status = 0
    for path in args.configs:
        try:
            text = render(path.read_text(encoding="utf-8"), str(path))
        except (GeneratedBlockError, OSError) as error:
            sys.stderr.write(f"{TOOL}: {error}\n")
            return 2
        status = max(status, write_or_check(TOOL, path, text, check=args.check))
    return status


if __name__ == "__main__":
    sys.exit(main())
