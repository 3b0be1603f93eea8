"""The real pynvml, except that NVML's library cannot be found: a host without an NVIDIA driver.

Put this folder first on PYTHONPATH of an exporter process to make any machine behave like one
without NVML, whether or not it has a GPU.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _candidate = os.path.join(_entry or ".", "pynvml.py")
    if os.path.abspath(_entry or ".") != _here and os.path.isfile(_candidate):
        _spec = importlib.util.spec_from_file_location("_real_pynvml", _candidate)
        if _spec is None or _spec.loader is None:
            raise ImportError(f"cannot load {_candidate}")
        _real = importlib.util.module_from_spec(_spec)
        sys.modules["_real_pynvml"] = _real  # its dataclass-like structures look themselves up
        _spec.loader.exec_module(_real)
        break
else:
    raise ImportError("the real pynvml (nvidia-ml-py) is not installed")

globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})


def nvmlInit(*args: Any, **kwargs: Any) -> None:  # noqa: N802 (pynvml's name)
    raise _real.NVMLError(_real.NVML_ERROR_LIBRARY_NOT_FOUND)


nvmlInitWithFlags = nvmlInit  # noqa: N816 (pynvml's name)
