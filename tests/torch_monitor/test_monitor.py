"""MirrorwatchMonitor in a plain PyTorch loop on CPU, pushing to a loopback recorder."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

import pytest
import torch

from mirrorwatch.torch import MirrorwatchMonitor
from tests.hang import HANG_SECONDS
from tests.trainer.recorder import recording_exporter, unused_url

STEPS = 30
BATCH = 8


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No settings from the developer's shell or a torchrun around pytest leak in."""
    for name in (
        "MIRRORWATCH_URL",
        "MIRRORWATCH_RUN",
        "MIRRORWATCH_INGEST_TOKEN",
        "MIRRORWATCH_REPLICA_PCI_BUS_IDS",
        "RANK",
        "WORLD_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def train(monitor: MirrorwatchMonitor, model: torch.nn.Module, steps: int = STEPS) -> list[float]:
    """A plain loop of ``steps`` SGD steps on random data; each step's loss."""
    torch.manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(BATCH, 4), torch.randn(BATCH, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(BATCH, loss)
        losses.append(loss.item())
    return losses


def test_a_plain_loop_reports_exact_steps_examples_and_a_loss_of_the_loop() -> None:
    with recording_exporter() as exporter:
        with MirrorwatchMonitor(url=exporter.url, run="plain", interval=0.2) as monitor:
            losses = train(monitor, monitor.attach(torch.nn.Linear(4, 1)))
        final = exporter.snapshots[-1]
    assert not exporter.invalid
    assert exporter.pushes[-1].path == "/api/v1/runs/plain/workers/0"
    assert final.active is False
    assert (final.steps_total, final.examples_total) == (STEPS, STEPS * BATCH)
    # The first step has no step before it to be timed from: the histogram holds the others.
    assert final.step_duration_seconds.count == STEPS - 1
    assert final.loss in [pytest.approx(loss) for loss in losses]
    assert (final.model, final.strategy, final.replicas) == ("Linear", None, 1)
    assert [r.device for r in final.replica_devices] == ["cpu"]
    assert final.allreduce_seconds is None  # no DDP: nothing is all-reduced


def test_the_epoch_is_the_last_one_a_step_gave_from_0_and_a_short_batch_its_own() -> None:
    with recording_exporter() as exporter:
        with MirrorwatchMonitor(url=exporter.url, run="epochs", interval=60) as monitor:
            for epoch in range(3):
                for examples in (BATCH, BATCH, 3):  # a short last batch each epoch
                    monitor.step(examples, epoch=epoch)
            monitor.step(BATCH)  # no epoch given: the last one stays
            monitor.step(BATCH, epoch=-1)  # no epoch: counted, and said once
        final = exporter.snapshots[-1]
    assert (final.steps_total, final.examples_total, final.epoch) == (11, 3 * 19 + 2 * BATCH, 2)


def test_steps_grow_push_by_push_in_one_session() -> None:
    with (
        recording_exporter() as exporter,
        MirrorwatchMonitor(url=exporter.url, run="growing", interval=0.05) as monitor,
    ):
        model = torch.nn.Linear(4, 1)
        for _ in range(4):
            train(monitor, model, steps=5)
            time.sleep(0.15)

    snapshots = exporter.snapshots
    assert len({s.session for s in snapshots}) == 1
    assert [s.sequence for s in snapshots] == sorted({s.sequence for s in snapshots})
    steps = [s.steps_total for s in snapshots]
    assert steps == sorted(steps)
    assert steps[-1] == 20
    assert len(set(steps)) >= 3


class SpyLoss(torch.Tensor):
    """A loss tensor that records which threads read its value."""

    readers: list[int] = []  # noqa: RUF012  # shared by every view of the tensor

    def item(self) -> Any:
        SpyLoss.readers.append(threading.get_ident())
        return super().item()


def test_a_loss_tensor_is_read_on_the_pusher_thread_at_most_once_per_push() -> None:
    SpyLoss.readers.clear()
    with recording_exporter() as exporter:
        monitor = MirrorwatchMonitor(url=exporter.url, run="lazy-loss", interval=0.1)
        for step in range(200):
            monitor.step(BATCH, torch.tensor(float(step)).as_subclass(SpyLoss))
            if step % 50 == 0:
                time.sleep(0.25)
        monitor.close()
    assert SpyLoss.readers, "the loss was never read"
    assert threading.get_ident() not in SpyLoss.readers  # never on the training thread
    assert len(SpyLoss.readers) <= len(exporter.pushes)
    losses = [s.loss for s in exporter.snapshots if s.loss is not None]
    assert losses == sorted(losses)  # each the first step's after the push before it
    # The pushes during the last pause asked for a loss: the first step after it answered.
    assert 151.0 <= losses[-1] <= 199.0


def test_a_snapshot_carries_the_first_steps_loss_after_the_push_before_it() -> None:
    with recording_exporter() as exporter:
        monitor = MirrorwatchMonitor(url=exporter.url, run="loss-slot", interval=60.0)
        deadline = time.monotonic() + 5.0
        while not exporter.pushes and time.monotonic() < deadline:
            time.sleep(0.01)  # the first push goes out at once and asks for a loss
        monitor.step(BATCH, torch.tensor(1.0))
        second = torch.tensor(2.0)
        monitor.step(BATCH, second)
        freed = weakref.ref(second)
        del second
        monitor.close()
    assert freed() is None  # nobody asked for the second step's loss: step() did not keep it
    assert exporter.snapshots[-1].loss == 1.0


def test_dataparallel_on_cpu_is_one_replica_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        recording_exporter() as exporter,
        caplog.at_level(logging.WARNING, "mirrorwatch.torch"),
        MirrorwatchMonitor(url=exporter.url, run="dp-cpu", interval=0.1) as monitor,
    ):
        model = monitor.attach(torch.nn.DataParallel(torch.nn.Linear(4, 1)))
        train(monitor, model)
    final = exporter.snapshots[-1]
    assert (final.strategy, final.model, final.replicas) == ("DataParallel", "Linear", 1)
    assert [r.device for r in final.replica_devices] == ["cpu"]
    said = [r for r in caplog.records if "one replica" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_cpu_replicas_stand_on_the_bus_id_they_are_given(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MIRRORWATCH_REPLICA_PCI_BUS_IDS", "00000000:3B:00.0")
    with (
        recording_exporter() as exporter,
        MirrorwatchMonitor(url=exporter.url, run="bus-id", interval=0.1) as monitor,
    ):
        train(monitor, torch.nn.Linear(4, 1), steps=3)

    assert [r.pci_bus_id for r in exporter.snapshots[-1].replica_devices] == ["0000:3b:00.0"]


def test_the_worker_is_rank_from_the_environment_without_a_process_group(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("RANK", "3")
    with (
        recording_exporter() as exporter,
        MirrorwatchMonitor(url=exporter.url, run="ranked", interval=0.1) as monitor,
    ):
        monitor.step(BATCH)

    assert monitor.worker == 3
    assert exporter.pushes[-1].path == "/api/v1/runs/ranked/workers/3"


def test_a_rank_that_is_no_worker_number_is_refused_by_name(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK must be a worker number"):
        MirrorwatchMonitor(url=unused_url())


def test_a_missing_exporter_or_a_bad_step_never_reaches_training(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "mirrorwatch.torch"):
        monitor = MirrorwatchMonitor(url=unused_url(), run="alone", interval=0.1)
        train(monitor, torch.nn.Linear(4, 1), steps=5)
        monitor.step("eight")  # type: ignore[arg-type]  # a caller's mistake
        monitor.step("eight")  # type: ignore[arg-type]
        time.sleep(0.3)
        started = time.monotonic()
        monitor.close()
        monitor.close()  # idempotent
        elapsed = time.monotonic() - started
    assert monitor.steps_total == 5
    assert monitor.telemetry_dropped_total >= 1
    assert elapsed < 1.8  # the final push waits one second at most
    bad_steps = [r for r in caplog.records if "error in step" in r.getMessage()]
    assert len(bad_steps) == 1
    assert any("cannot reach the exporter" in r.getMessage() for r in caplog.records)


def test_importing_the_monitor_starts_no_tensorflow_and_mirrorwatch_imports_no_torch() -> None:
    program = (
        "import sys\n"
        "import mirrorwatch.telemetry.client, mirrorwatch.trainer, mirrorwatch.exporter.app\n"
        "assert 'torch' not in sys.modules, 'mirrorwatch imported torch'\n"
        "from mirrorwatch.torch import MirrorwatchMonitor\n"
        "assert 'torch' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('keras', 'tensorflow')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_time_between_pause_and_resume_is_in_no_step() -> None:
    with recording_exporter() as exporter:
        with MirrorwatchMonitor(url=exporter.url, run="paused", interval=60) as monitor:
            monitor.step(BATCH)
            monitor.pause()
            time.sleep(0.3)  # evaluation
            monitor.resume()
            monitor.step(BATCH)
        durations = exporter.snapshots[-1].step_duration_seconds
    assert durations.count == 1  # the second step, timed from resume(); the first from nothing
    assert durations.sum_seconds < 0.3
