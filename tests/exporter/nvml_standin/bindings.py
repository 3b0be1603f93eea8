"""The nvidia-ml-py releases the matrix runs: the newest installed and the lowest accepted.

pyproject.toml accepts ``nvidia-ml-py>=12.535``; its lowest release, 12.535.77, is kept here
as its wheel from PyPI (BSD-3-Clause, NVIDIA) so the matrix needs no network. Each cell loads
a fresh copy of the module, so no symbol cache or library handle carries over between cells.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import sys
import types
import zipfile
from pathlib import Path

LOWEST = "12.535.77"
_WHEEL = Path(__file__).with_name(f"nvidia_ml_py-{LOWEST}-py3-none-any.whl")
_copies = itertools.count()


def installed_version() -> str:
    from importlib.metadata import version

    return version("nvidia-ml-py")


BINDINGS: tuple[str, ...] = (LOWEST, installed_version())


@functools.cache
def _code(binding: str) -> types.CodeType:
    return compile(_source(binding), f"pynvml-{binding}.py", "exec")


def _source(binding: str) -> bytes:
    if binding == LOWEST:
        with zipfile.ZipFile(_WHEEL) as wheel:
            return wheel.read("pynvml.py")
    spec = importlib.util.find_spec("pynvml")
    assert spec is not None
    assert spec.origin is not None
    return Path(spec.origin).read_bytes()


def load_binding(binding: str) -> types.ModuleType:
    """A fresh copy of pynvml ``binding`` (its module code looks itself up in sys.modules)."""
    name = f"pynvml_standin_{next(_copies)}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(_code(binding), module.__dict__)
    return module


def unload(module: types.ModuleType) -> None:
    sys.modules.pop(module.__name__, None)
