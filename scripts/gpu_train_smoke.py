"""A real MirroredStrategy fit on one physical GPU split into two, pushing to a real exporter.

Run by scripts/gpu-smoke.sh on a GPU host, against the real-NVML exporter it started. Checks:
TensorFlow sees the GPU; two logical GPUs carved from GPU 0 train under MirroredStrategy with
the mirrorwatch callback; the exporter's `mirrorwatch_training_replica_info` for this run lists
both replicas with GPU 0's real NVML UUID; and GPU 0's utilisation and energy series move while
it trains. Prints what it saw; exits 1 on the first check that fails. About 1-2 minutes.

    python scripts/gpu_train_smoke.py --exporter http://127.0.0.1:19848 [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
import urllib.request
from typing import Any

SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(exporter: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"{exporter}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = []
    for line in text.splitlines():
        if match := SAMPLE.match(line):
            samples.append((match[1], dict(LABEL.findall(match[2])), float(match[3])))
    return samples


def values(
    samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str
) -> list[float]:
    return [
        v for n, ls, v in samples if n == name and all(ls.get(k) == w for k, w in labels.items())
    ]


def fail(message: str) -> None:
    print(f"gpu-train-smoke: FAIL: {message}", file=sys.stderr)
    raise SystemExit(1)


def train(exporter: str, run: str, seconds: float, kind: str) -> None:
    import tensorflow as tf

    from mirrorwatch.trainer import MirrorwatchCallback

    physical = tf.config.list_physical_devices(kind)
    if not physical:
        cuda = tf.test.is_built_with_cuda()
        fail(f"TensorFlow {tf.__version__} sees no {kind} (built with CUDA: {cuda})")
    limit = 4096 if kind == "GPU" else None
    halves = [tf.config.LogicalDeviceConfiguration(memory_limit=limit)] * 2
    tf.config.set_logical_device_configuration(physical[0], halves)
    devices = [d.name for d in tf.config.list_logical_devices(kind)]
    print(f"gpu-train-smoke: replicas {devices} on {physical[0].name}", flush=True)
    strategy = tf.distribute.MirroredStrategy(devices)
    batch = 256
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input((64, 64, 3)),
                tf.keras.layers.Conv2D(64, 3, activation="relu"),
                tf.keras.layers.Conv2D(64, 3, activation="relu"),
                tf.keras.layers.GlobalAveragePooling2D(),
                tf.keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer="adam",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=1,  # keras#19246
        )
    images = tf.random.uniform((batch * 8, 64, 64, 3))
    labels = tf.random.uniform((batch * 8,), maxval=10, dtype=tf.int32)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch).repeat()
    callback = MirrorwatchCallback(url=exporter, run=run, global_batch_size=batch, interval=1.0)
    deadline = time.monotonic() + seconds

    class Stop(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if time.monotonic() > deadline:
                self.model.stop_training = True

    model.fit(data, steps_per_epoch=100_000, epochs=1, callbacks=[callback, Stop()], verbose=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter", default="http://127.0.0.1:19848")
    parser.add_argument("--seconds", type=float, default=60.0)
    # CPU: a rehearsal of this script against a simulated exporter, with
    # MIRRORWATCH_REPLICA_PCI_BUS_IDS naming its GPU 0 twice; GPU is the real check.
    parser.add_argument("--device", choices=("GPU", "CPU"), default="GPU")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = f"gpu-smoke-{int(time.time())}"

    before = scrape(args.exporter)
    (uuid,) = {
        ls["uuid"] for n, ls, _ in before if n == "mirrorwatch_gpu_info" and ls["gpu"] == "0"
    }
    energy_before = values(before, "mirrorwatch_gpu_energy_joules_total", gpu="0")
    busiest = [0.0]

    def watch() -> None:
        while not done.is_set():
            ratio = values(scrape(args.exporter), "mirrorwatch_gpu_utilization_ratio", gpu="0")
            busiest[0] = max(busiest[0], *ratio, 0.0)
            done.wait(2.0)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    train(args.exporter, run, args.seconds, args.device)
    print(f"gpu-train-smoke: trained {time.monotonic() - started:.0f} s as run {run}", flush=True)
    time.sleep(2.0)  # the callback's final push
    done.set()
    watcher.join()

    after = scrape(args.exporter)
    replicas = [
        ls
        for n, ls, _ in after
        if n == "mirrorwatch_training_replica_info" and ls.get("run") == run
    ]
    print(f"gpu-train-smoke: GPU 0 is {uuid}; replica_info: {replicas}")
    if len(replicas) != 2:
        fail(f"expected 2 replicas in replica_info for run {run}, got {len(replicas)}")
    if any(r.get("uuid") != uuid for r in replicas):
        fail("replica_info does not carry GPU 0's NVML UUID")
    print(f"gpu-train-smoke: GPU 0 utilisation peaked at {busiest[0]:.2f} while training")
    if busiest[0] <= 0.0:
        fail("GPU 0's utilisation never moved above 0 while training")
    energy_after = values(after, "mirrorwatch_gpu_energy_joules_total", gpu="0")
    if energy_before and energy_after:
        print(f"gpu-train-smoke: GPU 0 used {energy_after[0] - energy_before[0]:.0f} J")
        if energy_after[0] <= energy_before[0]:
            fail("GPU 0's energy counter did not grow while training")
    steps = values(after, "mirrorwatch_training_steps_total", run=run)
    print(f"gpu-train-smoke: steps pushed: {steps}")
    if not steps or steps[0] <= 0:
        fail("no training steps reached the exporter")
    print("gpu-train-smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
