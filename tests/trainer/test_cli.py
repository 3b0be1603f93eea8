"""mirrorwatch-train as a user runs it: flags, kill-and-resume, the scaling benchmark."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hang import HANG_SECONDS
from tests.trainer.recorder import recording_exporter, unused_url

TRAIN = os.path.join(os.path.dirname(sys.executable), "mirrorwatch-train")
TINY = ["--model", "cnn", "--image-size", "8", "--batch-size", "8", "--verbose", "2"]


def train(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRAIN, *args], capture_output=True, text=True, timeout=timeout, env=environment()
    )


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIRRORWATCH_")}
    return {**env, "TF_CPP_MIN_LOG_LEVEL": "2", "MIRRORWATCH_URL": unused_url()}


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--model", "vgg"], "--model"),
        (["--batch-size", "0"], "--batch-size"),
        (["--steps", "many"], "--steps"),
        (["--interval", "-1"], "--interval"),
        (["--token-file", "/nonexistent/token"], "--token-file"),
        (["--run", "has space"], "--run"),
        (["--scaling-benchmark", "--steps", "2"], "--steps"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--cluster", "127.0.0.1:1,127.0.0.1:2", "--task-index", "0"], "--cluster"),
        (["--multi-worker", "--task-index", "0"], "--task-index"),
        (["--multi-worker", "--cluster", "127.0.0.1:1,127.0.0.1:2"], "--task-index"),
        (["--multi-worker", "--cluster", "127.0.0.1:1", "--task-index", "1"], "--task-index"),
        (
            ["--multi-worker", "--cluster", "127.0.0.1,127.0.0.1:2", "--task-index", "0"],
            "--cluster",
        ),
        (["--multi-worker", "--cluster", "a:1", "--task-index", "-1"], "--task-index"),
        (["--multi-worker"], "TF_CONFIG"),
        (["--multi-worker", "--checkpoint-dir", "/tmp/x"], "--checkpoint-dir"),
        (["--multi-worker", "--scaling-benchmark"], "--scaling-benchmark"),
        (["--multi-worker", "--baseline-steps", "5"], "--baseline-steps"),
        (["--baseline-steps", "2"], "--baseline-steps"),
        (["--baseline-steps", "5", "--scaling-benchmark"], "--baseline-steps"),
        (["--url", "nonsense"], "--url"),
        (["--url", "ftp://host:1"], "--url"),
        (["--url", "http://host:99999"], "--url"),
    ],
)
def test_bad_flag_exits_2_with_one_line_naming_it(flags: list[str], named: str) -> None:
    result = train(*flags)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert named in result.stderr


def test_a_bad_exporter_url_in_the_environment_is_named() -> None:
    result = subprocess.run(
        [TRAIN], capture_output=True, text=True, timeout=HANG_SECONDS,
        env={**environment(), "MIRRORWATCH_URL": "nonsense"},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "mirrorwatch-train: error: MIRRORWATCH_URL: expected the exporter's URL such as "
        "http://127.0.0.1:9848, got 'nonsense'"
    )


def test_every_flag_says_what_it_does_and_its_default() -> None:
    from mirrorwatch.trainer.cli import parser

    for action in parser()._actions:
        if action.dest == "help":
            continue
        assert action.help, action.option_strings
        if action.default not in (None, False):
            assert "default" in action.help, action.option_strings


@pytest.mark.parametrize(
    ("tf_config", "named"),
    [
        ("{not json", "TF_CONFIG"),
        ('{"cluster": {"worker": ["a:1"]}}', "TF_CONFIG"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "TF_CONFIG"),
    ],
)
def test_multi_worker_refuses_a_tf_config_that_is_no_cluster_and_task(
    tf_config: str, named: str
) -> None:
    result = subprocess.run(
        [TRAIN, "--multi-worker"],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env={**environment(), "TF_CONFIG": tf_config},
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert named in result.stderr


def test_multi_worker_refuses_keras_3_when_tf_use_legacy_keras_says_so() -> None:
    # TF_USE_LEGACY_KERAS=0 asks TensorFlow for Keras 3, which cannot fit under the strategy.
    result = subprocess.run(
        [TRAIN, "--multi-worker", "--cluster", "127.0.0.1:1,127.0.0.1:2", "--task-index", "0"],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env={**environment(), "TF_USE_LEGACY_KERAS": "0"},
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "keras-team/keras/issues/20585" in result.stderr
    assert "TF_USE_LEGACY_KERAS=0" in result.stderr


def test_steps_per_execution_above_one_is_refused_with_the_keras_issue() -> None:
    result = train("--steps-per-execution", "4")
    assert result.returncode == 2
    assert "keras-team/keras/issues/19246" in result.stderr
    assert "MirroredStrategy" in result.stderr


def test_batch_size_must_divide_over_the_replicas() -> None:
    result = train(*TINY, "--batch-size", "9", "--cpu-replicas", "2")
    assert result.returncode == 2
    assert "--batch-size" in result.stderr


def test_asked_for_gpus_it_refuses_to_train_on_cpu_when_tensorflow_sees_none() -> None:
    # This machine's TensorFlow (tensorflow-cpu) lists no GPU, as a GPU image with a CUDA or
    # cuDNN that TensorFlow cannot load would: the run must stop, not fall back to CPUs.
    result = train(*TINY, "--devices", "gpu", "--steps", "2")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mirrorwatch-train: error: --devices gpu: TensorFlow ")
    assert "sees no GPU" in last
    assert "replicas" not in result.stdout  # the start line: nothing was trained


def test_cpu_devices_train_on_cpu_replicas() -> None:
    result = train(*TINY, "--devices", "cpu", "--cpu-replicas", "2", "--steps", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "on 2 replicas (/device:CPU:0, /device:CPU:1)" in result.stdout


def watch(args: list[str], metadata: Path, kill_when: int | None = None) -> tuple[str, set[int]]:
    """Run mirrorwatch-train, noting the steps its checkpoints record (epochs of 400 steps).

    ``kill_when``: SIGKILL it once a checkpoint at that step or later is written.
    """
    process = subprocess.Popen(
        [TRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=environment(),
    )  # fmt: skip
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None:
            assert time.monotonic() < deadline
            try:
                state = json.loads(metadata.read_text())
                seen.add(state["epoch"] * 400 + state["batch"] + 1)
            except (OSError, ValueError, KeyError):
                pass
            if kill_when is not None and seen and max(seen) >= kill_when:
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                break
            time.sleep(0.02)
        else:
            assert kill_when is None, "the run ended before it could be killed"
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stdout is not None
    return process.stdout.read(), seen


def test_killed_run_resumes_at_its_last_checkpoint(tmp_path: Path) -> None:
    checkpoints = tmp_path / "backup"
    metadata = checkpoints / "training_metadata.json"
    args = [*TINY, "--steps", "400", "--epochs", "2", "--checkpoint-dir", str(checkpoints)]
    args += ["--checkpoint-every", "20", "--interval", "30"]
    watch(args, metadata, kill_when=400 + 40)  # mid-way through epoch 2
    killed_at = json.loads(metadata.read_text())
    assert killed_at["epoch"] == 1
    checkpointed = 400 + killed_at["batch"] + 1

    output, seen = watch(args, metadata)
    assert "finished at step" in output, output
    match = re.search(r"resumed from checkpoint at step (\d+) \(epoch (\d+), batch (\d+)\)", output)
    assert match, output
    step, epoch, batch = (int(group) for group in match.groups())
    assert (step, epoch, batch) == (checkpointed, 2, checkpointed - 400)
    assert "Epoch 1/2" not in output
    # The rest of epoch 2 and no more: across the crash, exactly 2 x 400 steps.
    # The pusher's warning (no exporter listens here) comes from its own thread and may land
    # between Keras's lines, so those are read without it.
    keras_lines = "\n".join(
        line for line in output.splitlines() if not line.startswith("mirrorwatch: ")
    )
    assert f"Epoch 2/2\n{800 - step}/{800 - step} " in keras_lines, output
    assert "finished at step 800" in output
    # It went on backing up every 20 steps from where it resumed, with the true epoch and batch.
    assert {step + 20, step + 40} <= seen
    assert min(seen) >= step
    assert not checkpoints.exists()  # a finished run leaves nothing to resume from


def test_baseline_steps_put_speedup_and_efficiency_into_the_run_telemetry() -> None:
    with recording_exporter() as exporter:
        result = train(
            *TINY, "--devices", "cpu", "--batch-size", "16", "--steps", "24",
            "--baseline-steps", "24", "--url", exporter.url, "--run", "baseline-cli",
            timeout=HANG_SECONDS,
        )  # fmt: skip
    # 24 steps of the tiny model each (well under a second): one stall of a loaded machine
    # cannot move either throughput by the factor of 4 beyond which the snapshot leaves
    # scaling out (an efficiency over 2 is outside the schema).
    assert result.returncode == 0, result.stdout + result.stderr
    said = re.search(r"baseline ([0-9.]+) examples/s on 1 replica", result.stdout)
    assert said is not None, result.stdout
    final = exporter.snapshots[-1]
    assert final.steps_total == 24  # the baseline's steps are not the run's
    assert final.scaling is not None, (
        f"{said.group(0)}; the run's {final.examples_per_second} examples/s\n{result.stdout}"
    )
    assert final.scaling.speedup > 0
    assert final.scaling.efficiency_ratio == pytest.approx(final.scaling.speedup / 2, rel=1e-3)


def test_scaling_benchmark_reports_and_publishes_both_throughputs() -> None:
    with recording_exporter() as exporter:
        result = train(
            *TINY, "--batch-size", "16", "--steps", "30", "--scaling-benchmark",
            "--url", exporter.url, "--run", "scaling-cli",
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    assert report["baseline_examples_per_second"] > 0
    assert report["examples_per_second"] > 0
    assert report["speedup"] == pytest.approx(
        report["examples_per_second"] / report["baseline_examples_per_second"], rel=1e-3
    )
    assert report["efficiency_ratio"] == pytest.approx(report["speedup"] / 2, rel=1e-3)
    assert re.search(r"^\s*1\s+8\s", result.stdout, re.MULTILINE)  # the 1-replica row
    assert re.search(r"^\s*2\s+16\s", result.stdout, re.MULTILINE)
    final = exporter.snapshots[-1]
    assert final.steps_total == 30
    if report["efficiency_ratio"] <= 2:
        assert final.scaling is not None
        assert final.scaling.speedup == pytest.approx(report["speedup"], rel=1e-3)
    else:  # a loaded machine slowed the 1-replica baseline: said on stdout, not published
        assert final.scaling is None, final.scaling
