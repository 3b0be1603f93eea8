"""GPU host row about who runs on each GPU and how busy its SMs really are (processes, GPM, MIG)."""

from __future__ import annotations

from dashboards.host_gpus import by_gpu
from dashboards.kinds import amount_series, ratio_series
from dashboards.layout import Row
from mirrorwatch.contract.metrics import (
    GPU_DRAM_ACTIVITY_RATIO,
    GPU_MIG_INFO,
    GPU_MIG_MEMORY_TOTAL_BYTES,
    GPU_MIG_MEMORY_USED_BYTES,
    GPU_PROCESS_MEMORY_USED_BYTES,
    GPU_PROCESS_SM_UTILIZATION_RATIO,
    GPU_PROCESSES,
    GPU_PROCESSES_MEMORY_USED_BYTES,
    GPU_SM_ACTIVITY_RATIO,
    GPU_SM_OCCUPANCY_RATIO,
    GPU_TENSOR_ACTIVITY_RATIO,
    GPU_UTILIZATION_RATIO,
)


def processes_row() -> Row:
    process = "{{process}} ({{pid}})"
    return Row(
        "Processes and SM activity",
        [
            amount_series(
                "Processes per GPU",
                "Processes with a context on each GPU, compute and graphics. A training GPU "
                "normally has one compute process per replica's worker; more is another job "
                "sharing it (GpuSharedWithForeignProcess where the run reports its pid). "
                "Empty where NVML cannot list processes.",
                "short",
                [by_gpu(GPU_PROCESSES, legend="{{type}}")],
            ),
            amount_series(
                "Process memory (top N)",
                "Device memory of the processes using the most of it on each GPU (the "
                "exporter's --top-processes, 5 by default), by pid and name, and all of the "
                "GPU's processes together. A process that leaves drops off at the next scrape.",
                "bytes",
                [
                    by_gpu(GPU_PROCESS_MEMORY_USED_BYTES, legend=process),
                    by_gpu(GPU_PROCESSES_MEMORY_USED_BYTES, legend="all"),
                ],
            ),
            ratio_series(
                "Process SM share",
                "Each top process's share of the GPU's SM time over the driver's last sample "
                "(nvmlDeviceGetProcessUtilization). Two processes sharing a training GPU "
                "split it; empty on GPUs that do not report it.",
                [by_gpu(GPU_PROCESS_SM_UTILIZATION_RATIO, legend=process)],
            ),
            ratio_series(
                "SM activity against utilisation (GPM)",
                "GPM's SM activity (share of SMs busy, Hopper and later) beside utilisation "
                "(share of time any kernel ran). Utilisation near 100 % with low SM activity: "
                "small kernels or a starved replica keep the GPU nominally busy. Where every "
                "GPU of a run has it, the run's balance is measured in SM activity.",
                [
                    by_gpu(GPU_SM_ACTIVITY_RATIO, legend="SM activity"),
                    by_gpu(GPU_UTILIZATION_RATIO, legend="utilisation"),
                ],
                width=12,
            ),
            ratio_series(
                "SM occupancy, tensor and DRAM activity (GPM)",
                "Resident warps against the SMs' maximum (occupancy), share of time the "
                "tensor cores ran, and DRAM bandwidth against its peak, per GPU, from GPM. "
                "Low tensor activity in mixed-precision training: the math is not on tensor "
                "cores; DRAM near 100 %: memory-bound.",
                [
                    by_gpu(GPU_SM_OCCUPANCY_RATIO, legend="occupancy"),
                    by_gpu(GPU_TENSOR_ACTIVITY_RATIO, legend="tensor"),
                    by_gpu(GPU_DRAM_ACTIVITY_RATIO, legend="DRAM"),
                ],
                width=12,
            ),
            amount_series(
                "MIG devices",
                "Memory in use against the size of each MIG device (GPU instance GI, compute "
                f"instance CI) of the GPUs with MIG on; {GPU_MIG_INFO} names each "
                "device's profile and MIG UUID. A MIG parent has no utilisation, and the "
                "balance rules leave it out: see the runbook, MirroredStrategy and MIG. Empty "
                "where no GPU has MIG on.",
                "bytes",
                [
                    by_gpu(
                        GPU_MIG_MEMORY_USED_BYTES,
                        legend="GI {{gpu_instance}} CI {{compute_instance}} used",
                    ),
                    by_gpu(
                        GPU_MIG_MEMORY_TOTAL_BYTES,
                        legend="GI {{gpu_instance}} CI {{compute_instance}} size",
                    ),
                ],
                width=24,
            ),
        ],
    )
