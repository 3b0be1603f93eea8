"""The table of every series mirrorwatch serves: name, type, unit, help and labels, each once.

The collectors write their families from these rows, and the rules, dashboards and run report
take their names from here; docs/metrics.md's reference table is generated from it
(``make metrics``: tests/contract/metrics_doc.py), as dcgm-exporter keeps its counters in one
file. A name is the series name a scrape shows and a user greps for: a
counter's ends in ``_total``, a histogram's has no ``_bucket``, ``_sum`` or ``_count``.

Each row is a ``str`` (its name), so PromQL is written with the row itself:
``f"rate({GPU_ENERGY_JOULES_TOTAL}[5m])"``.
"""

from __future__ import annotations

from typing import Literal

MetricType = Literal["gauge", "counter", "histogram"]
GPU = ("gpu", "uuid")
WORKER = ("run", "worker")


class Metric(str):
    """One series name, and what it is: its type, unit (base units; ``ratio`` is 0..1, ``""``
    a count, a state or an info series), HELP text, and labels (beyond the scrape target's)."""

    type: MetricType
    unit: str
    help: str
    labels: tuple[str, ...]

    def __new__(
        cls, name: str, type: MetricType, unit: str, help: str, labels: tuple[str, ...] = ()
    ) -> Metric:
        row = super().__new__(cls, name)
        row.type, row.unit, row.help, row.labels = type, unit, help, labels
        return row

    @property
    def family(self) -> str:
        """The family's name as client_python and OpenMetrics take it: a counter's without
        ``_total``."""
        return self.removesuffix("_total") if self.type == "counter" else str(self)

    def part(self, suffix: Literal["bucket", "sum", "count"]) -> str:
        """A histogram's ``_bucket``, ``_sum`` or ``_count`` series."""
        return f"{self}_{suffix}"


METRICS: list[Metric] = []


def _row(name: str, type: MetricType, unit: str, help: str, labels: tuple[str, ...] = ()) -> Metric:
    row = Metric(name, type, unit, help, labels)
    METRICS.append(row)
    return row


# --- GPU (exporter/collectors/) -------------------------------------------------------------------

GPU_INFO = _row(
    "mirrorwatch_gpu_info", "gauge", "", "GPU identity; always 1.", (*GPU, "name", "pci_bus_id")
)
GPU_UP = _row(
    "mirrorwatch_gpu_up",
    "gauge",
    "",
    "1 when the GPU answered this scrape, 0 when lost or unreadable.",
    GPU,
)
GPU_UTILIZATION_RATIO = _row(
    "mirrorwatch_gpu_utilization_ratio",
    "gauge",
    "ratio",
    "Fraction of the last sample period in which a kernel ran on the GPU (0..1).",
    GPU,
)
GPU_MEMORY_UTILIZATION_RATIO = _row(
    "mirrorwatch_gpu_memory_utilization_ratio",
    "gauge",
    "ratio",
    "Fraction of the last sample period in which device memory was read or written (0..1).",
    GPU,
)
GPU_MEMORY_USED_BYTES = _row(
    "mirrorwatch_gpu_memory_used_bytes", "gauge", "bytes", "Device memory in use, in bytes.", GPU
)
GPU_MEMORY_TOTAL_BYTES = _row(
    "mirrorwatch_gpu_memory_total_bytes",
    "gauge",
    "bytes",
    "Device memory in total, in bytes.",
    GPU,
)
GPU_TEMPERATURE_CELSIUS = _row(
    "mirrorwatch_gpu_temperature_celsius",
    "gauge",
    "celsius",
    "GPU core temperature, in degrees Celsius.",
    GPU,
)
GPU_TEMPERATURE_THRESHOLD_CELSIUS = _row(
    "mirrorwatch_gpu_temperature_threshold_celsius",
    "gauge",
    "celsius",
    "Temperature limits NVML reports: slowdown and shutdown of the core, "
    "the maximum operating temperatures of core and memory.",
    (*GPU, "threshold"),
)
GPU_FAN_SPEED_RATIO = _row(
    "mirrorwatch_gpu_fan_speed_ratio",
    "gauge",
    "ratio",
    "Intended fan speed as a fraction of its maximum (0..1).",
    (*GPU, "fan"),
)
GPU_POWER_WATTS = _row(
    "mirrorwatch_gpu_power_watts", "gauge", "watts", "Power draw of the board, in watts.", GPU
)
GPU_POWER_LIMIT_WATTS = _row(
    "mirrorwatch_gpu_power_limit_watts",
    "gauge",
    "watts",
    "Power limit the driver enforces, in watts.",
    GPU,
)
GPU_ENERGY_JOULES_TOTAL = _row(
    "mirrorwatch_gpu_energy_joules_total",
    "counter",
    "joules",
    "Energy used since the driver loaded, in joules.",
    GPU,
)
GPU_CLOCK_HERTZ = _row(
    "mirrorwatch_gpu_clock_hertz", "gauge", "hertz", "Current clock, in hertz.", (*GPU, "clock")
)
GPU_CLOCK_MAX_HERTZ = _row(
    "mirrorwatch_gpu_clock_max_hertz",
    "gauge",
    "hertz",
    "Maximum clock the GPU supports, in hertz.",
    (*GPU, "clock"),
)
GPU_CLOCKS_EVENT_ACTIVE = _row(
    "mirrorwatch_gpu_clocks_event_active",
    "gauge",
    "",
    "1 while this reason holds clocks below their maximum; absent when unsupported.",
    (*GPU, "reason"),
)
GPU_THROTTLE_SECONDS_TOTAL = _row(
    "mirrorwatch_gpu_throttle_seconds_total",
    "counter",
    "seconds",
    "Time clocks were held below the requested level, by policy, in seconds.",
    (*GPU, "reason"),
)
GPU_PCIE_LINK_GENERATION = _row(
    "mirrorwatch_gpu_pcie_link_generation", "gauge", "", "Current PCIe link generation.", GPU
)
GPU_PCIE_LINK_GENERATION_MAX = _row(
    "mirrorwatch_gpu_pcie_link_generation_max",
    "gauge",
    "",
    "Highest PCIe generation the GPU and its slot support together.",
    GPU,
)
GPU_PCIE_LINK_WIDTH = _row(
    "mirrorwatch_gpu_pcie_link_width", "gauge", "", "Current PCIe link width, in lanes.", GPU
)
GPU_PCIE_LINK_WIDTH_MAX = _row(
    "mirrorwatch_gpu_pcie_link_width_max",
    "gauge",
    "",
    "Widest PCIe link the GPU and its slot support together, in lanes.",
    GPU,
)
GPU_PCIE_TRANSMIT_BYTES_TOTAL = _row(
    "mirrorwatch_gpu_pcie_transmit_bytes_total",
    "counter",
    "bytes",
    "Bytes the GPU sent over PCIe.",
    GPU,
)
GPU_PCIE_RECEIVE_BYTES_TOTAL = _row(
    "mirrorwatch_gpu_pcie_receive_bytes_total",
    "counter",
    "bytes",
    "Bytes the GPU received over PCIe.",
    GPU,
)
GPU_PCIE_REPLAYS_TOTAL = _row(
    "mirrorwatch_gpu_pcie_replays_total",
    "counter",
    "",
    "PCIe replays (retransmissions after link errors).",
    GPU,
)
GPU_NVLINK_UP = _row(
    "mirrorwatch_gpu_nvlink_up", "gauge", "", "1 when the NVLink link is active.", (*GPU, "link")
)
GPU_NVLINK_TRANSMIT_BYTES_TOTAL = _row(
    "mirrorwatch_gpu_nvlink_transmit_bytes_total",
    "counter",
    "bytes",
    "Data bytes sent over the link.",
    (*GPU, "link"),
)
GPU_NVLINK_RECEIVE_BYTES_TOTAL = _row(
    "mirrorwatch_gpu_nvlink_receive_bytes_total",
    "counter",
    "bytes",
    "Data bytes received over the link.",
    (*GPU, "link"),
)
GPU_NVLINK_ERRORS_TOTAL = _row(
    "mirrorwatch_gpu_nvlink_errors_total",
    "counter",
    "",
    "NVLink data-link errors: replays, recoveries, flit and data CRC errors.",
    (*GPU, "link", "type"),
)
GPU_ECC_ERRORS_TOTAL = _row(
    "mirrorwatch_gpu_ecc_errors_total",
    "counter",
    "",
    "Memory ECC errors since the driver loaded; absent when ECC is off.",
    (*GPU, "type"),
)
GPU_XID_ERRORS_TOTAL = _row(
    "mirrorwatch_gpu_xid_errors_total",
    "counter",
    "",
    "XID error events since the exporter started, by XID number.",
    (*GPU, "xid"),
)
GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS = _row(
    "mirrorwatch_gpu_xid_last_event_timestamp_seconds",
    "gauge",
    "seconds",
    "Unix time of the latest XID event of this number since the exporter started.",
    (*GPU, "xid"),
)
GPU_P2P_LINK_INFO = _row(
    "mirrorwatch_gpu_p2p_link_info",
    "gauge",
    "",
    "The fastest path from this GPU to peer_gpu; always 1.",
    (*GPU, "peer_gpu", "link"),
)

# --- processes and GPM ----------------------------------------------------------------------------

GPU_PROCESSES = _row(
    "mirrorwatch_gpu_processes",
    "gauge",
    "",
    "Processes with a context on the GPU, by type (a process of both types counts in each).",
    (*GPU, "type"),
)
GPU_PROCESSES_MEMORY_USED_BYTES = _row(
    "mirrorwatch_gpu_processes_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory the GPU's processes use, summed over those that report it, bytes.",
    GPU,
)
GPU_PROCESS_MEMORY_USED_BYTES = _row(
    "mirrorwatch_gpu_process_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory one process uses, in bytes; the top processes by memory per GPU only.",
    (*GPU, "pid", "process"),
)
GPU_PROCESS_SM_UTILIZATION_RATIO = _row(
    "mirrorwatch_gpu_process_sm_utilization_ratio",
    "gauge",
    "ratio",
    "The process's share of SM time over the driver's last sample; top processes only.",
    (*GPU, "pid", "process"),
)
GPU_SM_ACTIVITY_RATIO = _row(
    "mirrorwatch_gpu_sm_activity_ratio",
    "gauge",
    "ratio",
    "Share of SMs busy over the last GPM interval (NVML_GPM_METRIC_SM_UTIL).",
    GPU,
)
GPU_SM_OCCUPANCY_RATIO = _row(
    "mirrorwatch_gpu_sm_occupancy_ratio",
    "gauge",
    "ratio",
    "Resident warps against the SMs' maximum over the last GPM interval"
    " (NVML_GPM_METRIC_SM_OCCUPANCY).",
    GPU,
)
GPU_TENSOR_ACTIVITY_RATIO = _row(
    "mirrorwatch_gpu_tensor_activity_ratio",
    "gauge",
    "ratio",
    "Share of time the SMs ran any tensor operation over the last GPM interval"
    " (NVML_GPM_METRIC_ANY_TENSOR_UTIL).",
    GPU,
)
GPU_DRAM_ACTIVITY_RATIO = _row(
    "mirrorwatch_gpu_dram_activity_ratio",
    "gauge",
    "ratio",
    "DRAM bandwidth used against its peak over the last GPM interval"
    " (NVML_GPM_METRIC_DRAM_BW_UTIL).",
    GPU,
)

# --- MIG ------------------------------------------------------------------------------------------

MIG_INSTANCE = (*GPU, "gpu_instance", "compute_instance")
GPU_MIG_ENABLED = _row(
    "mirrorwatch_gpu_mig_enabled",
    "gauge",
    "",
    "1 when MIG is on for the GPU (nvmlDeviceGetMigMode, current mode); absent on GPUs"
    " without MIG.",
    GPU,
)
GPU_MIG_INFO = _row(
    "mirrorwatch_gpu_mig_info",
    "gauge",
    "",
    "One MIG device of the GPU: its UUID and NVML profile name (e.g. 3g.40gb).",
    (*GPU, "mig_uuid", "gpu_instance", "compute_instance", "profile"),
)
GPU_MIG_MEMORY_USED_BYTES = _row(
    "mirrorwatch_gpu_mig_memory_used_bytes",
    "gauge",
    "bytes",
    "Framebuffer memory allocated on the MIG device's GPU instance.",
    MIG_INSTANCE,
)
GPU_MIG_MEMORY_TOTAL_BYTES = _row(
    "mirrorwatch_gpu_mig_memory_total_bytes",
    "gauge",
    "bytes",
    "Framebuffer memory of the MIG device's GPU instance.",
    MIG_INSTANCE,
)
GPU_MIG_PROCESSES = _row(
    "mirrorwatch_gpu_mig_processes",
    "gauge",
    "",
    "Compute processes on the MIG device.",
    MIG_INSTANCE,
)


def _mig_gpm(name: str, what: str) -> Metric:
    return _row(
        name,
        "gauge",
        "ratio",
        f"GPM {what} of the MIG device's GPU instance over the last GPM interval"
        " (nvmlGpmMigSampleGet; Hopper and later).",
        (*GPU, "gpu_instance"),
    )


GPU_MIG_SM_ACTIVITY_RATIO = _mig_gpm("mirrorwatch_gpu_mig_sm_activity_ratio", "share of SMs busy")
GPU_MIG_SM_OCCUPANCY_RATIO = _mig_gpm("mirrorwatch_gpu_mig_sm_occupancy_ratio", "SM occupancy")
GPU_MIG_TENSOR_ACTIVITY_RATIO = _mig_gpm(
    "mirrorwatch_gpu_mig_tensor_activity_ratio", "tensor activity"
)
GPU_MIG_DRAM_ACTIVITY_RATIO = _mig_gpm(
    "mirrorwatch_gpu_mig_dram_activity_ratio", "DRAM bandwidth used"
)

# --- the exporter itself --------------------------------------------------------------------------

UP = _row("mirrorwatch_up", "gauge", "", "1 when the GPU backend is usable.")
EXPORTER_BUILD_INFO = _row(
    "mirrorwatch_exporter_build_info",
    "gauge",
    "",
    "Exporter version, GPU backend and driver version; always 1.",
    ("version", "backend", "driver_version"),
)
EXPORTER_GPUS = _row("mirrorwatch_exporter_gpus", "gauge", "", "GPUs the backend sees.")
EXPORTER_EXPECTED_GPUS = _row(
    "mirrorwatch_exporter_expected_gpus",
    "gauge",
    "",
    "GPUs this host should have (--expected-gpus); 0 when not configured.",
)
EXPORTER_RUN_TTL_SECONDS = _row(
    "mirrorwatch_exporter_run_ttl_seconds",
    "gauge",
    "seconds",
    "Seconds without a push until a training worker reads inactive (--run-ttl).",
)
EXPORTER_COLLECTOR_SUCCESS = _row(
    "mirrorwatch_exporter_collector_success",
    "gauge",
    "",
    "1 when the collector's last run succeeded.",
    ("collector",),
)
EXPORTER_COLLECTOR_DURATION_SECONDS = _row(
    "mirrorwatch_exporter_collector_duration_seconds",
    "gauge",
    "seconds",
    "How long the collector's last run took, in seconds.",
    ("collector",),
)
EXPORTER_INGEST_REJECTED_TOTAL = _row(
    "mirrorwatch_exporter_ingest_rejected_total",
    "counter",
    "",
    "Training telemetry pushes and deletes the ingest API refused, by reason.",
    ("reason",),
)

# --- training (exporter/collectors/training.py, from the ingest API) ------------------------------

TRAINING_ACTIVE = _row(
    "mirrorwatch_training_active",
    "gauge",
    "",
    "1 while the worker trains and pushed within the TTL.",
    WORKER,
)
TRAINING_INFO = _row(
    "mirrorwatch_training_info",
    "gauge",
    "",
    "Model and strategy of the worker; always 1.",
    (*WORKER, "model", "strategy"),
)
TRAINING_REPLICAS = _row(
    "mirrorwatch_training_replicas", "gauge", "", "Replicas in sync on the worker.", WORKER
)
TRAINING_GLOBAL_BATCH_SIZE = _row(
    "mirrorwatch_training_global_batch_size",
    "gauge",
    "",
    "Examples per step over all replicas.",
    WORKER,
)
TRAINING_STEPS_TOTAL = _row(
    "mirrorwatch_training_steps_total",
    "counter",
    "",
    "Training steps since the worker's session started.",
    WORKER,
)
TRAINING_EXAMPLES_TOTAL = _row(
    "mirrorwatch_training_examples_total",
    "counter",
    "",
    "Training examples since the worker's session started.",
    WORKER,
)
TRAINING_STEP_DURATION_SECONDS = _row(
    "mirrorwatch_training_step_duration_seconds",
    "histogram",
    "seconds",
    "Wall time of each training step, in seconds.",
    WORKER,
)
TRAINING_ALLREDUCE_SECONDS = _row(
    "mirrorwatch_training_allreduce_seconds",
    "histogram",
    "seconds",
    "Time each training step's gradient all-reduces were in flight, in seconds.",
    WORKER,
)
TRAINING_EXAMPLES_PER_SECOND = _row(
    "mirrorwatch_training_examples_per_second",
    "gauge",
    "",
    "Training throughput over the recent window, examples/s.",
    WORKER,
)
TRAINING_GRADIENT_BYTES = _row(
    "mirrorwatch_training_gradient_bytes",
    "gauge",
    "bytes",
    "Bytes one replica's gradients all-reduce each step (its trainable parameters).",
    WORKER,
)
TRAINING_EPOCH = _row(
    "mirrorwatch_training_epoch", "gauge", "", "Current epoch, counted from 0.", WORKER
)
TRAINING_LOSS = _row(
    "mirrorwatch_training_loss", "gauge", "", "Loss of the last training step.", WORKER
)
TRAINING_REPLICA_INFO = _row(
    "mirrorwatch_training_replica_info",
    "gauge",
    "",
    "The GPU of this host each replica runs on; uuid matches the GPU series; always 1.",
    (*WORKER, "replica", "gpu", "uuid"),
)
TRAINING_REPLICA_MEMORY_BYTES = _row(
    "mirrorwatch_training_replica_memory_bytes",
    "gauge",
    "bytes",
    "Device memory the replica's allocator holds, current and peak, in bytes.",
    (*WORKER, "replica", "kind"),
)
TRAINING_SCALING_SPEEDUP = _row(
    "mirrorwatch_training_scaling_speedup",
    "gauge",
    "",
    "Throughput on all replicas over throughput on one replica.",
    WORKER,
)
TRAINING_SCALING_EFFICIENCY_RATIO = _row(
    "mirrorwatch_training_scaling_efficiency_ratio",
    "gauge",
    "ratio",
    "Scaling speedup divided by the replica count.",
    WORKER,
)
TRAINING_TELEMETRY_DROPPED_TOTAL = _row(
    "mirrorwatch_training_telemetry_dropped_total",
    "counter",
    "",
    "Snapshots the worker's callback gave up pushing.",
    WORKER,
)
TRAINING_LAST_PUSH_TIMESTAMP_SECONDS = _row(
    "mirrorwatch_training_last_push_timestamp_seconds",
    "gauge",
    "seconds",
    "When the exporter received the worker's last push.",
    WORKER,
)
GPU_FOREIGN_PROCESSES = _row(
    "mirrorwatch_gpu_foreign_processes",
    "gauge",
    "",
    "Processes on a GPU of the run that are not the run's own workers.",
    (*GPU, "run"),
)
GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES = _row(
    "mirrorwatch_gpu_foreign_processes_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory those processes use, in bytes (where NVML reports it).",
    (*GPU, "run"),
)

BY_NAME = {str(row): row for row in METRICS}
