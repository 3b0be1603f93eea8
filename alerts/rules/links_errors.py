"""GPU alerts on links, errors and presence: PCIe, NVLink, XID, ECC, missing and lost GPUs."""

from __future__ import annotations

from mirrorwatch.alerts import recorded
from mirrorwatch.alerts.fragments import Fragment
from mirrorwatch.alerts.rules import Alert, Severity
from mirrorwatch.alerts.templates import gpu_value, matchers, value_of
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.labels import TARGET_KEY, key
from mirrorwatch.contract.metrics import (
    EXPORTER_GPUS,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS,
)

# GpuXidError and GpuEccUncorrectable fire for this long after the latest event.
EVENT_MINUTES = 10
EVENT_WINDOW: dict[str, Fragment] = {
    "event_window": f"{EVENT_MINUTES}m",
    "event_seconds": EVENT_MINUTES * 60,
    "event_minutes": EVENT_MINUTES,
}
PCIE_NOW = f"gen {gpu_value(GPU_PCIE_LINK_GENERATION)} x{gpu_value(GPU_PCIE_LINK_WIDTH)}"
PCIE_MAX = f"gen {gpu_value(GPU_PCIE_LINK_GENERATION_MAX)} x{gpu_value(GPU_PCIE_LINK_WIDTH_MAX)}"
TARGET_MATCHERS, TARGET_ARGS = matchers(TARGET_KEY)
NVLINK_OF_GPU = "NVLink {{ $labels.link }} of GPU {{ $labels.gpu }} of «HOST»"


def alerts(t: Thresholds) -> list[Alert]:
    return [
        Alert(
            "GpuPcieLinkDegraded",
            "warning",
            """
            (
              mirrorwatch_gpu_pcie_link_width < mirrorwatch_gpu_pcie_link_width_max
              or
              mirrorwatch_gpu_pcie_link_generation < mirrorwatch_gpu_pcie_link_generation_max
            )
            and on («UUID_KEY»)
              instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m >= «busy»
            """,
            "PCIe link of GPU {{ $labels.gpu }} of «HOST» is degraded",
            "«GPU», «RUN_OF_GPU», is busy but its PCIe link runs at «pcie» while it supports "
            "«pcie_max».",
            "«pcie»",
            fragments={"pcie": PCIE_NOW, "pcie_max": PCIE_MAX},
        ),
        Alert(
            "GpuNvlinkDown",
            "warning",
            "mirrorwatch_gpu_nvlink_up == 0",
            "«nvlink» is down",
            "NVLink link {{ $labels.link }} of «GPU», «RUN_OF_GPU», is down: peer-to-peer "
            "traffic over it falls back to PCIe.",
            "down",
            fragments={"nvlink": NVLINK_OF_GPU},
        ),
        Alert(
            "GpuNvlinkErrors",
            "warning",
            "increase(«errors»[10m]) > «errors_per_10m»",
            "«nvlink» reports errors",
            "NVLink link {{ $labels.link }} of «GPU», «RUN_OF_GPU», counted "
            "{{ $value | humanize }} replay, recovery and CRC errors in the last 10 minutes "
            "(alert above «errors_per_10m»).",
            "{{ $value | humanize }}",
            fragments={"nvlink": NVLINK_OF_GPU, "errors": recorded.NVLINK_ERRORS},
        ),
        xid_alert("critical", 'xid=~"«critical_xids»"', "Critical XID", "critical XID"),
        xid_alert("warning", 'xid!~"«critical_xids»"', "XID", "XID"),
        # The driver's volatile count, present from driver load and kept across an exporter
        # restart: increase() skips the staleness markers of a gap and counts a driver reload
        # as a reset, not an error. A series first seen above 0 holds old errors: no alert.
        Alert(
            "GpuEccUncorrectable",
            "critical",
            """
            mirrorwatch_gpu_ecc_errors_total{type="uncorrected"}
            and
              increase(mirrorwatch_gpu_ecc_errors_total{type="uncorrected"}[«event_window»]) > 0
            """,
            "Uncorrectable ECC errors on GPU {{ $labels.gpu }} of «HOST»",
            "«GPU», «RUN_OF_GPU», reported uncorrectable ECC memory errors in the last "
            "«event_minutes» minutes ({{ $value }} since the driver loaded).",
            "{{ $value }}",
            fragments=EVENT_WINDOW,
        ),
        # The expected count is the exporter's --expected-gpus; without it, the most GPUs the
        # host showed over the lookback, so a GPU that vanishes is noticed either way.
        Alert(
            "GpuMissing",
            "critical",
            """
            (
              (mirrorwatch_exporter_expected_gpus > 0)
              or on («TARGET_KEY»)
              max_over_time(mirrorwatch_exporter_gpus[«fallback_lookback»])
            )
            - on («TARGET_KEY»)
              mirrorwatch_exporter_gpus
            > 0
            """,
            "«HOST» has fewer GPUs than expected",
            "The exporter on «HOST» sees «gpus» GPU(s), {{ $value }} fewer than "
            "{{ with printf `mirrorwatch_exporter_expected_gpus{«target»} > 0` «target_args» "
            "| query }}the {{ . | first | value }} set by --expected-gpus"
            "{{ else }}the most it saw in the last «fallback_lookback» (no --expected-gpus set)"
            "{{ end }}.",
            "{{ $value }} missing",
            fragments={
                "gpus": value_of(EXPORTER_GPUS, TARGET_KEY),
                "target": TARGET_MATCHERS,
                "target_args": TARGET_ARGS,
            },
        ),
        Alert(
            "GpuLost",
            "critical",
            "mirrorwatch_gpu_up == 0",
            "GPU {{ $labels.gpu }} of «HOST» is lost",
            "«GPU», «RUN_OF_GPU», no longer answers NVML: it has fallen off the bus or its "
            "driver state is broken.",
            "lost",
        ),
    ]


def xid_alert(severity: Severity, matcher: str, title: str, kind: str) -> Alert:
    """GpuXidError for the XIDs ``matcher`` selects (the critical ones, or all the others).

    The exporter stamps each XID number's latest event (Unix time): no counter function can
    see an XID that comes back after an exporter restart at the count it had before, and an
    instant `x unless x offset 10m` is true 10 minutes after every scrape gap (an instant
    selector finds nothing when the newest sample is a staleness marker). The counter on the
    left keeps `$value` the count since the exporter started.
    """
    return Alert(
        "GpuXidError",
        severity,
        """
        mirrorwatch_gpu_xid_errors_total{«matcher»}
        and
          time() - mirrorwatch_gpu_xid_last_event_timestamp_seconds{«matcher»} < «event_seconds»
        """,
        "«title» {{ $labels.xid }} on GPU {{ $labels.gpu }} of «HOST»",
        "«GPU», «RUN_OF_GPU», reported «kind» {{ $labels.xid }} in the last «event_minutes» "
        "minutes, the latest at «latest» ({{ $value }} since the exporter started).",
        "{{ $value }}",
        fragments={
            **EVENT_WINDOW,
            "matcher": matcher,
            "title": title,
            "kind": kind,
            "latest": value_of(
                GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS,
                key("uuid", "xid"),
                pipe="humanizeTimestamp",
            ),
        },
    )
