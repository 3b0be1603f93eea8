"""MirrorwatchCallback inside real Keras fits under MirroredStrategy over two logical CPUs."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.trainer import MirrorwatchCallback
from mirrorwatch.trainer import callback as callback_module
from tests.trainer.recorder import recording_exporter, silent_exporter, unused_url
from tests.trainer.training import EXAMPLES, FEATURES, fit, tiny_model

pytestmark = pytest.mark.usefixtures("clean_env")
STEPS_PER_EPOCH = EXAMPLES // 16


def test_mirrored_fit_reports_steps_examples_and_replicas(strategy: Any) -> None:
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(
            url=exporter.url, run="unit-1", global_batch_size=16, interval=0.05
        )
        losses = fit(tiny_model(strategy), [callback], epochs=3)
    assert not exporter.invalid
    final = exporter.snapshots[-1]
    assert not final.active
    assert final.steps_total == 3 * STEPS_PER_EPOCH
    assert final.examples_total == 3 * EXAMPLES
    assert final.step_duration_seconds.count == 3 * STEPS_PER_EPOCH
    assert len(final.step_duration_seconds.bucket_counts) == len(STEP_DURATION_BUCKETS)
    assert (final.replicas, final.strategy, final.model) == (2, "MirroredStrategy", "tiny")
    assert final.global_batch_size == 16
    # Its float32 gradients: Dense(16) over FEATURES inputs and Dense(1), weights and biases.
    assert final.gradient_bytes == 4 * ((FEATURES * 16 + 16) + (16 * 1 + 1))
    assert final.epoch == 2  # from 0: the last epoch's index
    assert final.loss is not None
    assert final.loss > 0
    assert final.examples_per_second is not None
    assert final.examples_per_second > 0
    assert [r.device.rsplit("/", 1)[1] for r in final.replica_devices] == [
        "device:CPU:0",
        "device:CPU:1",
    ]
    assert losses[-1] > 0


def test_snapshots_of_one_session_have_increasing_sequence_and_growing_totals(
    strategy: Any,
) -> None:
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="unit-2", interval=0.01)
        fit(tiny_model(strategy), [callback], epochs=4)
    # Arrival order is not the pusher's: on a loaded machine a push that timed out on the
    # client can still be handled after the next one (the exporter orders by `sequence`).
    snapshots = sorted(exporter.snapshots, key=lambda s: s.sequence)
    assert len({s.session for s in snapshots}) == 1
    sequences = [s.sequence for s in snapshots]
    assert len(set(sequences)) == len(sequences)
    steps = [s.steps_total for s in snapshots]
    assert steps == sorted(steps)
    assert {push.path for push in exporter.pushes} == {"/api/v1/runs/unit-2/workers/0"}


def test_steps_per_execution_above_one_counts_every_step(tf: Any) -> None:
    # The default strategy: MirroredStrategy fails with steps_per_execution > 1 (keras#19246).
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="unit-3", global_batch_size=8)
        fit(tiny_model(steps_per_execution=4), [callback], epochs=2, batch_size=8)
    final = exporter.snapshots[-1]
    assert final.steps_total == 2 * EXAMPLES // 8
    assert final.step_duration_seconds.count == 2 * EXAMPLES // 8
    assert final.replicas == 1


def test_without_a_global_batch_size_examples_are_still_counted(strategy: Any) -> None:
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="unit-4")
        fit(tiny_model(strategy), [callback])
    final = exporter.snapshots[-1]
    assert final.examples_total == 2 * EXAMPLES
    assert final.examples_per_second is not None  # at the mean batch of the examples counted
    assert final.global_batch_size is None
    assert final.steps_total == 2 * STEPS_PER_EPOCH


def test_a_short_last_batch_counts_its_own_examples_and_epoch_counts_from_0(
    strategy: Any,
) -> None:
    # 1,000 examples at global batch 128: seven batches of 128 and one of 104 an epoch.
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="short", global_batch_size=128)
        fit(tiny_model(strategy), [callback], epochs=2, batch_size=128, examples=1000)
    final = exporter.snapshots[-1]
    assert (final.steps_total, final.examples_total, final.epoch) == (16, 2000, 1)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_short_last_batch_is_exact_under_steps_per_execution(tf: Any, jit_compile: bool) -> None:
    # 100 examples at 16: six of 16 and one of 4 an epoch, in executions of 3, 3 and 1 steps.
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="short-spe", global_batch_size=16)
        model = tiny_model(steps_per_execution=3, jit_compile=jit_compile)  # XLA: as on GPUs
        fit(model, [callback], epochs=2, examples=100)
    final = exporter.snapshots[-1]
    assert (final.steps_total, final.examples_total, final.epoch) == (14, 200, 1)


def test_a_second_fit_of_the_same_model_goes_on_counting(strategy: Any) -> None:
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="refit")
        model = tiny_model(strategy)
        fit(model, [callback], epochs=1, examples=40)  # 16, 16, 8
        fit(model, [callback], epochs=1, examples=40)
        fit(model, [MirrorwatchCallback(url=exporter.url, run="refit-2")], epochs=1)
    by_run = {push.path.split("/")[4]: push.snapshot for push in exporter.pushes}
    assert (by_run["refit"].steps_total, by_run["refit"].examples_total) == (6, 80)
    assert by_run["refit-2"].examples_total == EXAMPLES


def test_replica_bus_ids_come_from_the_environment_for_cpu_replicas(
    strategy: Any, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("MIRRORWATCH_REPLICA_PCI_BUS_IDS", "0000:1b:00.0,00000000:3B:00.0")
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="unit-5")
        fit(tiny_model(strategy), [callback], epochs=1)
    replicas = exporter.snapshots[-1].replica_devices
    assert [r.pci_bus_id for r in replicas] == ["0000:1b:00.0", "0000:3b:00.0"]
    assert all(r.memory_current_bytes is None for r in replicas)  # CPUs: absent, never 0


def test_url_run_token_and_worker_default_from_the_environment(
    strategy: Any, clean_env: pytest.MonkeyPatch
) -> None:
    with recording_exporter() as exporter:
        clean_env.setenv("MIRRORWATCH_URL", exporter.url)
        clean_env.setenv("MIRRORWATCH_RUN", "from-env")
        clean_env.setenv("MIRRORWATCH_INGEST_TOKEN", "tok")
        clean_env.setenv("TF_CONFIG", json.dumps({"task": {"type": "worker", "index": 5}}))
        callback = MirrorwatchCallback()
        fit(tiny_model(strategy), [callback], epochs=1)
    push = exporter.pushes[-1]
    assert push.path == "/api/v1/runs/from-env/workers/5"
    assert push.authorization == "Bearer tok"


def test_run_defaults_to_a_fresh_id_and_worker_to_zero() -> None:
    first, second = MirrorwatchCallback(), MirrorwatchCallback()
    assert first.run != second.run
    assert first.session != second.session
    assert first.worker == 0


@pytest.mark.parametrize(
    "arguments",
    [{"run": "no spaces"}, {"run": "x" * 65}, {"worker": 1024}, {"interval": 0}],
)
def test_invalid_arguments_are_refused_before_training(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(arguments))):
        MirrorwatchCallback(**arguments)


def test_exporter_down_changes_nothing_in_training_and_counts_drops(strategy: Any) -> None:
    baseline = fit(tiny_model(strategy))
    callback = MirrorwatchCallback(url=unused_url(), run="down", interval=0.05)
    assert fit(tiny_model(strategy), [callback]) == baseline
    assert callback.telemetry_dropped_total >= 1


def test_exporter_that_never_answers_changes_nothing_in_training(strategy: Any) -> None:
    started = time.monotonic()
    baseline = fit(tiny_model(strategy), epochs=3)
    baseline_elapsed = time.monotonic() - started
    with silent_exporter() as url:
        callback = MirrorwatchCallback(url=url, run="silent", interval=0.1)
        model = tiny_model(strategy)
        started = time.monotonic()
        losses = fit(model, [callback], epochs=3)
        elapsed = time.monotonic() - started
        time.sleep(0.6)  # the first push's 0.5 s timeout has surely run out
    assert losses == baseline
    assert callback.telemetry_dropped_total >= 1
    # The end waits for the final push at most ~2 s: compared with the same fit without the
    # callback, so that a loaded machine's slower fit does not count against the callback.
    assert elapsed - baseline_elapsed < 10


def test_errors_inside_the_hooks_never_reach_training(
    strategy: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    callback = MirrorwatchCallback(url=unused_url(), run="broken")

    def explode(*args: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(callback._meter, "end_step", explode)
    with caplog.at_level(logging.WARNING, "mirrorwatch.trainer"):
        fit(tiny_model(strategy), [callback])
    assert len([r for r in caplog.records if "on_train_batch_end" in r.getMessage()]) == 1


def test_scaling_baseline_puts_speedup_and_efficiency_in_the_snapshot(strategy: Any) -> None:
    with recording_exporter() as exporter:
        callback = MirrorwatchCallback(url=exporter.url, run="scaling", global_batch_size=16)
        fit(tiny_model(strategy), [callback], epochs=3)
        steady = callback.steady_examples_per_second()
        assert steady is not None
        callback.set_scaling_baseline(steady / 1.5)  # as if one replica did 2/3 of this
        fit(tiny_model(strategy), [callback], epochs=1)  # a second fit: same session
    scaling = exporter.snapshots[-1].scaling
    assert scaling is not None
    assert 1.0 < scaling.speedup < 2.5
    assert scaling.efficiency_ratio == pytest.approx(scaling.speedup / 2)
    assert exporter.snapshots[-1].steps_total == 4 * STEPS_PER_EPOCH


def test_the_end_of_training_waits_for_the_final_push_one_second_in_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert callback_module.FINAL_PUSH_DEADLINE_SECONDS == 1.0
    waits: list[float] = []
    with silent_exporter() as url:
        callback = MirrorwatchCallback(url=url, run="black-hole", interval=5.0)
        stop = callback._pusher.stop

        def spy(deadline_seconds: float) -> bool:
            waits.append(deadline_seconds)
            return stop(deadline_seconds)

        monkeypatch.setattr(callback._pusher, "stop", spy)
        callback._pusher.start()  # as on_train_begin does; its first push hangs at once
        time.sleep(0.2)
        started = time.monotonic()
        callback.on_train_end()
        elapsed = time.monotonic() - started
    assert waits == [1.0]
    assert elapsed < 1.8  # a black hole: accepts, never answers (was 2.0 s)
