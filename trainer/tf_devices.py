"""What TensorFlow says about the replicas' devices (the callback's device probe); the only
place that asks it. NVML is asked by mirrorwatch.telemetry.nvml.

TensorFlow is imported lazily and typed as ``Any`` here, so the rest of the package stays
strictly typed. Every function answers "don't know" (an empty result, None) instead of raising.
"""

from __future__ import annotations

import logging
from typing import Any

from mirrorwatch.telemetry import devices
from mirrorwatch.telemetry.nvml import nvml_uuids

__all__ = [
    "batch_log_replicas",
    "gpu_bus_ids",
    "gpu_descriptions",
    "gpu_uuids",
    "memory_bytes",
    "nvml_uuids",
    "replica_devices",
    "replicas_in_sync",
    "strategy_name",
]

log = logging.getLogger("mirrorwatch.trainer")

_DEFAULT_STRATEGY_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def replica_devices(strategy: Any) -> list[str]:
    """The strategy's replica devices in replica order (one for the default strategy)."""
    try:
        return [str(device) for device in strategy.extended.worker_devices]
    except (AttributeError, RuntimeError, NotImplementedError):
        pass  # the default strategy has no worker_devices: one replica, on the first device
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    return [str(gpus[0].name)] if gpus else [_DEFAULT_STRATEGY_CPU]


def strategy_name(strategy: Any) -> str:
    """The strategy's name as TensorFlow exports it: ``MultiWorkerMirroredStrategy`` for the
    class TensorFlow defines as ``CollectiveAllReduceStrategy`` (its ``tf_export`` name)."""
    cls = type(strategy)
    exported = cls.__dict__.get("_tf_api_names") or ()  # set on the class by tf_export
    names = [str(name).rsplit(".", 1)[-1] for name in exported if str(name).startswith("distr")]
    return names[0] if names else cls.__name__.lstrip("_")


def replicas_in_sync(strategy: Any) -> int | None:
    """Replicas of the whole run: every worker's, under MultiWorkerMirroredStrategy."""
    try:
        count = int(strategy.num_replicas_in_sync)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    return count if count > 0 else None


def batch_log_replicas(strategy: Any, framework: str) -> int:
    """How many replicas' values tf_keras adds up in each batch's logs under ``strategy``.

    tf_keras reduces a training step's per-replica outputs with ``reduction="auto"``, which
    is "sum" off TPUs, and under a MultiWorkerMirroredStrategy in multi-worker mode sums them
    over every replica of the cluster (``strategy.reduce("SUM", ...)``: ``reduce_per_replica``
    in tf_keras/src/engine/training.py). Each replica's value is already the loss's mean, so a
    batch's ``loss`` is the replicas in sync times it (the epoch's logs are not: tf_keras reads
    those from the metrics). 1 everywhere else.
    """
    if not framework.startswith("tf_keras"):
        return 1
    try:
        if not strategy.extended._in_multi_worker_mode():  # CollectiveAllReduceExtended only
            return 1
    except AttributeError:
        return 1
    return replicas_in_sync(strategy) or 1


def gpu_descriptions() -> tuple[list[tuple[str, str]], list[int]]:
    """``(device name, physical_device_desc)`` of each GPU TensorFlow lists, and logical GPUs per
    physical GPU (more than one where a GPU was split with a logical device configuration)."""
    import tensorflow as tf
    from tensorflow.python.client import device_lib
    from tensorflow.python.eager import context

    try:
        physical = tf.config.list_physical_devices("GPU")
    except (RuntimeError, ValueError):
        return [], []
    if not physical:
        return [], []
    per_physical = []
    for device in physical:
        try:
            configuration = tf.config.get_logical_device_configuration(device)
        except (RuntimeError, ValueError):
            configuration = None
        per_physical.append(len(configuration) if configuration else 1)
    try:
        listed = device_lib.list_local_devices(context.context().config)
    except (RuntimeError, ValueError, TypeError):
        try:
            listed = device_lib.list_local_devices()
        except (RuntimeError, ValueError) as error:
            log.info("mirrorwatch: TensorFlow's device list is unavailable: %s", error)
            return [], per_physical
    return [
        (str(device.name), str(device.physical_device_desc))
        for device in listed
        if device.device_type == "GPU"
    ], per_physical


def gpu_bus_ids() -> dict[int, str]:
    """Logical GPU index -> PCI bus id, from TensorFlow's device descriptions (the probe's)."""
    descriptions, per_physical = gpu_descriptions()
    return devices.gpu_bus_ids(descriptions, per_physical)


def gpu_uuids() -> dict[int, str]:
    """TensorFlow names no GPU's UUID: NVML is asked by bus id instead."""
    return {}


def memory_bytes(gpu: int) -> tuple[float, float] | None:
    """``(current, peak)`` bytes TensorFlow has allocated on logical GPU ``gpu``, or None."""
    import tensorflow as tf

    try:
        info = tf.config.experimental.get_memory_info(f"GPU:{gpu}")
    except (RuntimeError, ValueError, TypeError):
        return None
    return float(info["current"]), float(info["peak"])
