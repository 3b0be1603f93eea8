"""The expected speed-up of two replicas: one replica's step compute time against its all-reduce.

Weak scaling, as MirroredStrategy is meant to be used (each replica keeps its batch, the global
batch doubles), and no overlap of the all-reduce with the backward pass: Keras under
MirroredStrategy reduces the gradients after the backward pass, so the estimate is
``n * t_compute / (t_compute + t_allreduce)``. The input pipeline is assumed to keep up.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorwatch.doctor.probes import size_words


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
        if (factor is None or self.step_seconds is None) and self.partial:
            return f"all-reduce of {size} takes {reduce_ms:.1f} ms ({self.partial})"
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
