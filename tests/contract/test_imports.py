"""Who imports whom: the contract depends on nothing of the project; no two packages import each
other; a training client loads neither the exporter nor its server stack."""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hang import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[2]
# Each package of the project: its import name and its source folder (pyproject.toml's
# package-dir), and the two top-level packages beside them that the repository runs.
PACKAGES = {
    "mirrorwatch.contract": "contract",
    "mirrorwatch.exporter": "exporter",
    "mirrorwatch.trainer": "trainer",
    "mirrorwatch.alerts": "alerts",
    "mirrorwatch.report": "report",
    "mirrorwatch.doctor": "doctor",
    "mirrorwatch.telemetry": "telemetry",
    "mirrorwatch.torch": "torch_monitor",
    "dashboards": "dashboards",
    "demo": "demo",
}
TRAINING_CLIENTS = ("mirrorwatch.telemetry", "mirrorwatch.trainer", "mirrorwatch.torch")


def imported_modules(path: Path) -> Iterator[str]:
    """Every absolute module name ``path`` imports, at its top or inside a function alike."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def package_of(module: str) -> str | None:
    """The project package ``module`` belongs to, or None for anything else."""
    owners = [name for name in PACKAGES if module == name or module.startswith(name + ".")]
    return max(owners, key=len, default=None)


def package_imports() -> dict[str, dict[str, str]]:
    """Package -> each other project package it imports, with one module that does."""
    edges: dict[str, dict[str, str]] = {name: {} for name in PACKAGES}
    for name, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module in imported_modules(path):
                target = package_of(module)
                if target is not None and target != name:
                    edges[name].setdefault(target, str(path.relative_to(ROOT)))
    return edges


def cycle(edges: dict[str, dict[str, str]]) -> list[str]:
    """One cycle of the graph as the packages along it, or [] if there is none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in edges[node]:
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[node] = "done"
        path.pop()
        return []

    for node in edges:
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_walk_sees_the_packages_imports() -> None:
    edges = package_imports()
    assert "mirrorwatch.contract" in edges["mirrorwatch.exporter"]
    assert "mirrorwatch.telemetry" in edges["mirrorwatch.torch"]


def test_a_cycle_is_found_where_there_is_one() -> None:
    edges = {"a": {"b": "a.py"}, "b": {"c": "b.py"}, "c": {"a": "c.py"}}
    assert cycle(edges) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b": "a.py"}, "b": {}}) == []


def test_no_two_packages_import_each_other() -> None:
    edges = package_imports()
    found = cycle(edges)
    where = [f"{a} -> {b} ({edges[a][b]})" for a, b in itertools.pairwise(found)]
    assert not found, "import cycle between packages: " + "; ".join(where)


def test_the_contract_imports_nothing_of_the_project() -> None:
    assert package_imports()["mirrorwatch.contract"] == {}


def runtime_imports(path: Path) -> Iterator[str]:
    """The modules ``path`` imports when it runs: not those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("path", sorted((ROOT / "contract").glob("*.py")), ids=lambda p: p.name)
def test_the_contract_runs_on_the_standard_library_alone(path: Path) -> None:
    foreign = {
        module
        for module in runtime_imports(path)
        if module.partition(".")[0] not in sys.stdlib_module_names
        and not module.startswith("mirrorwatch.contract")
    }
    assert not foreign, f"{path.name} imports {sorted(foreign)} at run time"


@pytest.mark.parametrize("client", TRAINING_CLIENTS)
def test_a_training_client_never_imports_the_exporter(client: str) -> None:
    edges = package_imports()[client]
    assert "mirrorwatch.exporter" not in edges, f"{client} imports it in {edges.get(client)}"


# What `from mirrorwatch.torch import MirrorwatchMonitor` adds to a process that has torch.
LOADED_BY_THE_MONITOR = """
import json, sys
import torch
before = set(sys.modules)
from mirrorwatch.torch import MirrorwatchMonitor
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.fixture(scope="module")
def loaded_by_the_monitor() -> list[str]:
    """The modules the torch monitor's import loads beyond torch, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED_BY_THE_MONITOR],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_the_torch_monitor_loads_no_exporter_module(loaded_by_the_monitor: list[str]) -> None:
    assert "mirrorwatch.torch.monitor" in loaded_by_the_monitor
    exporter = [m for m in loaded_by_the_monitor if m.startswith("mirrorwatch.exporter")]
    assert exporter == []


def test_the_torch_monitor_loads_only_the_contract_telemetry_and_itself(
    loaded_by_the_monitor: list[str],
) -> None:
    packages = {
        package_of(module) for module in loaded_by_the_monitor if module.startswith("mirrorwatch.")
    }
    assert packages == {"mirrorwatch.contract", "mirrorwatch.telemetry", "mirrorwatch.torch"}


def test_the_torch_monitor_loads_nothing_beyond_torch_and_the_standard_library(
    loaded_by_the_monitor: list[str],
) -> None:
    # No pydantic, FastAPI, uvicorn, prometheus_client or YAML: only the ingest needs them.
    others = {
        module.partition(".")[0]
        for module in loaded_by_the_monitor
        if module.partition(".")[0] not in sys.stdlib_module_names
    }
    assert others <= {"mirrorwatch", "torch"}, sorted(others)
