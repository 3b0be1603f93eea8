"""The callback on Keras 3 and on tf_keras, chosen as TensorFlow chooses: TF_USE_LEGACY_KERAS."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorwatch.trainer.callback import worker_from_tf_config
from mirrorwatch.trainer.keras_api import uses_tf_keras
from tests.hang import HANG_SECONDS
from tests.trainer.recorder import recording_exporter

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("value", "legacy"),
    # tensorflow/python/util/lazy_loader.py, KerasLazyLoader._initialize: exactly these three.
    [("1", True), ("true", True), ("True", True), ("TRUE", False), ("yes", False), ("0", False)],
)
def test_tf_keras_is_chosen_by_the_values_tensorflow_takes(value: str, legacy: bool) -> None:
    assert uses_tf_keras({"TF_USE_LEGACY_KERAS": value}) is legacy
    assert uses_tf_keras({}) is False


def test_tf_keras_is_the_release_of_the_installed_tensorflow() -> None:
    # tf-keras X.Y works with TensorFlow X.Y only (its own requirement, tensorflow~=X.Y).
    tensorflow = importlib.metadata.version("tensorflow-cpu").split(".")[:2]
    assert importlib.metadata.version("tf-keras").split(".")[:2] == tensorflow


@pytest.mark.parametrize(
    ("tf_config", "worker"),
    [
        (None, 0),
        ("", 0),
        ('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}', 1),
        # TensorFlow's numbering (multi_worker_util.id_in_cluster): the chief first.
        ('{"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief"}}', 0),
        (
            '{"cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"]},'
            ' "task": {"type": "worker", "index": 1}}',
            2,
        ),
        ("{not json", 0),
        ('{"task": "worker"}', 0),
    ],
)
def test_worker_is_the_task_number_tensorflow_gives_it(tf_config: str | None, worker: int) -> None:
    assert worker_from_tf_config(tf_config) == worker


def test_tf_keras_fit_reports_the_same_snapshots_and_trains_the_same() -> None:
    # Its own process: Keras is chosen once per process, and this one already runs Keras 3.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIRRORWATCH_", "TF_"))}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    with recording_exporter() as exporter:
        result = subprocess.run(
            [sys.executable, "-m", "tests.trainer.tf_keras_fit", exporter.url],
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            cwd=REPO,
            env=env,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    fit = json.loads(result.stdout)
    assert fit["keras"] == "tf_keras"
    assert fit["callback_bases"][1] == "tf_keras.src.callbacks.Callback"
    assert not fit["keras_3_imported"]  # the callback costs no second framework
    assert fit["instrumented"] == fit["plain"]  # telemetry changes nothing in training
    assert not exporter.invalid
    final = exporter.snapshots[-1]
    assert not final.active
    assert final.steps_total == fit["steps"]
    assert final.step_duration_seconds.count == fit["steps"]
    assert final.examples_total == fit["examples"]  # each short last batch as it was
    assert (final.replicas, final.strategy, final.model) == (2, "MirroredStrategy", "tiny")
    assert (final.global_batch_size, final.epoch) == (16, 2)  # the epoch from 0
    assert final.loss == pytest.approx(fit["instrumented"][-1])
    assert final.examples_per_second is not None
    assert final.examples_per_second > 0
    assert {push.path for push in exporter.pushes} == {"/api/v1/runs/tf-keras/workers/0"}
