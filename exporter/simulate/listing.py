"""`mirrorwatch-exporter --list-scenarios`: each built-in scenario and what it simulates."""

from __future__ import annotations

import textwrap

from mirrorwatch.exporter.simulate.scenario import builtin_scenarios, load_scenario

WIDTH = 100


def scenario_list() -> str:
    """One entry a scenario: its name, then its description wrapped under it."""
    names = builtin_scenarios()
    column = max(len(name) for name in names) + 2
    entries = []
    for name in names:
        description = " ".join(load_scenario(name).description.split()) or "(no description)"
        entries.append(
            textwrap.fill(
                description,
                WIDTH,
                initial_indent=name.ljust(column),
                subsequent_indent=" " * column,
            )
        )
    return "\n".join(entries)
