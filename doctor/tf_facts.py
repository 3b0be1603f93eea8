"""What TensorFlow says about itself and the GPUs it sees, read once (TensorFlow typed as Any)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CUDNN_SONAME = re.compile(r"libcudnn\.so\.(\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class TfGpu:
    name: str
    compute_capability: tuple[int, int] | None


@dataclass(frozen=True)
class TfFacts:
    """TensorFlow's build and devices; ``cudnn_loaded`` is the version of the libcudnn mapped
    into this process (None: none loaded yet)."""

    version: str
    build_info: dict[str, Any]
    gpus: list[TfGpu]
    logical_gpus: int
    nccl_kernels: bool
    cudnn_loaded: str | None
    cuda_visible_devices: str | None = field(default=None)

    @property
    def is_cuda_build(self) -> bool:
        return bool(self.build_info.get("is_cuda_build"))


def loaded_cudnn(maps: Path = Path("/proc/self/maps")) -> str | None:
    """The libcudnn version mapped into this process, the way tf_env_collect.sh's LD_DEBUG looks
    for the cuDNN really loaded rather than the one the build names."""
    try:
        text = maps.read_text()
    except OSError:
        return None
    versions = sorted(set(_CUDNN_SONAME.findall(text)), key=len, reverse=True)
    return versions[0] if versions else None


def _capability(tf: Any, device: Any) -> tuple[int, int] | None:
    details = tf.config.experimental.get_device_details(device)
    capability = details.get("compute_capability")
    return None if capability is None else (int(capability[0]), int(capability[1]))


def read_tf_facts() -> TfFacts | None:
    """TensorFlow's facts; None when TensorFlow is not installed (the base install)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
        from tensorflow.python.framework import kernels
    except ImportError:
        return None
    physical = tf.config.list_physical_devices("GPU")
    gpus = [
        TfGpu(
            tf.config.experimental.get_device_details(d).get("device_name", d.name),
            _capability(tf, d),
        )
        for d in physical
    ]
    return TfFacts(
        version=tf.__version__,
        build_info=dict(tf.sysconfig.get_build_info()),
        gpus=gpus,
        logical_gpus=len(tf.config.list_logical_devices("GPU")),
        nccl_kernels=bool(kernels.get_registered_kernels_for_op("NcclAllReduce")),
        cudnn_loaded=loaded_cudnn(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
