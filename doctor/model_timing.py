"""A model's step time for ``--probe --model``, timed in a child process the cap can stop.

One step of a large model on CPUs takes minutes on a busy machine, and TensorFlow cannot
interrupt a step: the child prints its device, then each step's seconds, one JSON line each,
and the parent stops it at its budget with what it has (a partial answer). The gradient size
is counted in the parent meanwhile (the model built, not trained), so even a cap that no step
fits in leaves the all-reduce of the real gradients.

    python -m mirrorwatch.doctor.model_timing MODEL BATCH_SIZE STEPS [--split-gpu]
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mirrorwatch.doctor.probes import size_words

BYTES_PER_PARAMETER = 4  # float32 gradients, also under mixed_float16 (variables stay float32)
WARMUP_STEPS = 2
_STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class TimingError(RuntimeError):
    """The child could not time the model; the message is its last line of error."""


@dataclass(frozen=True)
class ModelTiming:
    """What the budget allowed: the gradient size, one replica's step time (the mean of
    ``steps`` timed steps; 0 timed: the last warm-up step's; None: no step finished), and
    whether the budget stopped it."""

    model: str
    gradient_bytes: int
    step_seconds: float | None
    steps: int
    capped: bool

    @property
    def partial(self) -> str:
        """Why the answer rests on less than asked, or ""."""
        if not self.capped:
            return ""
        if self.step_seconds is None:
            return f"partial: no step of {self.model} finished within the --probe-seconds cap"
        if self.steps == 0:
            return "partial: the --probe-seconds cap came during the warm-up; its last step's time"
        timed = f"{self.steps} timed step{'' if self.steps == 1 else 's'}"
        return f"partial: {timed}, then the --probe-seconds cap"


def _child(argv: Sequence[str]) -> int:
    """In the child: build the model on the first probe device, print its size and each step."""
    import tensorflow as tf

    from mirrorwatch.doctor.probes import prepare_devices
    from mirrorwatch.trainer.models import Job, build_model, dataset, default_image_size

    model_name, batch_size, steps = argv[0], int(argv[1]), int(argv[2])
    device = prepare_devices(tf, "--split-gpu" in argv)[0]
    job = Job(model=model_name, image_size=default_image_size(model_name))

    def say(**fields: object) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    with tf.device(device):
        model = build_model(job)
        say(device=device)
        features, labels = next(iter(dataset(job, batch_size)))
        for step in range(WARMUP_STEPS + steps):
            start = time.perf_counter()
            loss: Any = model.train_on_batch(features, labels)
            float(loss if not isinstance(loss, list) else loss[0])  # the step has finished
            say(step=step, seconds=time.perf_counter() - start)
    return 0


def gradient_bytes_of(model: str) -> int:
    """The model's gradient bytes, from its variables: built here, never trained (seconds)."""
    import tensorflow as tf

    from mirrorwatch.trainer.models import Job, build_model, default_image_size

    with tf.device("/CPU:0"):
        built = build_model(Job(model=model, image_size=default_image_size(model)))
    return sum(int(tf.size(v)) for v in built.trainable_variables) * BYTES_PER_PARAMETER


def _lines(stream: Any, into: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        try:
            into.put(json.loads(line))
        except ValueError:
            continue  # not one of ours (a library's print)
    into.put(None)


def _stop(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
    child.wait(timeout=_STOP_WAIT_S)


def _read(
    child: subprocess.Popen[str],
    model: str,
    batch_size: int,
    total: int,
    budget_seconds: float,
    progress: Callable[[str], None],
    started: float,
) -> list[float]:
    """The child's step times, as far as the budget from ``started`` goes; TimingError when the
    child ends before its last step."""
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_lines, args=(child.stdout, lines), daemon=True).start()
    seconds: list[float] = []
    while len(seconds) < total:
        left = budget_seconds - (time.monotonic() - started)
        if left <= 0 or (seconds and seconds[-1] > left):
            break
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            raise TimingError(model)
        if "device" in line:
            progress(
                f"{model}: {total} steps of batch {batch_size} on {line['device']} "
                f"({WARMUP_STEPS} to warm up)"
            )
        else:
            seconds.append(float(line["seconds"]))
            warm = " (warm-up)" if len(seconds) <= WARMUP_STEPS else ""
            progress(f"{model} step {len(seconds)}/{total}: {seconds[-1]:.1f} s{warm}")
    return seconds


def time_model(
    model: str,
    batch_size: int,
    steps: int,
    *,
    split_gpu: bool = False,
    budget_seconds: float,
    progress: Callable[[str], None] = lambda _: None,
) -> ModelTiming:
    """Time ``steps`` steps of ``model`` after the warm-up in a child process, stopped when the
    next step would end past ``budget_seconds`` (each step foretells the next) or at it."""
    total = WARMUP_STEPS + steps
    args = [sys.executable, "-m", __name__, model, str(batch_size), str(steps)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as errors:
        child = subprocess.Popen(
            [*args, *(["--split-gpu"] if split_gpu else [])],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            # Counted here while the child starts its TensorFlow: known whatever the cap.
            size = gradient_bytes_of(model)
            progress(f"{model}: {size_words(size)} of gradients")
            seconds = _read(child, model, batch_size, total, budget_seconds, progress, started)
        except TimingError:
            child.wait(timeout=_STOP_WAIT_S)
            errors.seek(0)
            said = [x for x in errors.read().splitlines() if x.strip()] or ["no output"]
            raise TimingError(
                f"timing {model} failed (exit {child.returncode}): {said[-1]}"
            ) from None
        finally:
            _stop(child)
    timed = seconds[WARMUP_STEPS:]
    measured = timed or seconds[-1:]
    return ModelTiming(
        model=model,
        gradient_bytes=size,
        step_seconds=sum(measured) / len(measured) if measured else None,
        steps=len(timed),
        capped=len(seconds) < total,
    )


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
