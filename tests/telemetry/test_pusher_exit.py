"""The pushes at process exit: every running pusher's final snapshot, within one deadline."""

from __future__ import annotations

import time

from mirrorwatch.telemetry import pusher as pusher_module
from mirrorwatch.telemetry.pusher import Endpoint, Pusher, stop_all
from tests.trainer.recorder import recording_exporter, silent_exporter
from tests.trainer.test_pusher import body


def running_pusher(url: str, worker: int) -> Pusher:
    pusher = Pusher(Endpoint.parse(url, "exit", worker, None), body, interval=3600)
    pusher.start()
    return pusher


def test_at_exit_every_running_pusher_sends_its_final_inactive_snapshot() -> None:
    with recording_exporter() as exporter:
        pushers = [running_pusher(exporter.url, worker) for worker in (0, 1)]
        stop_all()
    finals = {push.path: push.snapshot.active for push in exporter.pushes if push.snapshot}
    assert finals == {"/api/v1/runs/exit/workers/0": False, "/api/v1/runs/exit/workers/1": False}
    assert all(pusher.final_outcome is not None for pusher in pushers)
    assert not pusher_module._running  # stopped: a second exit handler has nothing to do


def test_at_exit_pushers_that_cannot_finish_cost_one_deadline_in_all() -> None:
    with silent_exporter() as url:
        for worker in range(3):
            running_pusher(url, worker)
        started = time.monotonic()
        stop_all(deadline_seconds=0.5)
        elapsed = time.monotonic() - started
    assert elapsed < 1.2  # 0.5 s for all three, not 0.5 s each


def test_a_stopped_pusher_is_not_stopped_again_at_exit() -> None:
    with recording_exporter() as exporter:
        pusher = running_pusher(exporter.url, 0)
        assert pusher.stop(1.0)
        pushes = len(exporter.pushes)
        stop_all()
    assert len(exporter.pushes) == pushes
