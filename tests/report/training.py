"""Synthetic synchronous data-parallel training on a simulated host, whose true costs are known.

Each second the trainer reads what the host's GPUs report (/api/v1/gpus) and steps at the pace
synchronous data parallelism allows: every replica copies its batch over its PCIe link and
computes at its SM clock, the step waits for the slowest replica, then for the all-reduce
(over PCIe where the GPUs have no NVLink, gated by the slowest link); a replica that waits
for its input (a utilisation below the busiest's) holds every step up by that share. Knowing
each second's step time with and without a cause gives what that cause truly cost, for the
report's estimate (report/cost.py) to be held against. A DDP run (``ddp``) has one worker per
GPU, each timing the all-reduce as the torch monitor does: its own wait for the slowest
replica, then the all-reduce itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mirrorwatch.contract.pcie import PCIE_LANE_BYTES_PER_SECOND
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.ingest.schema import (
    Replica,
    Scaling,
    StepDurations,
    TrainingSnapshot,
)
from mirrorwatch.exporter.simulate.physics import PCIE_RECEIVE_BYTES_PER_SECOND

Cause = Literal["clock", "link", "input", "interconnect"]
BATCH = 64
# Per step at full SM clock; CLOCK_BOUND of it scales with the clock, the rest (memory-bound
# kernels) does not: the report's estimate assumes all of it does.
COMPUTE_SECONDS = 0.040
CLOCK_BOUND = 0.9
ALLREDUCE_SECONDS = 0.004
# What the all-reduce moves over each GPU's link per step where it goes over PCIe: 4 ms more
# at gen 5 x16; over NVLink (several times faster) the all-reduce takes ALLREDUCE_SECONDS.
GRADIENT_BYTES = 0.004 * PCIE_LANE_BYTES_PER_SECOND[5] * 16
# What the simulated host receives over PCIe in a second at full speed, per step: each
# replica's batch, copied before its step.
BATCH_BYTES = PCIE_RECEIVE_BYTES_PER_SECOND * 0.95 * (COMPUTE_SECONDS + ALLREDUCE_SECONDS)


@dataclass(frozen=True)
class Reading:
    """One GPU during one second, as the host reports it."""

    clock_ratio: float
    link_bytes_per_second: float
    link_max_bytes_per_second: float
    utilization: float
    # It reaches a peer without NVLink: the all-reduce goes over PCIe.
    peer_over_pcie: bool = False

    @property
    def link_speed_ratio(self) -> float:
        return self.link_bytes_per_second / self.link_max_bytes_per_second


def link_bytes_per_second(generation: float, width: float) -> float:
    return PCIE_LANE_BYTES_PER_SECOND[int(generation)] * width


def reading(gpu: Mapping[str, Any]) -> Reading:
    """A GPU of /api/v1/gpus; a lost one reads as unimpeded (the report costs it otherwise)."""
    if not gpu.get("up", True) or "clock_hertz" not in gpu:
        full = link_bytes_per_second(5, 16)
        return Reading(1.0, full, full, 0.0)
    return Reading(
        clock_ratio=gpu["clock_hertz"]["sm"] / gpu["clock_max_hertz"]["sm"],
        link_bytes_per_second=link_bytes_per_second(
            gpu["pcie_link_generation"], gpu["pcie_link_width"]
        ),
        link_max_bytes_per_second=link_bytes_per_second(
            gpu["pcie_link_generation_max"], gpu["pcie_link_width_max"]
        ),
        utilization=gpu["utilization_ratio"],
        peer_over_pcie=any(
            link != "nvlink" for peer in gpu.get("p2p_link_info", {}).values() for link in peer
        ),
    )


def _link(gpu: Reading, gone: set[Cause]) -> float:
    return gpu.link_max_bytes_per_second if "link" in gone else gpu.link_bytes_per_second


def allreduce_seconds(gpus: Sequence[Reading], without: Iterable[Cause] = ()) -> float:
    """The all-reduce of one step: over PCIe (unless ``without`` the interconnect) gated by the
    slowest link, else over NVLink."""
    gone = set(without)
    if "interconnect" in gone or not any(g.peer_over_pcie for g in gpus):
        return ALLREDUCE_SECONDS
    return ALLREDUCE_SECONDS + GRADIENT_BYTES / min(_link(g, gone) for g in gpus)


def _work(gpu: Reading, gone: set[Cause]) -> float:
    """One replica's copy and compute of a step."""
    clock = 1.0 if "clock" in gone else gpu.clock_ratio
    compute = COMPUTE_SECONDS * (CLOCK_BOUND / clock + 1 - CLOCK_BOUND)
    return BATCH_BYTES / _link(gpu, gone) + compute


def step_seconds(gpus: Sequence[Reading], without: Iterable[Cause] = ()) -> float:
    """One synchronous step's time on these GPUs; ``without`` the causes named there."""
    gone = set(without)
    busy = [g.utilization for g in gpus]
    waited = 0.0 if "input" in gone else max(busy) - min(busy)
    return (max(_work(g, gone) for g in gpus) + allreduce_seconds(gpus, gone)) / (1 - waited)


def communication_seconds(gpus: Sequence[Reading]) -> list[float]:
    """Each replica's time in the all-reduce per step, as its DDP hook measures it: it waits
    there for the slowest replica, then the all-reduce runs."""
    work = [_work(g, set()) for g in gpus]
    return [max(work) - w + allreduce_seconds(gpus) for w in work]


def communication_share(gpus: Sequence[Reading]) -> float:
    """The share of a step in communication itself: the slowest replica's (it waits for no
    one there)."""
    return min(communication_seconds(gpus)) / step_seconds(gpus)


@dataclass
class Histogram:
    """A cumulative per-step histogram of STEP_DURATION_BUCKETS, as a snapshot carries it."""

    buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_DURATION_BUCKETS))
    count: int = 0
    sum_seconds: float = 0.0

    def add(self, seconds: float, steps: int) -> None:
        self.count += steps
        self.sum_seconds += steps * seconds
        for i, bound in enumerate(STEP_DURATION_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += steps

    def durations(self) -> StepDurations:
        return StepDurations(
            bucket_counts=list(self.buckets), count=self.count, sum_seconds=self.sum_seconds
        )


@dataclass
class SyncTraining:
    """The running totals of one run, stepped one second at a time: one MirroredStrategy
    worker over all the host's GPUs, or (``ddp``) one worker per GPU that times its
    all-reduces."""

    ddp: bool = False
    # (wall time, seconds since the one before, what the GPUs read then)
    seconds: list[tuple[float, float, tuple[Reading, ...]]] = field(default_factory=list)
    steps: float = 0.0
    step_time: Histogram = field(default_factory=Histogram)
    # Each DDP worker's (its GPU's index) time in the all-reduce per step.
    allreduce: dict[int, Histogram] = field(default_factory=dict)

    def advance(self, at: float, gpus: Sequence[Reading]) -> float:
        """Training up to wall time ``at`` at the pace ``gpus`` allow (one second of it, the
        first time); the step time it ran at."""
        readings = tuple(gpus)
        took = at - self.seconds[-1][0] if self.seconds else 1.0
        self.seconds.append((at, took, readings))
        step = step_seconds(readings)
        before = math.floor(self.steps)
        self.steps += took / step
        done = math.floor(self.steps) - before
        self.step_time.add(step, done)
        if self.ddp:
            for i, seconds in enumerate(communication_seconds(readings)):
                self.allreduce.setdefault(i, Histogram()).add(seconds, done)
        return step

    def workers(self, gpus: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[int]]]:
        """Each worker and the indices (in ``gpus``) of the GPUs it trains on."""
        if self.ddp:
            return [(i, [i]) for i in range(len(gpus))]
        return [(0, list(range(len(gpus))))]

    def true_cost(self, start: float, end: float, causes: Iterable[Cause]) -> float:
        """The share of the examples over [start, end] that ``causes`` cost: 1 minus what was
        done over what would have been done without them."""
        gone = tuple(causes)
        inside = [(took, gpus) for at, took, gpus in self.seconds if start <= at <= end]
        done = sum(took / step_seconds(g) for took, g in inside)
        ideal = sum(took / step_seconds(g, gone) for took, g in inside)
        return 1 - done / ideal

    def snapshot(
        self,
        gpus: Sequence[Mapping[str, Any]],
        sequence: int,
        step: float,
        scaling: Scaling,
        extra: Mapping[str, Any],
        worker: int = 0,
    ) -> str:
        """Worker ``worker``'s push, on its GPUs of ``gpus`` (all of them, but in DDP)."""
        steps = math.floor(self.steps)
        mine = dict(self.workers(gpus))[worker]
        batch = BATCH * len(mine) // len(gpus)
        body = TrainingSnapshot(
            schema=1,
            session=f"report-test-{worker}",
            sequence=sequence,
            model="cnn",
            strategy="DistributedDataParallel" if self.ddp else "MirroredStrategy",
            replicas=len(mine),
            global_batch_size=BATCH,
            steps_total=steps,
            examples_total=batch * steps,
            step_duration_seconds=self.step_time.durations(),
            allreduce_seconds=self.allreduce[worker].durations() if self.ddp else None,
            examples_per_second=batch / step,
            epoch=1,
            loss=0.4,
            replica_devices=[
                Replica(
                    replica=i,
                    device=f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                    pci_bus_id=gpus[index]["pci_bus_id"],
                    memory_current_bytes=30e9,
                    memory_peak_bytes=40e9,
                )
                for i, index in enumerate(mine)
            ],
            scaling=scaling,
        ).model_dump(mode="json", by_alias=True, exclude_none=True)
        return json.dumps({**body, **extra})
