"""The run report's own queries: figures of one range [end - window, end], and what each cause
cost (report/cost.py, docs/report.md "What each cause cost").

Each function gives an instant query that, evaluated at the range's end, holds one figure of
the whole range; the run report shows it beside the number so that anyone can ask again.
Only the report asks these; what the rules and dashboards share with it is in
mirrorwatch.alerts (gpu_queries, training_queries, throttling).
"""

from __future__ import annotations

from typing import Literal

from mirrorwatch.alerts.fragments import num
from mirrorwatch.alerts.gpu_queries import PCIE_LINK, gpu_utilization_mean, slowdown_headroom
from mirrorwatch.alerts.promql import Select, increase, spread
from mirrorwatch.alerts.training_queries import communication_share, seconds_since_last_push
from mirrorwatch.contract.labels import GPU_KEY, RUN_KEY, TARGET_KEY, UUID_KEY, WORKER_KEY
from mirrorwatch.contract.metrics import (
    GPU_ECC_ERRORS_TOTAL,
    GPU_NVLINK_UP,
    GPU_P2P_LINK_INFO,
    GPU_PCIE_RECEIVE_BYTES_TOTAL,
    GPU_PCIE_TRANSMIT_BYTES_TOTAL,
    GPU_THROTTLE_SECONDS_TOTAL,
    GPU_UP,
    TRAINING_ALLREDUCE_SECONDS,
    TRAINING_REPLICA_INFO,
    TRAINING_STEP_DURATION_SECONDS,
    TRAINING_STEPS_TOTAL,
)
from mirrorwatch.contract.pcie import PCIE_LANE_BYTES_PER_SECOND


def range_mean(expr: str, window: str, step: str) -> str:
    """The mean of ``expr`` over the range, sampled every ``step`` (a subquery)."""
    return f"avg_over_time(({expr})[{window}:{step}])"


def range_min(expr: str, window: str, step: str) -> str:
    return f"min_over_time(({expr})[{window}:{step}])"


def range_max(expr: str, window: str, step: str) -> str:
    return f"max_over_time(({expr})[{window}:{step}])"


def held_share(condition: str, window: str, step: str, steps: int) -> str:
    """The share of the range's ``steps`` sampling points at which ``condition`` (a filter: a
    series where it holds, none where not) held: the `share` of a report finding."""
    return f"count_over_time(({condition})[{window}:{step}]) / {steps}"


def gpu_utilization_spread(s: Select, window: str) -> str:
    """Highest minus lowest ``window``-mean utilisation of the selected GPUs of each host,
    rounded like the spread rules."""
    return f"round({spread(gpu_utilization_mean(s, window), TARGET_KEY)}, 0.0001)"


def gpu_utilization_deviation(s: Select, window: str) -> str:
    """Each GPU's ``window``-mean utilisation minus the mean over the selected GPUs."""
    mean = gpu_utilization_mean(s, window)
    return f"{mean} - on ({TARGET_KEY}) group_left () avg by ({TARGET_KEY}) ({mean})"


def throttled_seconds(s: Select, violation: str, window: str) -> str:
    """Seconds the driver counted a GPU held back for one cause over ``window``."""
    counter = s(GPU_THROTTLE_SECONDS_TOTAL, f'reason="{violation}"')
    return f"sum by ({GPU_KEY}) ({increase(counter, window)})"


def near_slowdown(s: Select, margin_celsius: float) -> str:
    """Each GPU whose temperature is within ``margin_celsius`` of its slowdown threshold."""
    return f"{slowdown_headroom(s)} <= {num(margin_celsius)}"


def p2p_links(s: Select, window: str) -> str:
    """How each selected GPU reaches each peer, as the exporter saw it during ``window``."""
    return f"max by ({GPU_KEY}, peer_gpu, link) (max_over_time({s(GPU_P2P_LINK_INFO)}[{window}]))"


def nvlink_down(s: Select) -> str:
    return f"{s(GPU_NVLINK_UP)} == 0"


def gpu_lost(s: Select) -> str:
    return f"{s(GPU_UP)} == 0"


def ecc_uncorrected(s: Select, window: str) -> str:
    """Uncorrectable ECC errors counted during ``window``, where there were any."""
    counter = s(GPU_ECC_ERRORS_TOTAL, 'type="uncorrected"')
    return f"sum by ({GPU_KEY}) ({increase(counter, window)}) > 0"


def all_gpus_below(s: Select, window: str, ratio: float) -> str:
    """Each host at moments when even its busiest selected GPU is below ``ratio`` busy."""
    return f"max by ({TARGET_KEY}) ({gpu_utilization_mean(s, window)}) < {num(ratio)}"


def training_steps(s: Select, window: str) -> str:
    """The run's steps so far (the counters are running totals since the run started). Every
    worker of a multi-worker run counts the same synchronous steps: the most, not the sum."""
    return f"max by (run) (max_over_time({s(TRAINING_STEPS_TOTAL)}[{window}]))"


def push_silence(s: Select) -> str:
    """Seconds since each worker's last push, at each moment."""
    return seconds_since_last_push(s)


def held_sum(
    expr: str, condition: str, window: str, step: str, steps: int, key: str = GPU_KEY
) -> str:
    """``expr`` summed over the range's sampling points at which ``condition`` held (matched
    on ``key``), divided by the points: its mean over the range, 0 where it did not hold."""
    return f"sum_over_time((({expr}) and on ({key}) ({condition}))[{window}:{step}]) / {steps}"


def pcie_link_bytes_per_second(s: Select, limit: Literal["", "_max"] = "") -> str:
    """What each GPU's PCIe link carries per direction at the generation and width it runs at
    now (``limit`` "_max": at the most it supports), in bytes per second."""
    width_now, width_top = PCIE_LINK["width"]
    generation_now, generation_top = PCIE_LINK["generation"]
    generation = s(generation_top if limit else generation_now)
    lane = " or ".join(
        f"({generation} == {g}) * 0 + {num(rate)}" for g, rate in PCIE_LANE_BYTES_PER_SECOND.items()
    )
    return f"({lane}) * on ({GPU_KEY}) {s(width_top if limit else width_now)}"


# Each direction's bytes over PCIe.
PCIE_BYTES = {"transmit": GPU_PCIE_TRANSMIT_BYTES_TOTAL, "receive": GPU_PCIE_RECEIVE_BYTES_TOTAL}


def pcie_busy_share(s: Select, direction: Literal["transmit", "receive"], window: str) -> str:
    """The share of each second each GPU's link spent carrying its ``direction`` traffic, from
    its last two samples in ``window``: rate() over a window longer than the series is old
    (a run that began with its exporter) would understate it."""
    traffic = f"irate({s(PCIE_BYTES[direction])}[{window}])"
    return f"{traffic} / on ({GPU_KEY}) ({pcie_link_bytes_per_second(s)})"


def communication_share_now(s: Select, window: str) -> str:
    """``communication_share`` from each worker's last two samples in ``window`` (as irate()),
    so a range's points follow a change at once; over the whole window where those two saw
    no step (a scrape between the same two pushes)."""
    allreduce = f"irate({s(TRAINING_ALLREDUCE_SECONDS.part('sum'))}[{window}])"
    steps = f"irate({s(TRAINING_STEP_DURATION_SECONDS.part('sum'))}[{window}])"
    last = (
        f"clamp_max(sum by ({WORKER_KEY}) ({allreduce}) / (sum by ({WORKER_KEY}) ({steps}) > 0), 1)"
    )
    return f"({last}) or ({communication_share(s, window)})"


def gpu_communication_share(s: Select, window: str) -> str:
    """The share of step time each selected run spent in communication itself, on each GPU it
    trains on (UUID_KEY labels), where its workers measure it: the least of its workers'
    shares, since in a synchronous all-reduce every other worker also waits there for the last
    to arrive, and the last waits for no one."""
    least = f"min by ({RUN_KEY}) ({communication_share_now(s, window)})"
    replicas = s(TRAINING_REPLICA_INFO)
    return f"max by ({UUID_KEY}) ({replicas} * on ({RUN_KEY}) group_left () {least})"
