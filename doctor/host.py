"""Where the doctor reads the GPUs (NVML, or a simulated host at the moment its story is told)
and this process's CPUs."""

from __future__ import annotations

import json
import math
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.nvml import NvmlBackend
from mirrorwatch.exporter.simulate.models import TemperatureEvent
from mirrorwatch.exporter.simulate.scenario import Scenario

_EXPORTER_TIMEOUT_S = 2.0
_AFTER_LAST_EVENT_S = 1.0


def story_moment(scenario: Scenario) -> float:
    """Scenario seconds by which every event and process of the scenario has begun (and every
    temperature ramp is done): the host the scenario describes, as a pre-flight would find it."""
    starts = [0.0]
    for event in scenario.events:
        ramp = event.ramp if isinstance(event, TemperatureEvent) else 0.0
        starts.append(event.at + ramp)
    starts += [process.at for process in scenario.processes or ()]
    return max(s for s in starts if math.isfinite(s)) + _AFTER_LAST_EVENT_S


def open_backend(simulate: str | None, gpus: int | None = None) -> GpuBackend:
    """The simulated host of ``simulate`` (raises ScenarioError for a bad one), else NVML."""
    if simulate is None:
        backend: GpuBackend = NvmlBackend(background=False)
    else:
        from mirrorwatch.exporter.simulate.backend import SimulatedBackend
        from mirrorwatch.exporter.simulate.scenario import load_scenario

        scenario = load_scenario(simulate, gpus=gpus)
        moment = story_moment(scenario)
        backend = SimulatedBackend(scenario, clock=lambda: moment)
    backend.start()
    return backend


def exporter_xids(url: str) -> Mapping[str, Mapping[int, float]]:
    """XID counts by GPU UUID from a running exporter's ``/api/v1/gpus``: it has watched the
    GPUs' events since it started, this process only since now. Raises OSError/ValueError."""
    with urllib.request.urlopen(
        url.rstrip("/") + "/api/v1/gpus", timeout=_EXPORTER_TIMEOUT_S
    ) as answer:
        document = json.load(answer)
    counts: dict[str, dict[int, float]] = {}
    for gpu in document.get("gpus", []):
        xids = gpu.get("xid_errors_total", {})
        counts[str(gpu.get("uuid"))] = {int(k): float(v) for k, v in xids.items()}
    return counts


@dataclass(frozen=True)
class ProcessCpus:
    """The CPUs this process may run on (its affinity: `taskset`, a container's cpuset) and the
    time its cgroup grants (cgroup v2 ``cpu.max``, in CPUs; None: no quota)."""

    allowed: frozenset[int]
    quota: float | None = None

    def words(self) -> str:
        """How many CPUs, as the process can use them: "2 CPUs", "4 CPUs (cgroup quota 1.5)"."""
        count = len(self.allowed)
        said = f"{count} CPU{'' if count == 1 else 's'}"
        if self.quota is not None and self.quota < count:
            said += f" (cgroup quota {self.quota:g} CPUs)"
        return said


def cgroup_cpu_quota(
    cgroup_root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The tightest ``cpu.max`` quota (in CPUs) from this process's cgroup v2 up to the root;
    None without cgroup v2 or without a quota."""
    try:
        line = next(x for x in own.read_text().splitlines() if x.startswith("0::"))
    except (OSError, StopIteration):
        return None
    folder = cgroup_root / line.removeprefix("0::").strip("/")
    quotas = []
    for directory in (folder, *folder.parents):
        if not directory.is_relative_to(cgroup_root):
            break
        try:
            limit, period = (directory / "cpu.max").read_text().split()
        except (OSError, ValueError):
            continue
        if limit != "max" and float(period) > 0:
            quotas.append(float(limit) / float(period))
    return min(quotas, default=None)


def process_cpus() -> ProcessCpus:
    """This process's CPUs, by affinity and cgroup quota (never the host's count)."""
    return ProcessCpus(frozenset(os.sched_getaffinity(0)), cgroup_cpu_quota())
