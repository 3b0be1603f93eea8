"""How the alert generators write their files: one YAML style, generated blocks, `--check`.

Shared by mirrorwatch.alerts.build (the rule file), .kubernetes (its PrometheusRule) and
.alertmanager (the inhibit rules of each Alertmanager configuration), so every generated file
reads the same and goes stale the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


class GeneratedBlockError(ValueError):
    """A hand-written file lacks the markers of the block generated into it."""


class _Dumper(yaml.SafeDumper):
    """Block scalars for multi-line strings and `[a, b]` for tuples, as hand-written YAML has."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _tuple_presenter(dumper: yaml.SafeDumper, data: tuple[object, ...]) -> yaml.SequenceNode:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(str, _str_presenter)
_Dumper.add_representer(tuple, _tuple_presenter)


def dump(document: object) -> str:
    """``document`` as YAML: keys in their order, long lines kept whole."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10_000)


def splice(text: str, block: str, *, begin: str, end: str, name: str) -> str:
    """``text`` with the lines from the one starting ``begin`` to the one starting ``end``
    (both included) replaced by ``block``, which carries both marker lines itself."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(begin)]
    ends = [i for i, line in enumerate(lines) if line.startswith(end)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise GeneratedBlockError(
            f"{name}: needs one line starting {begin!r} and, after it, one starting {end!r}"
        )
    return "".join([*lines[: starts[0]], block, *lines[ends[0] + 1 :]])


def write_or_check(tool: str, output: Path, text: str, *, check: bool) -> int:
    """Write a generated file, or with ``check`` exit 1 when the file on disk differs."""
    if check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            sys.stderr.write(f"{tool}: {output} is out of date; run `make alerts`\n")
            return 1
        return 0
    output.write_text(text, encoding="utf-8")
    return 0
