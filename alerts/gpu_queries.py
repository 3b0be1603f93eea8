"""PromQL of the GPUs' own series that the rules, the dashboards and the run report share."""

from __future__ import annotations

from typing import Literal

from mirrorwatch.alerts.fragments import num
from mirrorwatch.alerts.promql import Select, increase, rate
from mirrorwatch.alerts.recorded import ACTIVE_REPLICA, GPU_UTIL
from mirrorwatch.contract.labels import GPU_KEY, UUID_KEY
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_CLOCK_MAX_HERTZ,
    GPU_ENERGY_JOULES_TOTAL,
    GPU_FOREIGN_PROCESSES,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_MIG_ENABLED,
    GPU_NVLINK_ERRORS_TOTAL,
    GPU_NVLINK_RECEIVE_BYTES_TOTAL,
    GPU_NVLINK_TRANSMIT_BYTES_TOTAL,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
    GPU_UTILIZATION_RATIO,
    GPU_XID_ERRORS_TOTAL,
    GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS,
)

# A MIG parent's utilisation is no measure of its instances' work (NVML answers NotSupported
# there, and GPM on the parent mixes instances that may serve different jobs): the per-GPU
# recordings every balance rule reads leave MIG parents out.
NOT_MIG_PARENT = f"unless on ({UUID_KEY}) ({GPU_MIG_ENABLED} == 1)"


def foreign_processes(s: Select) -> str:
    """Processes on each GPU of a run that are not the run's (count), by the exporter's match."""
    return f"max by ({GPU_KEY}, run) ({s(GPU_FOREIGN_PROCESSES)})"


def memory_used_ratio(s: Select) -> str:
    """Memory in use as a share of the GPU's total, by the driver's count."""
    return f"{s(GPU_MEMORY_USED_BYTES)} / {s(GPU_MEMORY_TOTAL_BYTES)}"


def energy_kwh_per_hour(s: Select, window: str) -> str:
    # J/s over an hour, in kWh (3.6e6 J).
    return rate(s(GPU_ENERGY_JOULES_TOTAL), window) + " * 3600 / 3.6e6"


# Each PCIe link quantity as it runs now and at the most it supports; each direction's bytes.
PCIE_LINK = {
    "width": (GPU_PCIE_LINK_WIDTH, GPU_PCIE_LINK_WIDTH_MAX),
    "generation": (GPU_PCIE_LINK_GENERATION, GPU_PCIE_LINK_GENERATION_MAX),
}
NVLINK_BYTES = {
    "transmit": GPU_NVLINK_TRANSMIT_BYTES_TOTAL,
    "receive": GPU_NVLINK_RECEIVE_BYTES_TOTAL,
}


def pcie_link_ratio(s: Select, quantity: Literal["width", "generation"]) -> str:
    """The PCIe link's width or generation as a share of the most the GPU supports."""
    now, top = PCIE_LINK[quantity]
    return f"{s(now)} / {s(top)}"


def nvlink_bytes_per_second(
    s: Select, direction: Literal["transmit", "receive"], window: str
) -> str:
    """Payload bytes per second over all NVLink links of each GPU."""
    traffic = rate(s(NVLINK_BYTES[direction]), window)
    return f"sum by ({GPU_KEY}) ({traffic})"


def nvlink_errors_per_10m(s: Select, window: str) -> str:
    """Replay, recovery and CRC errors of each link, as errors per 10 minutes at the current rate
    (the unit of the GpuNvlinkErrors threshold)."""
    errors = rate(s(GPU_NVLINK_ERRORS_TOTAL), window)
    return f"sum by ({GPU_KEY}, link) ({errors}) * 600"


def xid_events(s: Select, window: str, window_seconds: str) -> str:
    """XID events per window, by GPU and XID, unharmed by scrape gaps.

    increase() counts the rises it sees, across counter resets and gaps alike. What it cannot
    see, the first event of a new XID series (the exporter creates it at that event) or one
    just before the window's first sample, the exporter's last-event timestamp shows: such an
    event counts once. Never `x unless x offset w`: after every scrape gap the offset finds no
    sample and the whole count is drawn again as new events.
    """
    counter = s(GPU_XID_ERRORS_TOTAL)
    last_event = s(GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS)
    return (
        f"sum by ({GPU_KEY}, xid) ({increase(counter, window)} > 0 "
        f"or 0 * (time() - {last_event} < {window_seconds}) + 1)"
    )


def slowdown_threshold(s: Select) -> str:
    """Each GPU's slowdown temperature threshold."""
    return s(GPU_TEMPERATURE_THRESHOLD_CELSIUS, 'threshold="slowdown"')


def slowdown_headroom(s: Select) -> str:
    """Degrees from each GPU's temperature up to its slowdown threshold."""
    return f"{slowdown_threshold(s)} - on ({GPU_KEY}) {s(GPU_TEMPERATURE_CELSIUS)}"


def busy_gpus(busy: float) -> str:
    """Each GPU's 1-minute mean utilisation where it is at least ``busy``."""
    return f"{GPU_UTIL} >= {num(busy)}"


def busy_unassigned(busy: float) -> str:
    """Busy GPUs that belong to no active run: the host-level balance looks at these."""
    return f"({busy_gpus(busy)} unless on ({UUID_KEY}) {ACTIVE_REPLICA})"


def busy_temperature(busy: float) -> str:
    """The temperature of each busy GPU."""
    return f"({GPU_TEMPERATURE_CELSIUS} and on ({UUID_KEY}) {busy_gpus(busy)})"


def gpu_utilization_mean(s: Select, window: str) -> str:
    """Each GPU's mean utilisation over ``window`` (the GPU_UTIL rule's expression at 1m)."""
    return f"avg_over_time({s(GPU_UTILIZATION_RATIO)}[{window}])"


def pcie_link_degraded(s: Select, busy: float) -> str:
    """Each busy GPU whose PCIe link runs below its widest or fastest."""
    width = f"{s(GPU_PCIE_LINK_WIDTH)} < {s(GPU_PCIE_LINK_WIDTH_MAX)}"
    generation = f"{s(GPU_PCIE_LINK_GENERATION)} < {s(GPU_PCIE_LINK_GENERATION_MAX)}"
    return (
        f"(({width}) or ({generation}))\n"
        f"and on ({UUID_KEY}) {gpu_utilization_mean(s, '1m')} >= {num(busy)}"
    )


def sm_clock_ratio(s: Select) -> str:
    """Each GPU's SM clock as a share of its maximum."""
    clock, top = (s(metric, 'clock="sm"') for metric in (GPU_CLOCK_HERTZ, GPU_CLOCK_MAX_HERTZ))
    return f"{clock} / on ({GPU_KEY}) {top}"
