"""``--probe``: the checks under load, through TensorFlow on the devices training will use.

Host↔device copies per device from its own NUMA node, an all-reduce through MirroredStrategy,
and a matmul on every device at once. On a host without GPUs they run over two logical CPU
devices: the same code path, numbers that say nothing about GPUs.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mirrorwatch.contract.causes import cause
from mirrorwatch.doctor.model import Check, skipped
from mirrorwatch.exporter.backend import GpuBackend, GpuDevice

BYTES_PER_GB = 1e9
COPY_BYTES = 64 * 2**20
ALLREDUCE_BYTES = 64 * 2**20
MATMUL_SIZE = 4096
# Each GPU's matmul throughput within this share of the other's: MirroredStrategy waits for
# the slowest replica every step, so a 5 % slower GPU costs the pair 5 %.
BALANCE_RATIO = 0.05
PROBE_IDS = (
    "probe",
    "probe.copy_bandwidth",
    "pcie_degraded.under_load",
    "interconnect.allreduce",
    "imbalance.matmul",
    "thermal_throttling.under_load",
)
_SPLIT_GPU_MEMORY_MB = 2048  # each logical GPU of a split GPU 0, as the GPU smoke fit does
# What thermal_throttling.under_load warns of: heat, or the board cutting its clocks.
_HEAT_REASONS = (
    *cause("thermal_throttling").clock_reasons,
    *cause("hardware_slowdown").clock_reasons,
)


@dataclass(frozen=True)
class ProbeSettings:
    """How long each probe runs (tests shorten them; the defaults fit in 60 s)."""

    copy_rounds: int = 8
    allreduce_rounds: int = 10
    matmul_seconds: float = 20.0
    matmul_size: int = MATMUL_SIZE
    copy_bytes: int = COPY_BYTES
    allreduce_bytes: int = ALLREDUCE_BYTES


# On CPU devices the probes only walk their code path (their numbers say nothing of GPUs):
# small enough to run in seconds on a shared CI core.
CPU_SETTINGS = ProbeSettings(
    copy_rounds=2,
    allreduce_rounds=3,
    matmul_seconds=1.0,
    matmul_size=256,
    copy_bytes=2**20,
    allreduce_bytes=2**20,
)


def on_cpus(names: Sequence[str]) -> bool:
    return not any("GPU" in name for name in names)


@dataclass
class ProbeResults:
    checks: list[Check] = field(default_factory=list)
    allreduce_seconds_per_byte: float | None = None


def size_words(size: float) -> str:
    """Bytes in binary units a person reads: 512 B, 30.7 KiB, 97.5 MiB."""
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def prepare_devices(tf: Any, split_gpu: bool) -> list[str]:
    """The devices the probes run on: every GPU; the one GPU split in two (``split_gpu`` on a
    one-GPU host, as the GPU smoke fit does); or, without a GPU, two logical CPUs. Call before
    anything initialises TensorFlow's runtime."""
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) == 1 and split_gpu:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=_SPLIT_GPU_MEMORY_MB)] * 2
        )
    elif gpus:
        for gpu in gpus:
            with contextlib.suppress(RuntimeError, ValueError):
                tf.config.experimental.set_memory_growth(gpu, True)
    else:
        cpus = tf.config.list_physical_devices("CPU")
        with contextlib.suppress(RuntimeError):
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
            )
    kind = "GPU" if gpus else "CPU"
    return [d.name for d in tf.config.list_logical_devices(kind)]


def _sync(tensor: Any) -> None:
    # Reading one element back waits for the device, and moves almost nothing.
    tensor[0:1].numpy() if tensor.shape.rank else tensor.numpy()


@contextlib.contextmanager
def _pinned_to(cpus: frozenset[int] | None) -> Iterator[None]:
    """Run on ``cpus`` (a GPU's local CPUs) meanwhile, so host buffers are that node's."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    near = cpus & before
    if near:
        os.sched_setaffinity(0, near)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _gpu_for(devices: Sequence[GpuDevice], position: int, physical: bool) -> GpuDevice | None:
    """The NVML GPU under logical device ``position`` (each physical GPU is one logical device,
    as ``prepare_devices`` leaves them, but a split GPU 0 is every logical device)."""
    if not physical or not devices:
        return None
    return devices[position] if position < len(devices) else devices[0]


def copy_bandwidth(
    tf: Any, names: Sequence[str], gpus: Sequence[GpuDevice], settings: ProbeSettings
) -> list[Check]:
    """Host→device→host copy rate per device, with its PCIe link read while copying (the link
    trains up only under load: DCGM's PCIe check requires P0 for the same reason)."""
    import numpy as np

    physical = not on_cpus(names)
    checks = []
    for position, name in enumerate(names):
        gpu = _gpu_for(gpus, position, physical)
        config = None if gpu is None else gpu.config()
        with _pinned_to(None if config is None else config.local_cpus):
            host = np.ones(settings.copy_bytes // 4, dtype=np.float32)
            link = None
            with tf.device(name):
                _sync(tf.identity(host))  # warm-up: allocator and stream set up
                start = time.perf_counter()
                for round_ in range(settings.copy_rounds):
                    on_device = tf.identity(host)
                    back = on_device.numpy()
                    if round_ == settings.copy_rounds // 2 and gpu is not None:
                        link = gpu.pcie_link()
                elapsed = time.perf_counter() - start
        del back
        rate = 2 * settings.copy_bytes * settings.copy_rounds / elapsed / BYTES_PER_GB
        value = f"{rate:.1f} GB/s host↔{name.rsplit('/', 1)[-1]}"
        label = str(gpu.index) if gpu is not None else name
        if link is not None and link.generation is not None and link.width is not None:
            value += f" at gen{link.generation} x{link.width} under load"
            degraded = (link.width_max is not None and link.width < link.width_max) or (
                link.generation_max is not None and link.generation < link.generation_max
            )
            expected = f"gen{link.generation_max} x{link.width_max} under load"
            checks.append(
                Check(
                    "pcie_degraded.under_load",
                    "fail" if degraded else "pass",
                    value,
                    expected,
                    "reseat the card, check the slot's lanes and the BIOS PCIe setting"
                    if degraded
                    else "",
                    label,
                )
            )
        else:
            checks.append(Check("probe.copy_bandwidth", "pass", value, "measured", gpu=label))
    return checks


def allreduce(tf: Any, names: Sequence[str], settings: ProbeSettings) -> tuple[Check, float]:
    """An all-reduce through MirroredStrategy: its bus bandwidth (nccl-tests' busbw, which for
    two devices equals size / time) and the seconds one byte costs."""
    strategy = tf.distribute.MirroredStrategy(list(names))
    elements = settings.allreduce_bytes // 4
    with strategy.scope():
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.ones([elements], dtype=tf.float32)
        )

    def reduce(v: Any) -> Any:
        return tf.distribute.get_replica_context().all_reduce("sum", v)

    # In a tf.function, as Keras runs its train step: eager strategy.run is another code path.
    step = tf.function(lambda value: strategy.run(reduce, args=(value,)))

    for _ in range(2):  # tracing and the collective's set-up
        _sync(strategy.experimental_local_results(step(values))[0])
    start = time.perf_counter()
    for _ in range(settings.allreduce_rounds):
        result = step(values)
    _sync(strategy.experimental_local_results(result)[0])
    seconds = (time.perf_counter() - start) / settings.allreduce_rounds
    replicas = len(names)
    busbw = settings.allreduce_bytes / seconds * 2 * (replicas - 1) / replicas / BYTES_PER_GB
    check = Check(
        "interconnect.allreduce",
        "pass",
        f"{busbw:.2f} GB/s bus bandwidth ({size_words(settings.allreduce_bytes)}, "
        f"{seconds * 1000:.1f} ms, {replicas} replicas)",
        "measured",
        gpu=",".join(str(i) for i in range(replicas)),
    )
    return check, seconds / settings.allreduce_bytes


@dataclass
class _Sampler:
    """The backend's clocks, temperature, power and throttle reasons, sampled during a burn."""

    gpus: Sequence[GpuDevice]
    interval_s: float = 1.0
    samples: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _take(self) -> None:
        for gpu in self.gpus:
            self.samples.setdefault(gpu.index, []).append(
                {
                    "temperature": gpu.temperature_celsius(),
                    "power": gpu.power_watts(),
                    "limit": gpu.power_limit_watts(),
                    "sm_hz": gpu.clock_hertz("sm"),
                    "sm_max_hz": gpu.clock_max_hertz("sm"),
                    "reasons": gpu.clocks_event_reasons() or {},
                }
            )

    def run(self) -> None:
        self._take()
        while not self._stop.wait(self.interval_s):
            self._take()
        self._take()

    def stop(self) -> None:
        self._stop.set()


def _burn(tf: Any, name: str, size: int, until: float, done: list[float]) -> None:
    with tf.device(name):
        a = tf.random.uniform([size, size])
        b = tf.random.uniform([size, size])
        rounds = 0
        start = time.perf_counter()
        while time.perf_counter() < until or rounds == 0:
            c = tf.matmul(a, b)
            rounds += 1
            if rounds % 4 == 0:
                _sync(c)
        _sync(c)
        done.append(2 * size**3 * rounds / (time.perf_counter() - start))


def matmul(
    tf: Any, names: Sequence[str], gpus: Sequence[GpuDevice], settings: ProbeSettings
) -> list[Check]:
    """A matmul on every device at once: each one's throughput against the others', and what the
    GPUs did meanwhile (clocks, throttle reasons, temperature rise, power against the limit)."""
    physical = not on_cpus(names)
    sampler = _Sampler(gpus if physical else [])
    watcher = threading.Thread(target=sampler.run, name="doctor-sampler", daemon=True)
    watcher.start()
    until = time.perf_counter() + settings.matmul_seconds
    rates: list[list[float]] = [[] for _ in names]
    burners = [
        threading.Thread(target=_burn, args=(tf, n, settings.matmul_size, until, rates[i]))
        for i, n in enumerate(names)
    ]
    for burner in burners:
        burner.start()
    for burner in burners:
        burner.join()
    sampler.stop()
    watcher.join()
    flops = [r[0] if r else 0.0 for r in rates]
    pair = ",".join(str(i) for i in range(len(names)))
    best = max(flops) or 1.0
    spread = (best - min(flops)) / best
    value = ", ".join(
        f"{n.rsplit('/', 1)[-1]} {f / 1e12:.2f} TFLOP/s" for n, f in zip(names, flops, strict=True)
    )
    balanced = spread <= BALANCE_RATIO
    if not physical:
        # Logical CPU devices share the same cores: their balance says nothing.
        check = Check(
            "imbalance.matmul", "skip", f"{value}: not judged on CPU devices", "", gpu=pair
        )
    else:
        check = Check(
            "imbalance.matmul",
            "pass" if balanced else "fail",
            f"{value} (spread {spread:.1%})",
            f"within {BALANCE_RATIO:.0%} of each other",
            "" if balanced else "the slower GPU paces both: see its clocks under load",
            pair,
        )
    checks = [check]
    for index, samples in sampler.samples.items():
        checks.append(_under_load(index, samples))
    return checks


def _under_load(index: int, samples: Sequence[Mapping[str, Any]]) -> Check:
    temperatures = [s["temperature"] for s in samples if s["temperature"] is not None]
    powers = [(s["power"], s["limit"]) for s in samples if s["power"] and s["limit"]]
    clocks = [s["sm_hz"] / s["sm_max_hz"] for s in samples if s["sm_hz"] and s["sm_max_hz"]]
    reasons = sorted(
        {r for s in samples for r, on in s["reasons"].items() if on and r != "gpu_idle"}
    )
    parts = []
    if temperatures:
        parts.append(f"{temperatures[0]:.0f}→{temperatures[-1]:.0f} °C")
    if powers:
        parts.append(f"power {max(p / lim for p, lim in powers):.0%} of limit")
    if clocks:
        parts.append(f"SM clock {min(clocks):.0%} of max at lowest")
    heat = [r for r in reasons if r in _HEAT_REASONS]
    parts.append("throttle: " + (", ".join(reasons) if reasons else "none"))
    return Check(
        "thermal_throttling.under_load",
        "warn" if heat else "pass",
        "; ".join(parts),
        "no thermal or hardware slowdown",
        "improve cooling or power delivery before a long run" if heat else "",
        str(index),
    )


# What each probe does, as its progress line says it.
_DOING = {
    "probe.copy_bandwidth": "host↔device copies",
    "interconnect.allreduce": "an all-reduce through MirroredStrategy",
    "imbalance.matmul": "a matmul on every device at once",
}
# Probes that may be left out at the cap: the all-reduce never is (the speed-up needs it, and
# it takes rounds of one transfer).
_CAPPED = frozenset({"probe.copy_bandwidth", "imbalance.matmul"})


def run_probes(
    tf: Any,
    names: Sequence[str],
    backend: GpuBackend | None,
    settings: ProbeSettings,
    progress: Callable[[str], None] = lambda _: None,
    deadline: float = math.inf,
) -> ProbeResults:
    """Every probe in turn; a probe TensorFlow cannot run fails with its error, the rest go on.
    Past ``deadline`` (time.monotonic()) the copies and the matmul are skipped, saying so, and
    the matmul never runs beyond it."""
    gpus = list(backend.gpus()) if backend is not None else []
    results = ProbeResults()
    if len(names) < 2:
        results.checks.append(skipped("interconnect.allreduce", f"{len(names)} device(s)"))

    def burn() -> None:
        seconds = min(settings.matmul_seconds, deadline - time.monotonic())
        results.checks.extend(matmul(tf, names, gpus, replace(settings, matmul_seconds=seconds)))

    steps: list[tuple[str, Callable[[], None]]] = [
        (
            "probe.copy_bandwidth",
            lambda: results.checks.extend(copy_bandwidth(tf, names, gpus, settings)),
        ),
        ("imbalance.matmul", burn),
    ]
    if len(names) >= 2:

        def reduce() -> None:
            check, per_byte = allreduce(tf, names, settings)
            results.checks.append(check)
            results.allreduce_seconds_per_byte = per_byte

        steps.insert(1, ("interconnect.allreduce", reduce))
    for check_id, step in steps:
        if check_id in _CAPPED and time.monotonic() >= deadline:
            progress(f"{_DOING[check_id]}: skipped, the --probe-seconds cap is reached")
            results.checks.append(skipped(check_id, "the --probe-seconds cap came first"))
            continue
        progress(_DOING[check_id])
        try:
            step()
        except (RuntimeError, ValueError, tf.errors.OpError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            results.checks.append(
                Check(check_id, "fail", f"the probe failed: {first_line}", "it runs", "")
            )
    return results
