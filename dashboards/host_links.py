"""GPU host rows about each GPU's links and errors: PCIe, NVLink, XID and ECC, topology."""

from __future__ import annotations

from dashboards.host_gpus import by_gpu, per_gpu
from dashboards.kinds import against_limit, amount_series, event_counts, up_down_timeline
from dashboards.layout import Row
from dashboards.panels import (
    GREEN_FROM_ONE,
    PanelSpec,
    ThresholdStyle,
    instant_table,
    organize,
    stat_panel,
    table_panel,
)
from dashboards.selectors import GPU, RATE_INTERVAL, RATE_INTERVAL_SECONDS, increase, rate
from mirrorwatch.alerts import gpu_queries
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.metrics import (
    GPU_ECC_ERRORS_TOTAL,
    GPU_NVLINK_UP,
    GPU_P2P_LINK_INFO,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_PCIE_RECEIVE_BYTES_TOTAL,
    GPU_PCIE_REPLAYS_TOTAL,
    GPU_PCIE_TRANSMIT_BYTES_TOTAL,
)


def links_row(t: Thresholds) -> Row:
    pcie = t.GpuPcieLinkDegraded
    nvlink_down = t.GpuNvlinkDown
    errors = t.GpuNvlinkErrors
    return Row(
        "PCIe and NVLink",
        [
            stat_panel(
                PanelSpec(
                    "PCIe link",
                    "PCIe link width and generation as a share of what the GPU supports: red "
                    f"below 100 %. A busy GPU below its maximum for {pcie.hold_in_words} is "
                    "GpuPcieLinkDegraded (x8 slot, riser, seating). Idle GPUs drop the "
                    "generation on purpose to save power.",
                    "percentunit",
                    [
                        per_gpu(gpu_queries.pcie_link_ratio(GPU, "width"), "width"),
                        per_gpu(gpu_queries.pcie_link_ratio(GPU, "generation"), "generation"),
                    ],
                    width=6,
                    thresholds=GREEN_FROM_ONE,
                )
            ),
            against_limit(
                "PCIe link history",
                "PCIe link width (lanes) and generation against their maxima (dashed), over "
                "time: when did the link retrain lower?",
                "none",
                [
                    by_gpu(GPU_PCIE_LINK_WIDTH, legend="width"),
                    by_gpu(GPU_PCIE_LINK_WIDTH_MAX, legend="width max"),
                    by_gpu(GPU_PCIE_LINK_GENERATION, legend="generation"),
                    by_gpu(GPU_PCIE_LINK_GENERATION_MAX, legend="generation max"),
                ],
                "max$",
                width=6,
            ),
            amount_series(
                "PCIe traffic",
                "Bytes per second over each GPU's PCIe link, both ways. Compare GPUs of one "
                "run: a GPU moving less data than its peers is starved by the input "
                "pipeline. Replays (bottom) mean a marginal link.",
                "Bps",
                [
                    per_gpu(rate(GPU(GPU_PCIE_TRANSMIT_BYTES_TOTAL)), "transmit"),
                    per_gpu(rate(GPU(GPU_PCIE_RECEIVE_BYTES_TOTAL)), "receive"),
                ],
                width=6,
            ),
            event_counts(
                "PCIe replays",
                "PCIe replay events per interval. Replays are link-level retries: a steady "
                "count points at a marginal slot, riser or card seating.",
                [per_gpu(increase(GPU(GPU_PCIE_REPLAYS_TOTAL)))],
                width=6,
                alarm=(1, "orange"),
            ),
            up_down_timeline(
                "NVLink status",
                "State of every NVLink link (green up, red down). A link down for "
                f"{nvlink_down.hold_in_words} is GpuNvlinkDown: its traffic falls back to "
                "PCIe. Empty on GPUs without NVLink.",
                [by_gpu(GPU_NVLINK_UP, legend="link {{link}}")],
                width=8,
            ),
            amount_series(
                "NVLink traffic",
                "Payload bytes per second over each GPU's NVLink links, summed over links. "
                "All-reduce traffic of a data-parallel run: GPUs of one run should match.",
                "Bps",
                [
                    per_gpu(
                        gpu_queries.nvlink_bytes_per_second(GPU, direction, RATE_INTERVAL),
                        direction,
                    )
                    for direction in ("transmit", "receive")
                ],
            ),
            event_counts(
                "NVLink errors",
                "Replay, recovery and CRC errors of each NVLink link, as errors per 10 "
                f"minutes at the current rate. Above {errors.errors_per_10m:g} for "
                f"{errors.hold_in_words}: GpuNvlinkErrors; re-seat or replace the bridge.",
                [per_gpu(gpu_queries.nvlink_errors_per_10m(GPU, RATE_INTERVAL), "link {{link}}")],
                alarm=(errors.errors_per_10m, "red"),
                threshold_style=ThresholdStyle.DASHED,
            ),
        ],
    )


def errors_row(t: Thresholds) -> Row:
    critical = ", ".join(str(xid) for xid in t.GpuXidError.critical_xids)
    return Row(
        "Errors and topology",
        [
            event_counts(
                "XID errors",
                "XID events the driver reported per interval, by XID code. "
                f"{critical} need attention now (critical GpuXidError); 13, 31, 43 are usually "
                "the application. Empty on a healthy host.",
                [
                    per_gpu(
                        gpu_queries.xid_events(GPU, RATE_INTERVAL, RATE_INTERVAL_SECONDS),
                        "XID {{xid}}",
                    )
                ],
            ),
            event_counts(
                "ECC errors",
                "Corrected and uncorrected memory ECC errors per interval. Any uncorrected "
                "error is GpuEccUncorrectable: the job on that GPU likely computed garbage; "
                "drain and reset it. Empty when ECC is off.",
                [per_gpu(increase(GPU(GPU_ECC_ERRORS_TOTAL)), "{{type}}")],
            ),
            table_panel(
                PanelSpec(
                    "GPU pair topology",
                    "The fastest path between each pair of GPUs: nvlink, pcie_switch, "
                    "pcie_host_bridge, numa_node or cross_numa (as nvidia-smi topo -m). Replicas "
                    "on GPUs joined by NVLink or one PCIe switch scale best.",
                    "none",
                    [instant_table(GPU(GPU_P2P_LINK_INFO))],
                    width=8,
                    transformations=[
                        organize(
                            exclude=["Time", "Value", "__name__", "job", "uuid"],
                            order=["instance", "gpu", "peer_gpu", "link"],
                        )
                    ],
                )
            ),
        ],
    )
