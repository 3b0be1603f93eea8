"""Which worker this process is, and the run id all of a job's processes share.

The worker is the ``torch.distributed`` rank where a process group exists (after
``init_process_group``), else ``RANK`` (set by torchrun), else 0.
"""

from __future__ import annotations

import logging
import os

import torch.distributed as dist

from mirrorwatch.contract.vocabulary import MAX_WORKER
from mirrorwatch.telemetry.client import fresh_run_id

log = logging.getLogger("mirrorwatch.torch")


def grouped() -> bool:
    """Whether this process is in a default process group."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's worker number: the rank, else ``RANK``, else 0; ValueError if ``RANK``
    is set to something that is no worker number."""
    if grouped():
        return dist.get_rank()
    text = os.environ.get("RANK", "").strip()
    if not text:
        return 0
    if not text.isdigit() or int(text) > MAX_WORKER:
        raise ValueError(f"RANK must be a worker number 0..{MAX_WORKER}, got {text!r}")
    return int(text)


def world_size() -> int:
    """Processes in the job: the process group's size, else ``WORLD_SIZE``, else 1."""
    if grouped():
        return dist.get_world_size()
    text = os.environ.get("WORLD_SIZE", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else 1


def shared_run_id() -> str:
    """Rank 0's fresh run id on every rank of the process group: a collective, so every rank
    must ask (each constructs its monitor); a fresh id of its own outside a group."""
    run = fresh_run_id()
    if not grouped() or dist.get_world_size() == 1:
        return run
    # broadcast_object_list pickles through a tensor on the backend's device (NCCL: the
    # current CUDA device, which torchrun scripts set before building their model).
    shared: list[object] = [run]
    dist.broadcast_object_list(shared, src=0)
    value = shared[0]
    if not isinstance(value, str):
        raise TypeError(f"rank 0 sent {value!r} as the run id")
    return value
