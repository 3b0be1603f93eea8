"""A PyTorch script that ends without close(): its final state reaches the real exporter at exit.

Each script is a process of its own (tests/torch_monitor/unclosed_loop.py) whose pushes are an
hour apart, so only the push at exit can say the run stopped; the exporter is read the moment
the process has ended.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.exporter.exporter_process import RunningExporter, running_exporter
from tests.hang import HANG_SECONDS
from tests.telemetry.published import training_samples, value
from tests.torch_monitor.unclosed_loop import BATCH, STEPS
from tests.trainer.recorder import silent_exporter


@pytest.fixture(scope="module")
def exporter() -> Iterator[RunningExporter]:
    with running_exporter(
        ["--simulate", "healthy", "--log-level", "warning"], wait_for="/readyz"
    ) as running:
        yield running


def script(url: str, run: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.torch_monitor.unclosed_loop", url, run, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(("mode", "returncode"), [("raise", 1), ("return", 0)])
def test_a_script_that_ends_without_close_shows_its_steps_and_inactive_at_once(
    exporter: RunningExporter, mode: str, returncode: int
) -> None:
    run = f"unclosed-{mode}"
    process = script(exporter.url, run, mode)
    _, stderr = process.communicate(timeout=HANG_SECONDS)
    samples = training_samples(exporter.url, run)  # at once: no wait for a TTL
    assert process.returncode == returncode, stderr[-3000:]
    assert value(samples, "mirrorwatch_training_steps_total") == STEPS
    assert value(samples, "mirrorwatch_training_examples_total") == STEPS * BATCH
    assert value(samples, "mirrorwatch_training_active") == 0
    # Nothing at interpreter shutdown: the script's own exception, if any, and nothing else.
    assert "Exception ignored" not in stderr
    assert stderr.count("Traceback") == (1 if mode == "raise" else 0), stderr[-3000:]
    if mode == "raise":
        assert "DivergedError: loss is nan after 5 steps" in stderr


def test_an_exporter_that_never_answers_adds_at_most_the_final_deadline_to_the_exit() -> None:
    with silent_exporter() as url:
        process = script(url, "unclosed-silent", "return")
        stdout, stderr = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 0, stderr[-3000:]
    assert "Exception ignored" not in stderr
    assert "Traceback" not in stderr
    [line] = [line for line in stdout.splitlines() if line.startswith("exit handlers took")]
    # The final push's deadline is 1 s (FINAL_PUSH_DEADLINE_SECONDS); the rest is scheduling.
    assert float(line.split()[-1]) < 1.8
