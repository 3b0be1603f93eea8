"""Which of the per-process and GPM readings this host's GPUs support, straight from NVML.

    python scripts/gpu_features.py        # one line per GPU and reading; exit 2 without NVML

Asks what the exporter's collectors ask (exporter/nvml/processes.py, exporter/nvml/gpm.py):
the compute and graphics process lists, nvmlDeviceGetProcessUtilization (NOT_FOUND, no
sample yet, still counts as supported), nvmlGpmQueryDeviceSupport; and times each call, the
per-scrape cost docs/metrics.md states. The last line, `gpm-gpus: 0 2`, lists the GPUs with
GPM, for scripts/gpu-smoke.sh to check the exporter's series against.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any


def _answer(nvml: ModuleType, call: Callable[[], Any]) -> tuple[str, Any, float]:
    """("ok", value, µs) or (NVML error name, None, µs)."""
    started = time.perf_counter()
    try:
        value = call()
    except nvml.NVMLError as error:
        names = {getattr(nvml, n): n for n in dir(nvml) if n.startswith("NVML_ERROR_")}
        return names.get(getattr(error, "value", None), str(error)), None, _since(started)
    except AttributeError:  # an nvidia-ml-py without the function
        return "missing in this nvidia-ml-py", None, _since(started)
    return "ok", value, _since(started)


def _since(started: float) -> float:
    return (time.perf_counter() - started) * 1e6


def probe(nvml: ModuleType) -> list[str]:
    """The report's lines, for every GPU of an initialised ``nvml``."""
    lines: list[str] = []
    gpm_gpus: list[str] = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        gpu_lines, has_gpm = _gpu(nvml, index, nvml.nvmlDeviceGetHandleByIndex(index))
        lines += gpu_lines
        if has_gpm:
            gpm_gpus.append(str(index))
    lines.append("gpm-gpus: " + " ".join(gpm_gpus))
    return lines


def _gpu(nvml: ModuleType, index: int, handle: Any) -> tuple[list[str], bool]:
    name = nvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else str(name)
    lines = [f"GPU {index}: {name}"]
    for kind in ("Compute", "Graphics"):
        outcome, found, micros = _answer(nvml, partial(_processes, nvml, kind, handle))
        detail = f"{len(found)} process(es)" if outcome == "ok" else outcome
        lines.append(f"  {kind.lower()} processes: {detail} ({micros:.0f} µs)")
    outcome, samples, micros = _answer(
        nvml, lambda: nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    )
    if outcome == "ok":
        detail = f"supported, {len(samples)} sample(s)"
    elif outcome == "NVML_ERROR_NOT_FOUND":
        detail = "supported, no sample yet (no process ran lately)"
    else:
        detail = f"not supported ({outcome})"
    lines.append(f"  per-process utilisation: {detail} ({micros:.0f} µs)")
    outcome, support, micros = _answer(nvml, lambda: nvml.nvmlGpmQueryDeviceSupport(handle))
    has_gpm = outcome == "ok" and bool(getattr(support, "isSupportedDevice", 0))
    detail = "supported" if has_gpm else "not supported"
    if outcome != "ok":
        detail += f" ({outcome})"
    lines.append(f"  GPM: {detail} ({micros:.0f} µs)")
    return lines, has_gpm


def _processes(nvml: ModuleType, kind: str, handle: Any) -> Any:
    return getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses")(handle)


def main(nvml: ModuleType | None = None) -> int:
    try:
        module = nvml or importlib.import_module("pynvml")
        module.nvmlInit()
    except Exception as error:  # any reason NVML cannot start is this script's answer
        sys.stderr.write(f"gpu_features: NVML cannot start: {error}\n")
        return 2
    try:
        for line in probe(module):
            sys.stdout.write(line + "\n")
    finally:
        module.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
