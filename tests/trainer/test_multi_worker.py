"""A real two-worker MultiWorkerMirroredStrategy fit on loopback, on tf_keras, each worker
pushing to its own recording exporter: the numbers each reports and how they add up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.hang import HANG_SECONDS
from tests.ports import free_port
from tests.trainer.multi_worker_fit import BATCH, STEPS
from tests.trainer.recorder import recording_exporter

REPO = Path(__file__).resolve().parents[2]


def test_two_workers_report_the_runs_steps_and_their_shares_of_its_examples() -> None:
    cluster = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIRRORWATCH_", "TF_"))}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    with recording_exporter() as host_a, recording_exporter() as host_b:
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.trainer.multi_worker_fit", host.url],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env={
                    **env,
                    "TF_CONFIG": json.dumps(
                        {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": i}}
                    ),
                },
            )
            for i, host in enumerate((host_a, host_b))
        ]
        outputs = [worker.communicate(timeout=HANG_SECONDS) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]
    fits = [json.loads(out) for out, _ in outputs]
    assert [fit["worker"] for fit in fits] == [0, 1]  # the TF_CONFIG task index
    assert fits[0]["loss"] == fits[1]["loss"]  # synchronous: one model
    finals = [host_a.snapshots[-1], host_b.snapshots[-1]]
    assert not host_a.invalid
    assert not host_b.invalid
    assert {push.path for push in host_a.pushes} == {"/api/v1/runs/multi-worker/workers/0"}
    assert {push.path for push in host_b.pushes} == {"/api/v1/runs/multi-worker/workers/1"}
    for final, fit in zip(finals, fits, strict=True):
        assert not final.active
        assert final.strategy == "MultiWorkerMirroredStrategy"
        assert final.steps_total == STEPS  # the run's steps, on every worker
        assert final.replicas == 1  # its own: one CPU
        assert final.global_batch_size == BATCH  # the run's
        assert final.examples_total == STEPS * BATCH // 2  # its half of every global batch
        # tf_keras sums a batch's loss over the cluster's replicas; the callback does not.
        assert final.loss == fit["loss"]
    assert sum(final.examples_total or 0 for final in finals) == STEPS * BATCH
