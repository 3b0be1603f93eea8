"""One worker's training snapshot (schema 1), built on the pusher thread from what was counted.

The front ends (the Keras callback, the torch monitor) only count (meter.py, comm.py) and say
what the job is; everything else a push carries is found and computed here, off the training
thread: each replica's GPU and memory, throughput over a recent window, the scaling result.
No framework is imported here: the devices are asked through the front end's probe
(mirrorwatch.trainer.tf_devices, mirrorwatch.torch.devices).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mirrorwatch.contract.procfs import pid_namespace
from mirrorwatch.contract.snapshot import Replica, Scaling, StepDurations, TrainingSnapshot
from mirrorwatch.telemetry import devices
from mirrorwatch.telemetry.comm import CommMeter
from mirrorwatch.telemetry.meter import MeterReading, StepMeter

log = logging.getLogger("mirrorwatch.telemetry")

MEMORY_SAMPLE_SECONDS = 5.0
THROUGHPUT_WINDOW_SECONDS = 30.0
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


class DeviceProbe(Protocol):
    """What the framework and NVML say about the GPUs, by the framework's logical GPU index
    (the ``k`` of TensorFlow's ``GPU:k``, torch's ``cuda:k``). Every answer may be empty."""

    def gpu_bus_ids(self) -> dict[int, str]:
        """Logical GPU index -> canonical PCI bus id."""
        ...

    def gpu_uuids(self) -> dict[int, str]:
        """Logical GPU index -> NVML-style UUID, where the framework reports one itself."""
        ...

    def nvml_uuids(self, bus_ids: Sequence[str]) -> dict[str, str]:
        """Bus id -> UUID, from NVML."""
        ...

    def memory_bytes(self, gpu: int) -> tuple[float, float] | None:
        """``(current, peak)`` bytes the framework's allocator holds on logical GPU ``gpu``."""
        ...


def short_text(value: object) -> str | None:
    """``value`` as the schema's short text (printable ASCII, at most 128), or None if empty."""
    text = _UNPRINTABLE.sub("", str(value))[:128].strip()
    return text or None


@dataclass(frozen=True)
class Job:
    """What the training job is, as known at train begin."""

    model: str | None = None
    strategy: str | None = None
    devices: tuple[str, ...] = ()  # the strategy's replica devices, in replica order
    global_batch_size: int | None = None
    # Replicas of the whole run (num_replicas_in_sync): more than ``devices`` on each worker
    # of a MultiWorkerMirroredStrategy run; None where only this worker's are known.
    replicas_in_sync: int | None = None

    @property
    def replicas(self) -> int:
        return max(1, len(self.devices))

    @property
    def examples_per_step(self) -> float | None:
        """This worker's share of each global batch, if the global batch size is known.

        Every worker of a multi-worker run steps through the same global batches, each
        consuming its replicas' part of them: the shares add up to the global batch.
        """
        if self.global_batch_size is None:
            return None
        in_sync = max(self.replicas_in_sync or self.replicas, self.replicas)
        return self.global_batch_size * self.replicas / in_sync

    def examples(self, steps: int) -> int | None:
        """This worker's examples in ``steps`` steps (rounded down), if known."""
        if self.global_batch_size is None:
            return None
        in_sync = max(self.replicas_in_sync or self.replicas, self.replicas)
        return steps * self.global_batch_size * self.replicas // in_sync


class SnapshotBuilder:
    """Builds the snapshot of push number ``sequence`` from ``meter``'s counts and the job.

    :meth:`describe_job` runs on the training thread; everything else on the pusher thread.
    ``clock`` (monotonic seconds) paces memory samples and the throughput window.
    """

    def __init__(
        self,
        meter: StepMeter,
        session: str,
        global_batch_size: int | None,
        probe: DeviceProbe,
        clock: Callable[[], float] = time.monotonic,
        loss: Callable[[], float | None] | None = None,
        comm: CommMeter | None = None,
    ) -> None:
        self.session = session
        self._meter = meter
        self._probe = probe
        self._clock = clock
        # Where the loss is read, on this thread, when the meter is not told it (torch: a
        # tensor, read here so that the training thread never waits for the device).
        self._loss = loss
        self._comm = comm
        self._found_for: tuple[str, ...] | None = None  # the devices find_gpus mapped
        self._job = Job(global_batch_size=global_batch_size)
        self._job_lock = threading.Lock()
        self._replicas: list[devices.ReplicaDevice] = []
        self._memory: dict[int, tuple[float, float]] = {}
        self._memory_sampled = float("-inf")
        self._throughput_samples: deque[tuple[float, float, float]] = deque()
        self._examples_per_second: float | None = None
        self._scaling_baseline: float | None = None
        # Where the examples are counted as the batches were (the callback's ExampleCounter),
        # when the meter is not told them; None: steps times the global batch.
        self._counted_examples: Callable[[], int | None] | None = None
        self._gradient_bytes: int | None = None
        self._examples_warned = False

    @property
    def job(self) -> Job:
        with self._job_lock:
            return self._job

    def describe_job(
        self,
        model: object,
        strategy: object,
        replica_devices: Sequence[str],
        batch_size: object,
        replicas_in_sync: int | None = None,
    ) -> None:
        """What a fit trains: its model and strategy names, this worker's replica devices, the
        batch size Keras reports (used only while no global batch size is known), and the
        replicas of the whole run."""
        with self._job_lock:
            known = self._job.global_batch_size
            if known is None and isinstance(batch_size, int) and batch_size > 0:
                known = batch_size
            self._job = Job(
                None if model is None else short_text(model),
                None if strategy is None else short_text(strategy),
                tuple(replica_devices),
                known,
                replicas_in_sync,
            )

    def count_examples_with(self, read: Callable[[], int | None]) -> None:
        """From now on ``examples_total`` is what ``read`` answers on this thread (None: not
        known yet), instead of steps times the global batch."""
        self._counted_examples = read

    def set_gradient_bytes(self, size: int) -> None:
        """The bytes one replica's gradients all-reduce each step (its trainable parameters),
        for the report's all-reduce estimate where none is measured."""
        self._gradient_bytes = size if size > 0 else None

    def set_global_batch_size(self, size: int) -> None:
        """The global batch size, found once training has begun (Lightning's first step)."""
        with self._job_lock:
            self._job = dataclasses.replace(self._job, global_batch_size=size)

    def attach_comm(self, comm: CommMeter) -> None:
        """From now on the snapshots carry ``comm``'s all-reduce times (a model was attached)."""
        self._comm = comm

    def set_scaling_baseline(self, examples_per_second: float) -> None:
        """Throughput of the same job on one replica: the snapshots then carry the speedup."""
        self._scaling_baseline = float(examples_per_second)

    def steady_examples_per_second(self) -> float | None:
        """Examples/s over all measured steps (first step, evaluation excluded), if known."""
        reading = self._meter.read()
        examples = _measured_examples(self.job, reading, self._examples_counted())
        if examples is None or reading.measured_seconds <= 0:
            return None
        return examples / reading.measured_seconds

    def find_gpus(self) -> None:
        """Map the replicas to GPUs by PCI bus id, and to NVML UUIDs where NVML knows them.

        Once per training, off the training thread. The environment's bus ids are in place at
        once, before TensorFlow's slower device listing answers.
        """
        job_devices = self.job.devices
        self._found_for = job_devices
        overrides = devices.bus_ids_for_process(
            os.environ.get(devices.REPLICA_PCI_BUS_IDS_ENV),
            len(job_devices),
            os.environ.get(devices.LOCAL_RANK_ENV),
        )
        self._replicas = devices.match_replicas(job_devices, {}, None, overrides)
        by_index = self._probe.gpu_bus_ids()
        replicas = devices.match_replicas(job_devices, by_index, None, overrides)
        bus_ids = [replica.pci_bus_id for replica in replicas if replica.pci_bus_id]
        uuids = self._probe.nvml_uuids(bus_ids)
        replicas = devices.match_replicas(job_devices, by_index, uuids.get, overrides)
        # NVML's answer by bus id first (it names the GPU the exporter sees); else the UUID the
        # framework reports for the replica's own GPU, unless the bus id was overridden.
        framework_uuids = self._probe.gpu_uuids()
        for position, replica in enumerate(replicas):
            kind_index = devices.device_kind_and_index(replica.device)
            if replica.uuid is None and position >= len(overrides) and kind_index is not None:
                found = framework_uuids.get(kind_index[1]) if kind_index[0] == "GPU" else None
                if found is not None:
                    replicas[position] = dataclasses.replace(replica, uuid=found)
        self._replicas = replicas

    def build(self, active: bool, sequence: int, dropped: int) -> TrainingSnapshot:
        """The full cumulative snapshot of push ``sequence``, ``dropped`` pushes given up on."""
        job = self.job
        if self._found_for is not None and job.devices != self._found_for:
            self._refind_gpus()  # the job changed since (a model attached after the start)
        self._sample_memory()
        reading = self._meter.read()
        counted = self._examples_counted()  # read after the meter: it may be steps ahead
        self._window_throughput(job, reading, counted)
        batch_size = job.global_batch_size
        examples_total = reading.examples_total
        if examples_total is None:
            examples_total = _examples_of_counted_steps(counted, job.examples(reading.steps_total))
        loss = reading.loss if self._loss is None else self._loss()
        comm = self._comm.read() if self._comm is not None else None
        return TrainingSnapshot(
            schema=1,
            session=self.session,
            sequence=sequence,
            active=active,
            model=job.model,
            strategy=job.strategy,
            replicas=job.replicas,
            global_batch_size=batch_size,
            steps_total=reading.steps_total,
            examples_total=examples_total,
            step_duration_seconds=StepDurations(
                bucket_counts=list(reading.bucket_counts),
                count=reading.duration_count,
                sum_seconds=reading.duration_sum_seconds,
            ),
            allreduce_seconds=None
            if comm is None
            else StepDurations(
                bucket_counts=list(comm.bucket_counts),
                count=comm.count,
                sum_seconds=comm.sum_seconds,
            ),
            gradient_bytes=self._gradient_bytes,
            examples_per_second=self._examples_per_second,
            epoch=reading.epoch,
            loss=loss,
            replica_devices=[self._replica(replica) for replica in self._replicas],
            scaling=self._scaling(job),
            telemetry_dropped_total=dropped,
            # So the exporter can tell this run's processes on its GPUs from others' (pid).
            pid=os.getpid(),
            pid_namespace=pid_namespace(),
        )

    def body(self, active: bool, sequence: int, dropped: int) -> bytes:
        """:meth:`build` as the JSON the exporter takes (the pusher's ``build_body``)."""
        snapshot = self.build(active, sequence, dropped)
        return snapshot.encode()

    def _examples_counted(self) -> int | None:
        read = self._counted_examples
        if read is None:
            return None
        try:
            return read()
        except Exception as error:  # the device is gone (shutdown): steps x batch this push
            if not self._examples_warned:
                self._examples_warned = True
                log.warning("mirrorwatch: cannot read the examples counted: %r", error)
            return None

    def _replica(self, replica: devices.ReplicaDevice) -> Replica:
        current, peak = self._memory.get(replica.replica, (None, None))
        return Replica(
            replica=replica.replica,
            device=replica.device[:256],
            uuid=replica.uuid,
            pci_bus_id=replica.pci_bus_id,
            memory_current_bytes=current,
            memory_peak_bytes=peak,
        )

    def _refind_gpus(self) -> None:
        try:
            self.find_gpus()
        except Exception as error:  # the pushes go on with the replicas as they were
            self._found_for = self.job.devices
            log.warning("mirrorwatch: cannot map replicas: %r", error)

    def _sample_memory(self) -> None:
        now = self._clock()
        if now - self._memory_sampled < MEMORY_SAMPLE_SECONDS:
            return
        self._memory_sampled = now
        for replica in self._replicas:
            kind_index = devices.device_kind_and_index(replica.device)
            if kind_index is None or kind_index[0] != "GPU":
                continue  # TensorFlow reports zeros for CPUs: absent, not 0
            sample = self._probe.memory_bytes(kind_index[1])
            if sample is not None:
                self._memory[replica.replica] = sample

    def _window_throughput(self, job: Job, reading: MeterReading, counted: int | None) -> None:
        """Examples/s over the last THROUGHPUT_WINDOW_SECONDS of pushes (since the first)."""
        examples = _measured_examples(job, reading, counted)
        if examples is None:
            return
        seconds = reading.measured_seconds
        samples = self._throughput_samples
        now = self._clock()
        while samples and now - samples[0][0] > THROUGHPUT_WINDOW_SECONDS:
            samples.popleft()
        if samples:
            _, examples_then, seconds_then = samples[0]
        else:
            examples_then, seconds_then = 0.0, 0.0
        if seconds - seconds_then > 0 and examples > examples_then:
            self._examples_per_second = (examples - examples_then) / (seconds - seconds_then)
        samples.append((now, examples, seconds))

    def _scaling(self, job: Job) -> Scaling | None:
        baseline = self._scaling_baseline
        throughput = self.steady_examples_per_second()
        if not baseline or not throughput:
            return None
        speedup = throughput / baseline
        if not (0 < speedup <= 1024 and 0 < speedup / job.replicas <= 2):
            return None  # outside what the schema takes: no scaling this push
        return Scaling(
            speedup=speedup,
            efficiency_ratio=speedup / job.replicas,
            baseline_examples_per_second=baseline,
            examples_per_second=throughput,
        )


def _examples_of_counted_steps(counted: int | None, full_batches: int | None) -> int | None:
    """The examples of the steps the meter counted, from the device's count of every step's
    batch (``counted``) and what those steps hold as full batches (``full_batches``).

    The device count is read after the meter, so it may include steps still in flight; it is
    capped at the full batches of the counted steps. Both grow, so the smaller does too: the
    counter never goes down. It is exact whenever no step is in flight (the final snapshot),
    and in every snapshot of a run of full batches; after a short batch, one in flight may be
    in it for a push, a batch at most.
    """
    if counted is None:
        return full_batches
    return counted if full_batches is None else min(counted, full_batches)


def _measured_examples(job: Job, reading: MeterReading, counted: int | None) -> float | None:
    """Examples of the measured steps: as the meter counted them; else at the mean batch of
    the ``counted`` examples of all steps (short last batches included); else from the steps
    and the global batch."""
    if reading.measured_examples is not None:
        return float(reading.measured_examples)
    if counted is not None and reading.steps_total > 0:
        return reading.measured_steps * counted / reading.steps_total
    per_step = job.examples_per_step
    return None if per_step is None else reading.measured_steps * per_step
