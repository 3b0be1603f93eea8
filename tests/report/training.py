"""Synthetic synchronous data-parallel training on a simulated host, whose true costs are known.

Each second the trainer reads what the host's GPUs report (/api/v1/gpus) and steps at the pace
synchronous data parallelism allows: every replica copies its batch over its PCIe link and
computes at its SM clock, the step waits for the slowest replica, then for the all-reduce;
a replica that waits for its input (a utilisation below the busiest's) holds every step up
by that share. Knowing each second's step time with and without a cause gives what that
cause truly cost, for the report's estimate (report/cost.py) to be held against.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mirrorwatch.alerts.queries import PCIE_LANE_BYTES_PER_SECOND
from mirrorwatch.exporter.ingest.schema import (
    STEP_DURATION_BUCKETS,
    Replica,
    Scaling,
    StepDurations,
    TrainingSnapshot,
)
from mirrorwatch.exporter.simulate.physics import PCIE_RECEIVE_BYTES_PER_SECOND

Cause = Literal["clock", "link", "input"]
BATCH = 64
# Per step at full SM clock; CLOCK_BOUND of it scales with the clock, the rest (memory-bound
# kernels) does not: the report's estimate assumes all of it does.
COMPUTE_SECONDS = 0.040
CLOCK_BOUND = 0.9
ALLREDUCE_SECONDS = 0.004
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
    )


def step_seconds(gpus: Sequence[Reading], without: Iterable[Cause] = ()) -> float:
    """One synchronous step's time on these GPUs; ``without`` the causes named there."""
    gone = set(without)
    work = []
    for gpu in gpus:
        clock = 1.0 if "clock" in gone else gpu.clock_ratio
        link = gpu.link_max_bytes_per_second if "link" in gone else gpu.link_bytes_per_second
        compute = COMPUTE_SECONDS * (CLOCK_BOUND / clock + 1 - CLOCK_BOUND)
        work.append(BATCH_BYTES / link + compute)
    busy = [g.utilization for g in gpus]
    waited = 0.0 if "input" in gone else max(busy) - min(busy)
    return (max(work) + ALLREDUCE_SECONDS) / (1 - waited)


@dataclass
class SyncTraining:
    """The running totals of one worker's run, stepped one second at a time."""

    # (wall time, seconds since the one before, what the GPUs read then)
    seconds: list[tuple[float, float, tuple[Reading, ...]]] = field(default_factory=list)
    steps: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_DURATION_BUCKETS))
    step_time_sum: float = 0.0

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
        self.step_time_sum += done * step
        for i, bound in enumerate(STEP_DURATION_BUCKETS):
            if step <= bound:
                self.buckets[i] += done
        return step

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
    ) -> str:
        steps = math.floor(self.steps)
        body = TrainingSnapshot(
            schema=1,
            session="report-test",
            sequence=sequence,
            model="cnn",
            strategy="MirroredStrategy",
            replicas=len(gpus),
            global_batch_size=BATCH,
            steps_total=steps,
            examples_total=BATCH * steps,
            step_duration_seconds=StepDurations(
                bucket_counts=list(self.buckets),
                count=steps,
                sum_seconds=self.step_time_sum,
            ),
            examples_per_second=BATCH / step,
            epoch=1,
            loss=0.4,
            replica_devices=[
                Replica(
                    replica=i,
                    device=f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                    pci_bus_id=gpu["pci_bus_id"],
                    memory_current_bytes=30e9,
                    memory_peak_bytes=40e9,
                )
                for i, gpu in enumerate(gpus)
            ],
            scaling=scaling,
        ).model_dump(mode="json", by_alias=True, exclude_none=True)
        return json.dumps({**body, **extra})
