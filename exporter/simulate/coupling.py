"""The GPUs of one synchronous run, coupled second by second as data-parallel training couples
them (shared/CONTRACT.md "Synchronous training"; docs/scenarios.md has the physics and sources).

Each second every GPU of the run waits for its input (``1 - u``, u its workload utilisation:
how much of the time it would be fed), computes the step's common work ``k`` at its own speed
(SM clock, SMs left by other processes, the scenario's ``compute_speed``), then joins the
all-reduce, which ends when the slowest GPU has arrived plus the links' transfer time ``a``. A
GPU waiting in the all-reduce runs its kernel: NVML counts it busy, at near-idle power. So with
``d_i = w_i + k / s_i`` and ``T = max(d) + a``, GPU i reads busy ``(T - w_i) / T`` and computes
for ``(k / s_i + a) / T`` of the time; the run makes ``1 / T`` steps where it would make one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

from mirrorwatch.contract.pcie import PCIE_LANE_BYTES_PER_SECOND
from mirrorwatch.exporter.simulate.physics import (
    IDLE_BELOW_UTILIZATION,
    GpuPhysics,
    Sample,
)
from mirrorwatch.exporter.simulate.scenario import Scenario

# Seconds of coupled samples kept: a scrape and the counters' integration read the current
# second and the one before, each GPU in turn.
_CACHED_SECONDS: Final = 4


def link_share(sample: Sample) -> float:
    """The GPU's PCIe link speed now against its maximum (generation and width)."""
    link = sample.pcie
    generation, top_generation = link.generation, link.generation_max
    width, top_width = link.width, link.width_max
    if generation is None or top_generation is None or width is None or top_width is None:
        return 1.0
    now = PCIE_LANE_BYTES_PER_SECOND[generation] * width
    return now / (PCIE_LANE_BYTES_PER_SECOND[top_generation] * top_width)


class Run:
    """The coupled samples of the GPUs a scenario trains one synchronous run on."""

    def __init__(self, scenario: Scenario, physics: Sequence[GpuPhysics]) -> None:
        training = scenario.training
        self._physics = physics
        self._members: tuple[int, ...] = ()
        if training is not None:
            chosen = range(len(physics)) if training.gpus is None else sorted(set(training.gpus))
            self._members = tuple(chosen)
            self._allreduce = training.allreduce_share
        hardware = scenario.gpus
        # The all-reduce crosses the GPUs' PCIe links where they have no NVLink to each other.
        self._over_pcie = hardware.nvlinks == 0 or hardware.peer_link != "nvlink"
        self._lock = threading.Lock()
        self._samples: dict[int, tuple[Sample, ...]] = {}

    @property
    def coupled(self) -> bool:
        return len(self._members) >= 2

    def sample(self, index: int, second: int) -> Sample:
        """GPU `index`'s sample of `second`, coupled to the run's other GPUs."""
        if index not in self._members:
            return self._physics[index].sample(second)
        with self._lock:
            samples = self._samples.get(second)
            if samples is None:
                samples = self._couple(second)
                if len(self._samples) >= _CACHED_SECONDS:
                    del self._samples[min(self._samples)]
                self._samples[second] = samples
        return samples[index]

    def _couple(self, second: int) -> tuple[Sample, ...]:
        t = float(second)
        alone = [gpu.sample(second) for gpu in self._physics]
        physics = self._physics
        hung = [i for i in self._members if not alone[i].lost and physics[i].hung(t)]
        run = [
            i
            for i in self._members
            if not alone[i].lost and (i in hung or alone[i].utilization >= IDLE_BELOW_UTILIZATION)
        ]
        if len(run) < 2:
            return tuple(alone)
        coupled = list(alone)
        if hung:
            # The others wait in the all-reduce for a GPU that never arrives.
            for i in run:
                if i not in hung:
                    coupled[i] = physics[i].coupled(alone[i], second, 1.0, 0.0)
            return tuple(coupled)
        fed = {i: alone[i].utilization for i in run}
        links = {i: link_share(alone[i]) for i in run}
        transfer = self._allreduce
        if self._over_pcie:
            transfer /= min(links.values())
        work = max(max(fed.values()) - self._allreduce, 0.0)
        # Input copies overlap the compute (prefetching): a slower link lengthens the
        # all-reduce where it crosses PCIe, not the wait for input.
        waits = {i: 1.0 - fed[i] for i in run}
        computes = {i: work / physics[i].speed(alone[i], t) for i in run}
        step = max(waits[i] + computes[i] for i in run) + transfer
        for i in run:
            busy = min(1.0, (step - waits[i]) / step)
            compute = min(busy, (computes[i] + transfer) / step)
            coupled[i] = physics[i].coupled(alone[i], second, busy, compute)
        return tuple(coupled)
