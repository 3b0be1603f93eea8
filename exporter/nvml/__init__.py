"""The real GPU backend: NVML through nvidia-ml-py, along nvitop's seams.

- ``session``: the only importer of pynvml; every NVML failure becomes an outcome there.
- ``versions``: each API's entry points by driver release, chosen by the symbols loaded.
- ``device``: one GPU's readings in base units (``GpuDevice``).
- ``features``: what a GPU offers for its life, probed once into a frozen ``DeviceFeatures``.
- ``topology``: how the GPUs reach each other (NVLink, NVSwitch, the PCIe path).
- ``events``: XID events, drained by the background thread, and their counts.
- ``pcie``: PCIe throughput sampling for GPUs without PCIe byte-counter fields.
- ``processes``: compute and graphics process lists (raw ctypes, per library layout).
- ``gpm``: GPM sampling, per GPU or per MIG GPU instance, in the background.
- ``mig``: MIG mode and MIG devices (sparse indices), with memory and processes.
- ``recovery``: lost GPUs re-probed with backoff by the background thread, and brought back.
- ``loop``: the background thread.
- ``lifecycle``: ``NvmlBackend``, init with backoff, recovery and shutdown.
- ``preflight``: settings and health state for ``mirrorwatch-doctor``, read on demand.
"""

from mirrorwatch.exporter.nvml.device import NvmlDevice
from mirrorwatch.exporter.nvml.features import DeviceFeatures
from mirrorwatch.exporter.nvml.lifecycle import HEALTH_CHECK_INTERVAL_S, NvmlBackend
from mirrorwatch.exporter.nvml.session import DRIVER_HINT, NvmlSession

__all__ = [
    "DRIVER_HINT",
    "HEALTH_CHECK_INTERVAL_S",
    "DeviceFeatures",
    "NvmlBackend",
    "NvmlDevice",
    "NvmlSession",
]
