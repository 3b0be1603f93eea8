"""Named fragments in rule text: «name» stands for a piece of PromQL or template, filled in once.

Rule expressions and annotations are written as Prometheus will read them: PromQL braces and
Go template braces appear once, as themselves, never doubled for an f-string. Only «name» is
replaced. Neither guillemet occurs in PromQL, in Go's text/template or in the English of an
annotation, so no text can be taken for a fragment by accident, and a stray one is an error.

    fill("rate(x[5m]) > «limit»", {"limit": 0.5})          -> "rate(x[5m]) > 0.5"
    fill("above «limit:%»", {"limit": 0.5})                 -> "above 50%"
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

OPEN, CLOSE = "«", "»"
_FRAGMENT = re.compile(r"«(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<unit>:%|:pp)?»")

Fragment = str | float | int | Sequence[int]
MAX_NESTING = 4


class FragmentError(ValueError):
    """Rule text names a fragment that does not exist, or holds a stray « or »."""


def num(value: float) -> str:
    """A number as PromQL and people write it: 5 rather than 5.0, 0.05 as is."""
    return str(int(value)) if value == int(value) else repr(float(value))


def percent(ratio: float) -> str:
    return f"{num(round(ratio * 100, 6))}%"


def points(difference: float) -> str:
    """A difference of two ratios in percentage points, as the run report writes one: 5 pp."""
    return f"{num(round(difference * 100, 6))} pp"


def render(value: Fragment) -> str:
    """A fragment's text: numbers as PromQL numbers, a list of XIDs as a regex alternation."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return num(value)
    return "|".join(str(item) for item in value)


def dedent(text: str) -> str:
    """Strip the common indentation and surrounding blank lines of a multi-line expression."""
    lines = text.strip("\n").splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:].rstrip() for line in lines)


def fill(text: str, fragments: Mapping[str, Fragment], _depth: int = 0) -> str:
    """``text`` with every «name» replaced by its fragment, «name:%» by a ratio as a percentage,
    «name:pp» by a difference of ratios in percentage points.

    A fragment may name others in turn. A multi-line fragment is indented like the line it
    starts on, so a shared piece of PromQL lines up inside the expression that uses it.
    """
    if _depth > MAX_NESTING:
        raise FragmentError(f"fragments nested more than {MAX_NESTING} deep in {text!r}")

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in fragments:
            raise FragmentError(f"unknown fragment «{name}» in {text!r}")
        value = fragments[name]
        if unit := match["unit"]:
            if not isinstance(value, int | float):
                raise FragmentError(f"«{name}{unit}» needs a number, got {value!r}")
            return percent(value) if unit == ":%" else points(value)
        rendered = fill(render(value), fragments, _depth + 1)
        line_start = text.rfind("\n", 0, match.start()) + 1
        line = text[line_start : match.start()]
        indent = line[: len(line) - len(line.lstrip())]
        return rendered.replace("\n", "\n" + indent)

    filled = _FRAGMENT.sub(replace, text)
    if OPEN in filled or CLOSE in filled:
        raise FragmentError(f"a stray {OPEN} or {CLOSE} in {filled!r}")
    return filled
