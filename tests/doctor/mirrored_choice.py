"""Run as a script: what a real MirroredStrategy() picks over two logical CPUs, as JSON.

Printed beside mirrorwatch.doctor.strategy's replay for the same devices, so a test can hold
the replay to TensorFlow's own decision.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from tensorflow.python.framework import kernels

from mirrorwatch.doctor.strategy import mirrored_choice

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy()
extended = strategy.extended
ops = type(extended._cross_device_ops).__name__
options = getattr(extended, "_communication_options", None)
implementation = None if options is None else options.implementation.name
replay = mirrored_choice(
    logical_gpus=len(tf.config.list_logical_devices("GPU")),
    physical_gpus=len(tf.config.list_physical_devices("GPU")),
    nccl_in_build=bool(kernels.get_registered_kernels_for_op("NcclAllReduce")),
)
sys.stdout.write(
    json.dumps(
        {
            "tensorflow": {"ops": ops, "implementation": implementation},
            "replay": {"ops": replay.ops, "implementation": replay.implementation},
            "replicas": strategy.num_replicas_in_sync,
        }
    )
    + "\n"
)
