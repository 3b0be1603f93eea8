"""The expected speed-up of two replicas: one replica's step compute time against its all-reduce.

Weak scaling, as MirroredStrategy is meant to be used (each replica keeps its batch, the global
batch doubles), and no overlap of the all-reduce with the backward pass: Keras under
MirroredStrategy reduces the gradients after the backward pass, so the estimate is
``n * t_compute / (t_compute + t_allreduce)``. The input pipeline is assumed to keep up.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mirrorwatch.doctor.probes import size_words

BYTES_PER_PARAMETER = 4  # float32 gradients, also under mixed_float16 (variables stay float32)
_WARMUP_STEPS = 2


@dataclass(frozen=True)
class Speedup:
    replicas: int
    gradient_bytes: int
    step_seconds: float | None
    allreduce_seconds: float
    # Why the step time rests on fewer steps than asked (the --probe-seconds cap), or "".
    partial: str = ""

    @property
    def factor(self) -> float | None:
        if self.step_seconds is None:
            return None
        return self.replicas * self.step_seconds / (self.step_seconds + self.allreduce_seconds)

    def as_json(self) -> dict[str, object]:
        factor = self.factor
        return {
            "factor": None if factor is None else round(factor, 3),
            "ideal": float(self.replicas),
            "replicas": self.replicas,
            "gradient_bytes": self.gradient_bytes,
            "step_compute_seconds": self.step_seconds,
            "allreduce_seconds": self.allreduce_seconds,
            "assumptions": (
                "per-replica batch kept (global batch x replicas); all-reduce after the backward "
                "pass, not overlapped; input pipeline keeps up; float32 gradients"
            ),
            "partial": self.partial or None,
            "text": self.words,
        }

    @property
    def words(self) -> str:
        factor = self.factor
        reduce_ms = self.allreduce_seconds * 1000
        size = size_words(self.gradient_bytes)
        if factor is None or self.step_seconds is None:
            return (
                f"all-reduce of {size} takes {reduce_ms:.1f} ms; "
                "give --model (or --step-seconds) for the speed-up"
            )
        said = (
            f"expect about {factor:.2f}x (ideal {self.replicas}x): a step's compute "
            f"{self.step_seconds * 1000:.1f} ms, the all-reduce of {size} {reduce_ms:.1f} ms"
        )
        return f"{said} ({self.partial})" if self.partial else said


@dataclass(frozen=True)
class ModelTiming:
    """A model's gradient size and one replica's step time, the mean of ``steps`` timed steps
    (0: the cap left none, and it is the last warm-up step's); ``capped``: the cap stopped it."""

    gradient_bytes: int
    step_seconds: float
    steps: int
    capped: bool

    @property
    def partial(self) -> str:
        if not self.capped:
            return ""
        if self.steps == 0:
            return "partial: the --probe-seconds cap came during the warm-up; its last step's time"
        timed = f"{self.steps} timed step{'' if self.steps == 1 else 's'}"
        return f"partial: {timed}, then the --probe-seconds cap"


def model_step(
    model_name: str,
    device: str,
    batch_size: int,
    steps: int,
    *,
    budget_seconds: float = math.inf,
    progress: Callable[[str], None] = lambda _: None,
) -> ModelTiming:
    """A mirrorwatch-train model's gradient bytes and one replica's measured step time: steps
    until ``steps`` are timed or ``budget_seconds`` are spent (a step in progress finishes)."""
    import tensorflow as tf

    from mirrorwatch.trainer.models import Job, build_model, dataset, default_image_size

    started = time.perf_counter()
    job = Job(model=model_name, image_size=default_image_size(model_name))
    with tf.device(device):
        model = build_model(job)
        parameters = sum(int(tf.size(v)) for v in model.trainable_variables)
        total = _WARMUP_STEPS + steps
        progress(
            f"{model_name}: {parameters:,} parameters "
            f"({size_words(parameters * BYTES_PER_PARAMETER)} of gradients); "
            f"{total} steps of batch {batch_size} on {device} ({_WARMUP_STEPS} to warm up)"
        )
        features, labels = next(iter(dataset(job, batch_size)))
        seconds: list[float] = []
        for step in range(total):
            start = time.perf_counter()
            loss: Any = model.train_on_batch(features, labels)
            float(loss if not isinstance(loss, list) else loss[0])  # the step has finished
            seconds.append(time.perf_counter() - start)
            warm = " (warm-up)" if step < _WARMUP_STEPS else ""
            progress(f"{model_name} step {step + 1}/{total}: {seconds[-1]:.1f} s{warm}")
            if time.perf_counter() - started > budget_seconds and step + 1 < total:
                break
    timed = seconds[_WARMUP_STEPS:]
    measured = timed or seconds[-1:]
    return ModelTiming(
        gradient_bytes=parameters * BYTES_PER_PARAMETER,
        step_seconds=sum(measured) / len(measured),
        steps=len(timed),
        capped=len(seconds) < total,
    )
