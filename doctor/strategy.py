"""Which cross-device ops MirroredStrategy will use for its all-reduce, decided as TF decides it.

TensorFlow 2.21, tensorflow/python/distribute/mirrored_strategy.py: with no devices given the
strategy takes every logical GPU, else the logical CPUs (``all_local_devices``); with no
``cross_device_ops`` given, ``MirroredExtended._make_collective_ops_with_fallbacks`` picks:

- CPUs and GPUs mixed: ``ReductionToOneDevice``;
- CPUs only: ``CollectiveAllReduce`` over RING;
- more logical than physical GPUs (one GPU split): ``CollectiveAllReduce`` over RING;
- otherwise ``CollectiveAllReduce`` over NCCL.

(``cross_device_ops.select_cross_device_ops``, the older ``NcclAllReduce`` choice, is no longer
what MirroredStrategy calls in eager TF 2.) NCCL itself must be in the build: without its
kernels (Windows builds) an NCCL collective cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    """The cross-device ops MirroredStrategy picks, and why it did not pick NCCL."""

    ops: str  # "CollectiveAllReduce" or "ReductionToOneDevice"
    implementation: str | None  # "NCCL" or "RING" for CollectiveAllReduce
    why_not_nccl: str | None

    @property
    def words(self) -> str:
        return self.ops if self.implementation is None else f"{self.ops} ({self.implementation})"


def mirrored_choice(logical_gpus: int, physical_gpus: int, nccl_in_build: bool) -> Choice:
    """The choice for a MirroredStrategy() built with no arguments on this process's devices.

    Its default device list is all GPUs or all CPUs, never a mix, so ReductionToOneDevice is
    only reached with an explicit device list.
    """
    if logical_gpus == 0:
        return Choice(
            "CollectiveAllReduce", "RING", "TensorFlow sees no GPU: the replicas are CPUs"
        )
    if physical_gpus < logical_gpus:
        why = f"{logical_gpus} logical GPUs on {physical_gpus} physical: virtual GPUs use RING"
        return Choice("CollectiveAllReduce", "RING", why)
    if not nccl_in_build:
        why = "this TensorFlow has no NCCL kernels: pass HierarchicalCopyAllReduce()"
        return Choice("CollectiveAllReduce", "NCCL", why)
    return Choice("CollectiveAllReduce", "NCCL", None)
