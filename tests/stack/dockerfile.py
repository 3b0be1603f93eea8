"""A Dockerfile read the way `docker build` reads it, for what the stack's tests need.

The rules applied, from the Dockerfile reference (docs.docker.com/reference/dockerfile):
- a line ending in a backslash continues on the next; `#` starts a comment line;
- `ARG NAME=default` is overridden by a build argument of that name and substitutes as
  `$NAME` or `${NAME}` in the instructions after it;
- ENTRYPOINT, CMD and HEALTHCHECK CMD in exec form are JSON arrays; the last one of each wins;
- a RUN in shell form is one `/bin/sh -c` command line.
Only single-stage files are supported: a second FROM fails loudly.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass
class Dockerfile:
    base_image: str = ""
    runs: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] | None = None  # the HEALTHCHECK's CMD, exec form
    user: str = "root"
    # (sources in the build context, destination) of each COPY, in order
    copies: list[tuple[list[str], str]] = field(default_factory=list)


def logical_lines(text: str) -> list[str]:
    """Instructions with their continuation lines joined and comment lines dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse(path: Path, build_args: Mapping[str, str] | None = None) -> Dockerfile:
    build_args = build_args or {}
    args: dict[str, str] = {}
    result = Dockerfile()

    def substitute(text: str) -> str:
        return _VARIABLE.sub(lambda m: args.get(m[1] or m[2], ""), text)

    for line in logical_lines(path.read_text(encoding="utf-8")):
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        rest = rest.strip()
        if instruction == "ARG":
            name, _, default = rest.partition("=")
            args[name] = build_args.get(name, default)
        elif instruction == "FROM":
            if result.base_image:
                raise AssertionError(
                    f"{path}: more than one FROM; extend tests/stack/dockerfile.py"
                )
            result.base_image = substitute(rest.split()[0])
        elif instruction == "RUN":
            result.runs.append(substitute(rest))
        elif instruction in ("ENTRYPOINT", "CMD"):
            words = json.loads(rest) if rest.startswith("[") else ["/bin/sh", "-c", rest]
            if instruction == "ENTRYPOINT":
                result.entrypoint = words
            else:
                result.cmd = words
        elif instruction == "HEALTHCHECK":
            if rest.upper() == "NONE":
                result.healthcheck = None
            else:
                command = rest[rest.index("CMD ") + 4 :].strip()
                result.healthcheck = (
                    json.loads(command) if command.startswith("[") else ["/bin/sh", "-c", command]
                )
        elif instruction == "USER":
            result.user = rest
        elif instruction == "COPY":
            *sources, destination = substitute(rest).split()
            result.copies.append((sources, destination))
    return result


def pip_requirements(dockerfile: Dockerfile) -> list[list[str]]:
    """The requirement arguments of each `pip install` the image's RUN lines make, in order."""
    installs = []
    for run in dockerfile.runs:
        for command in re.split(r"&&|;", run):
            words = shlex.split(command)
            if "pip" in words and "install" in words:
                after = words[words.index("install") + 1 :]
                installs.append([w for w in after if not w.startswith("-")])
    return installs
