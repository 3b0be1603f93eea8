"""GPM (GPU Performance Monitoring, Hopper and later): sampled off the scrape path.

Where nvmlGpmQueryDeviceSupport answers ``isSupportedDevice``, the background thread takes a
GPM sample (nvmlGpmSampleAlloc once per GPU, nvmlGpmSampleGet each round) and computes, from
the previous sample and this one, nvmlGpmMetricsGet's SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL
and DRAM_BW_UTIL (percent 0..100, each with its own ``nvmlReturn``). Scrapes read the last
result as ratios. Samples are freed (nvmlGpmSampleFree) when the session ends. A GPU that
stops answering GPM is no longer sampled; a lost one is sampled again once it answers, its
first interval after that starting afresh. On a GPU with MIG on, each GPU instance is sampled
instead (nvmlGpmMigSampleGet(parent, gpu instance id), from 525.53), as the headers direct for
per-instance GPM; the whole-GPU reading is then absent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from mirrorwatch.exporter.backend import GpmReading
from mirrorwatch.exporter.nvml.mig import gpu_instances, mig_enabled
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession

log = logging.getLogger(__name__)

_PERCENT = 100.0
# GpmReading field -> the NVML_GPM_METRIC_* it is computed from.
METRICS: tuple[tuple[str, str], ...] = (
    ("sm_activity_ratio", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy_ratio", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("tensor_activity_ratio", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("dram_activity_ratio", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)


def gpm_supported(session: NvmlSession, gpu: GpuHandle) -> bool:
    if session.has_symbol("nvmlGpmQueryDeviceSupport") is False:
        return False  # before 520.56.06: no GPM at all, nothing to warn about
    support = session.call(gpu, "nvmlGpmQueryDeviceSupport")
    return bool(support is not None and getattr(support, "isSupportedDevice", 0))


# What one pair of samples measures: a whole GPU (gpu instance None) or one GPU instance of a
# MIG-enabled GPU (nvmlGpmMigSampleGet, 525.53 and later).
Target = tuple[int, int | None]


class GpmSampler:
    """One session's GPM sampling of its supported GPUs; ``sample`` runs in the background.

    Each target (a GPU, or each GPU instance of a GPU with MIG on) holds two samples for the
    session's life, taken in turn: the metrics of a round are those of the interval from the
    other one (the previous round) to this one. A MIG parent is sampled per GPU instance only:
    a whole-GPU figure would mix instances that may serve different jobs.
    """

    def __init__(self, session: NvmlSession, gpus: Iterable[GpuHandle]) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._gpus = {gpu.index: gpu for gpu in gpus if gpm_supported(session, gpu)}
        self._samples: dict[Target, tuple[Any, Any]] = {}
        self._turn: dict[Target, int] = {}  # which of the two samples this round takes
        self._has_previous: set[Target] = set()
        self._readings: dict[Target, GpmReading] = {}
        self._unsupported: set[Target] = set()  # targets NVML will not sample

    @property
    def sampled(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(self._gpus)

    def _targets(self, index: int, gpu: GpuHandle) -> list[Target]:
        if not mig_enabled(self._session, gpu):
            return [(index, None)]
        return [(index, gi) for gi in gpu_instances(self._session, gpu)]

    def sample(self) -> None:
        """One GPM sample per target; with the previous one, the metrics of the interval between."""
        with self._lock:
            gpus = list(self._gpus.items())
        for index, gpu in gpus:
            targets = [t for t in self._targets(index, gpu) if t not in self._unsupported]
            with self._lock:  # instances destroyed since the last round: their readings go
                for gone in [t for t in self._readings if t[0] == index and t not in targets]:
                    self._readings.pop(gone, None)
            for target in targets:
                if not self._sample_target(gpu, target):
                    break

    def _sample_target(self, gpu: GpuHandle, target: Target) -> bool:
        """Sample one target; False when its GPU stopped answering GPM (or is lost)."""
        index, gpu_instance = target
        pair = self._samples.get(target) or self._alloc_pair(gpu, target)
        if pair is None:
            self._stop_sampling(index)
            return False
        turn = self._turn.get(target, 0)
        current, previous = pair[turn], pair[1 - turn]
        if gpu_instance is None:
            taken = self._session.call(gpu, "nvmlGpmSampleGet", current)
        else:
            taken = self._session.call(gpu, "nvmlGpmMigSampleGet", gpu_instance, current)
        if taken is None:
            # Lost is not unsupported: start a fresh interval once it answers again.
            self._has_previous.discard(target)
            with self._lock:
                self._readings.pop(target, None)
            if self._session.is_lost(gpu):
                return False
            if gpu_instance is None:
                self._stop_sampling(index)
                return False
            self._unsupported.add(target)  # e.g. 520.x: GPM without nvmlGpmMigSampleGet
            return True
        self._turn[target] = 1 - turn
        if target not in self._has_previous:
            self._has_previous.add(target)
            return True
        reading = self._metrics(gpu, previous, current)
        with self._lock:
            if reading is None:
                self._readings.pop(target, None)
            else:
                self._readings[target] = reading
        return True

    def reading(self, gpu: GpuHandle) -> GpmReading | None:
        with self._lock:
            return self._readings.get((gpu.index, None))

    def instance_readings(self, gpu: GpuHandle) -> dict[int, GpmReading]:
        """The latest metrics of each GPU instance of a MIG-enabled GPU, by instance id."""
        with self._lock:
            return {
                gi: reading
                for (index, gi), reading in self._readings.items()
                if index == gpu.index and gi is not None
            }

    def close(self) -> None:
        """Free every sample (the session is about to end)."""
        pairs, self._samples = list(self._samples.values()), {}
        nvml = self._session.nvml
        for sample in (sample for pair in pairs for sample in pair):
            try:
                nvml.nvmlGpmSampleFree(sample)
            except self._session.error_type as error:
                log.debug("nvmlGpmSampleFree failed: %s", error)

    def _alloc_pair(self, gpu: GpuHandle, target: Target) -> tuple[Any, Any] | None:
        nvml = self._session.nvml
        allocated: list[Any] = []
        try:
            allocated.append(nvml.nvmlGpmSampleAlloc())
            allocated.append(nvml.nvmlGpmSampleAlloc())
        except self._session.error_type as error:
            self._session.handle_error(gpu, "nvmlGpmSampleAlloc", error)
            for sample in allocated:
                nvml.nvmlGpmSampleFree(sample)
            return None
        pair = (allocated[0], allocated[1])
        self._samples[target] = pair
        return pair

    def _metrics(self, gpu: GpuHandle, first: Any, second: Any) -> GpmReading | None:
        nvml = self._session.nvml
        ids = [self._session.constant(name) for _, name in METRICS]
        wanted = [metric_id for metric_id in ids if metric_id is not None]
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = first
        request.sample2 = second
        for slot, metric_id in enumerate(wanted):
            request.metrics[slot].metricId = metric_id
        try:
            answer = nvml.nvmlGpmMetricsGet(request)
        except self._session.error_type as error:
            self._session.handle_error(gpu, "nvmlGpmMetricsGet", error)
            return None
        success = self._session.constant("NVML_SUCCESS") or 0
        values: dict[str, float | None] = {field: None for field, _ in METRICS}
        by_id = {metric_id: field for (field, _), metric_id in zip(METRICS, ids, strict=True)}
        for position in range(int(answer.numMetrics)):
            metric = answer.metrics[position]
            field = by_id.get(int(metric.metricId))
            if field is not None and int(metric.nvmlReturn) == success:
                values[field] = min(max(float(metric.value) / _PERCENT, 0.0), 1.0)
        if all(value is None for value in values.values()):
            return None
        return GpmReading(**values)

    def _stop_sampling(self, index: int) -> None:
        self._has_previous = {t for t in self._has_previous if t[0] != index}
        with self._lock:
            self._gpus.pop(index, None)
            for target in [t for t in self._readings if t[0] == index]:
                self._readings.pop(target, None)
