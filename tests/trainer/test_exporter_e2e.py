"""The callback against the real exporter process: what was trained is what it publishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from mirrorwatch.trainer import MirrorwatchCallback
from tests.exporter.exporter_process import EXPORTER, running_exporter
from tests.hang import HANG_SECONDS
from tests.ports import free_port
from tests.telemetry.published import training_samples, value
from tests.trainer import raising_fit
from tests.trainer.training import EXAMPLES, fit, tiny_model

pytestmark = pytest.mark.usefixtures("clean_env")
SIMULATE = ["--simulate", "healthy", "--log-level", "warning"]


def simulated_gpus(url: str) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = httpx.get(url + "/api/v1/gpus", timeout=5).json()["gpus"]
    return gpus


def test_mirrored_fit_is_published_by_the_exporter(
    strategy: Any, clean_env: pytest.MonkeyPatch
) -> None:
    with running_exporter(SIMULATE, wait_for="/readyz") as exporter:
        gpus = simulated_gpus(exporter.url)[:2]
        clean_env.setenv(
            "MIRRORWATCH_REPLICA_PCI_BUS_IDS", ",".join(gpu["pci_bus_id"] for gpu in gpus)
        )
        callback = MirrorwatchCallback(
            url=exporter.url, run="e2e-mirrored", global_batch_size=16, interval=0.2
        )
        fit(tiny_model(strategy), [callback], epochs=3)
        samples = training_samples(exporter.url, "e2e-mirrored")
    assert value(samples, "mirrorwatch_training_steps_total") == 3 * EXAMPLES // 16
    assert value(samples, "mirrorwatch_training_examples_total") == 3 * EXAMPLES
    assert value(samples, "mirrorwatch_training_replicas") == 2
    assert value(samples, "mirrorwatch_training_active") == 0
    replica_info = {
        (dict(labels)["replica"], dict(labels)["gpu"], dict(labels)["uuid"])
        for (name, labels), _ in samples.items()
        if name == "mirrorwatch_training_replica_info"
    }
    assert replica_info == {
        (str(replica), str(gpu["index"]), gpu["uuid"]) for replica, gpu in enumerate(gpus)
    }


@contextmanager
def exporter_on(port: int) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [EXPORTER, "--listen", f"127.0.0.1:{port}", *SIMULATE],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_SECONDS
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(15)


def test_exporter_restarted_mid_run_ends_with_the_right_totals(strategy: Any) -> None:
    import keras

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    exporters: list[Any] = []

    class RestartExporter(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if epoch == 1:  # down for a whole epoch, then a fresh process with no memory
                exporters[-1].__exit__(None, None, None)
            if epoch == 2:
                exporters.append(exporter_on(port))
                exporters[-1].__enter__()

    exporters.append(exporter_on(port))
    exporters[-1].__enter__()
    try:
        callback = MirrorwatchCallback(
            url=url, run="e2e-restart", global_batch_size=16, interval=0.1
        )
        fit(tiny_model(strategy), [callback, RestartExporter()], epochs=5)
        samples = training_samples(url, "e2e-restart")
    finally:
        exporters[-1].__exit__(None, None, None)
    assert value(samples, "mirrorwatch_training_steps_total") == 5 * EXAMPLES // 16
    assert value(samples, "mirrorwatch_training_examples_total") == 5 * EXAMPLES
    assert callback.telemetry_dropped_total >= 1


def test_a_fit_that_raises_shows_its_steps_and_inactive_as_soon_as_the_process_ends() -> None:
    # Its own process: Keras calls no on_train_end, so the push at exit is what tells.
    with running_exporter(SIMULATE, wait_for="/readyz") as exporter:
        fit_process = subprocess.run(
            [sys.executable, "-m", "tests.trainer.raising_fit", exporter.url, "e2e-raises"],
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        samples = training_samples(exporter.url, "e2e-raises")  # at once: no TTL waited for
    assert fit_process.returncode == 1
    assert "FloatingPointError: loss is nan at step 5" in fit_process.stderr
    assert "Exception ignored" not in fit_process.stderr
    assert value(samples, "mirrorwatch_training_steps_total") == raising_fit.STEPS
    examples = raising_fit.STEPS * raising_fit.BATCH
    assert value(samples, "mirrorwatch_training_examples_total") == examples
    assert value(samples, "mirrorwatch_training_epoch") == 1  # the 5th of 4-step epochs
    assert value(samples, "mirrorwatch_training_active") == 0
