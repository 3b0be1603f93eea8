"""TensorFlow for the trainer's tests: two logical CPU devices, configured once per session."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def tf() -> Any:
    """TensorFlow with its one CPU split into two logical devices, before anything else runs."""
    import tensorflow

    cpus = tensorflow.config.list_physical_devices("CPU")
    # RuntimeError: something in this process started TensorFlow's devices first (checked below).
    with contextlib.suppress(RuntimeError):
        tensorflow.config.set_logical_device_configuration(
            cpus[0], [tensorflow.config.LogicalDeviceConfiguration()] * 2
        )
    if len(tensorflow.config.list_logical_devices("CPU")) < 2:
        pytest.fail("TensorFlow's devices were initialised before the trainer tests split the CPU")
    return tensorflow


@pytest.fixture(scope="session")
def strategy(tf: Any) -> Any:
    """MirroredStrategy over the two logical CPUs: replicas = 2, as on a dual-GPU host."""
    devices = [device.name for device in tf.config.list_logical_devices("CPU")][:2]
    return tf.distribute.MirroredStrategy(devices)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No mirrorwatch or TF_CONFIG settings from the developer's shell leak into a test."""
    for name in (
        "MIRRORWATCH_URL",
        "MIRRORWATCH_RUN",
        "MIRRORWATCH_INGEST_TOKEN",
        "MIRRORWATCH_REPLICA_PCI_BUS_IDS",
        "TF_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
