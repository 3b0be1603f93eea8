"""The snapshot names the worker's process, so the exporter can tell the run's GPU processes
from others (docs/api.md, "Which processes are the run's")."""

from __future__ import annotations

import json
import os

from mirrorwatch.contract.procfs import pid_namespace
from mirrorwatch.telemetry.meter import StepMeter
from mirrorwatch.telemetry.snapshot import SnapshotBuilder
from tests.trainer.test_snapshot import FakeProbe


def test_every_push_carries_the_workers_pid_and_pid_namespace() -> None:
    meter = StepMeter()
    snapshots = SnapshotBuilder(meter, "session-1", 32, probe=FakeProbe())
    snapshots.describe_job("resnet", "MirroredStrategy", [], batch_size=None)
    meter.begin_training()
    body = json.loads(snapshots.body(active=True, sequence=1, dropped=0))
    assert body["pid"] == os.getpid()
    own = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]" on the host itself
    assert body["pid_namespace"] == int(own.removeprefix("pid:[").removesuffix("]"))
    assert body["pid_namespace"] == pid_namespace()
