"""scripts/gpu_symbols.py against real shared libraries built here with the system `cc`.

Each library exports exactly the symbols of one stand-in branch (stubs answering
NVML_SUCCESS) and a driver version, so the script's dlsym lookups, its nvmlInit_v2 and
nvmlSystemGetDriverVersion calls and its comparison run as they do on a GPU host.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from demo.stack import REPO
from tests.exporter.nvml_standin.branches import BRANCHES, Branch

CC = shutil.which("cc")


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_symbols", REPO / "scripts" / "gpu_symbols.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(tmp_path: Path, symbols: set[str], version: str) -> Path:
    assert CC is not None, "the system C compiler (cc) is needed"
    stubs = [
        f"int {name}(void) {{ return 0; }}"
        for name in sorted(symbols - {"nvmlInit_v2", "nvmlSystemGetDriverVersion"})
    ]
    source = "\n".join(
        [
            "#include <string.h>",
            "int nvmlInit_v2(void) { return 0; }",
            "int nvmlSystemGetDriverVersion(char *buf, unsigned n)"
            f' {{ strncpy(buf, "{version}", n); return 0; }}',
            *stubs,
        ]
    )
    c_file = tmp_path / "nvml.c"
    c_file.write_text(source, encoding="utf-8")
    library = tmp_path / "libnvidia-ml.so.1"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(library), str(c_file)], check=True)
    return library


@pytest.mark.parametrize("branch", [BRANCHES[0], BRANCHES[2], BRANCHES[-1]], ids=lambda b: b.name)
def test_a_library_with_the_branch_symbols_agrees_with_its_stand_in(
    tmp_path: Path, branch: Branch, capsys: pytest.CaptureFixture[str]
) -> None:
    library = build(tmp_path, set(branch.symbols), branch.version)
    assert script().main(["--library", str(library)]) == 0
    out = capsys.readouterr().out
    assert f"driver: {branch.version}" in out
    assert f"stand-in: {branch.name} " in out
    assert "stand-in agrees" in out


def test_a_symbol_the_stand_in_has_but_the_library_lacks_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    branch = BRANCHES[-1]
    library = build(tmp_path, set(branch.symbols) - {"nvmlDeviceGetMemoryInfo_v2"}, "580.95.05")
    assert script().main(["--library", str(library)]) == 1
    out = capsys.readouterr().out
    assert "absent: nvmlDeviceGetMemoryInfo_v2" in out
    assert "differs: nvmlDeviceGetMemoryInfo_v2: real library lacks it, stand-in R580 has it" in out


def test_a_library_that_cannot_be_loaded_is_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert script().main(["--library", str(tmp_path / "none.so")]) == 2
    assert capsys.readouterr().err.startswith("gpu_symbols: --library ")
