"""How Grafana expands environment variables in its provisioning files, ported to Python.

Grafana reads every string value of a provisioning file through
`pkg/services/provisioning/values/values.go` `interpolateValue`: the value is split on `$$`
(a literal `$`), each part goes through `setting.ExpandVar` (`pkg/setting/expanders.go`: the
regex `\\$(|__\\w+){([^}]+)}`, where an empty prefix or `__env` reads the environment and
`__file` reads a file) and then through Go's `os.ExpandEnv`, and the parts are joined with `$`.
Neither step knows shell defaults: in `${VAR:-x}` the whole `VAR:-x` is taken as the name.

`os.ExpandEnv` is Go's `os.Expand(s, os.Getenv)` (go `src/os/env.go`, Go 1.21 and later, the
toolchains Grafana 11 is built with).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

_EXPANDER = re.compile(r"\$(|__\w+)\{([^}]+)\}")
_SHELL_SPECIAL = set("*#$@!?-0123456789")


def _is_alnum(c: str) -> bool:
    return c == "_" or (c.isascii() and c.isalnum())


def _shell_name(s: str) -> tuple[str, int]:
    """Go's getShellName: the name at the start of ``s`` and how many bytes it took."""
    if s[0] == "{":
        if len(s) > 2 and s[1] in _SHELL_SPECIAL and s[2] == "}":
            return s[1:2], 3
        for i in range(1, len(s)):
            if s[i] == "}":
                if i == 1:
                    return "", 2  # bad syntax: "${}" is eaten
                return s[1:i], i + 1
        return "", 1  # bad syntax: "${" is eaten
    if s[0] in _SHELL_SPECIAL:
        return s[0:1], 1
    i = 0
    while i < len(s) and _is_alnum(s[i]):
        i += 1
    return s[:i], i


def go_expand(s: str, mapping: Callable[[str], str]) -> str:
    """Go's os.Expand."""
    out: list[str] = []
    i = 0
    j = 0
    while j < len(s):
        if s[j] == "$" and j + 1 < len(s):
            out.append(s[i:j])
            name, width = _shell_name(s[j + 1 :])
            if name == "" and width > 0:
                pass  # invalid syntax: the characters are eaten
            elif name == "":
                out.append(s[j])  # "$" not followed by a name stays
            else:
                out.append(mapping(name))
            j += width
            i = j + 1
        j += 1
    return "".join(out) + s[i:]


def go_expand_env(s: str, env: Mapping[str, str]) -> str:
    """Go's os.ExpandEnv against ``env``: an unset variable is the empty string."""
    return go_expand(s, lambda name: env.get(name, ""))


def _expand_var(s: str, env: Mapping[str, str]) -> str:
    """Grafana's setting.ExpandVar, with the env expander first and then the file expander."""
    for expander in ("env", "file"):
        for prefix, argument in _EXPANDER.findall(s):
            if prefix == "__" + expander or (prefix == "" and expander == "env"):
                if expander == "env":
                    value = env.get(argument, "")
                else:
                    value = Path(argument).read_text(encoding="utf-8").strip()
                s = s.replace(f"${prefix}{{{argument}}}", value, 1)
    return s


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """A provisioning string value as Grafana sees it, in a process with environment ``env``."""
    return "$".join(go_expand_env(_expand_var(part, env), env) for part in value.split("$$"))


def interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    """Every string in a parsed provisioning file interpolated, as transformInterface does."""
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate_tree(item, env) for key, item in node.items()}
    return node
