"""The query catalog: PromQL that the rules, the dashboards and the run report all ask.

Each query is a function of a `Select`, the label matchers every selector of it carries: none
in the rules (`RULES`), Grafana's variables on a dashboard, one host and run in the report. So
"memory in use" or "throttled time" is written once and means the same wherever it is read.
Windows are arguments too: a fixed `5m` in a rule, `$__rate_interval` on a dashboard.
Plain strings only; nothing here imports Grafana's SDK or talks to a Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mirrorwatch.alerts.fragments import num
from mirrorwatch.contract.causes import Cause
from mirrorwatch.contract.labels import GPU_KEY, RUN_KEY, UUID_KEY, WORKER_KEY
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_CLOCK_MAX_HERTZ,
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_ECC_ERRORS_TOTAL,
    GPU_ENERGY_JOULES_TOTAL,
    GPU_FOREIGN_PROCESSES,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_MIG_ENABLED,
    GPU_NVLINK_ERRORS_TOTAL,
    GPU_NVLINK_RECEIVE_BYTES_TOTAL,
    GPU_NVLINK_TRANSMIT_BYTES_TOTAL,
    GPU_NVLINK_UP,
    GPU_P2P_LINK_INFO,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_PCIE_RECEIVE_BYTES_TOTAL,
    GPU_PCIE_TRANSMIT_BYTES_TOTAL,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
    GPU_THROTTLE_SECONDS_TOTAL,
    GPU_UP,
    GPU_UTILIZATION_RATIO,
    GPU_XID_ERRORS_TOTAL,
    GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS,
    TRAINING_ACTIVE,
    TRAINING_ALLREDUCE_SECONDS,
    TRAINING_EXAMPLES_PER_SECOND,
    TRAINING_EXAMPLES_TOTAL,
    TRAINING_INFO,
    TRAINING_LAST_PUSH_TIMESTAMP_SECONDS,
    TRAINING_REPLICA_INFO,
    TRAINING_REPLICA_MEMORY_BYTES,
    TRAINING_REPLICAS,
    TRAINING_SCALING_EFFICIENCY_RATIO,
    TRAINING_SCALING_SPEEDUP,
    TRAINING_STEP_DURATION_SECONDS,
    TRAINING_STEPS_TOTAL,
)
from mirrorwatch.contract.pcie import PCIE_LANE_BYTES_PER_SECOND


@dataclass(frozen=True)
class Select:
    """Builds series selectors that all carry the same label matchers."""

    matchers: tuple[str, ...] = ()

    def __call__(self, metric: str, *more: str) -> str:
        parts = (*self.matchers, *more)
        return f"{metric}{{{', '.join(parts)}}}" if parts else metric

    def where(self, *more: str) -> Select:
        return Select((*self.matchers, *more))


RULES = Select()

# A MIG parent's utilisation is no measure of its instances' work (NVML answers NotSupported
# there, and GPM on the parent mixes instances that may serve different jobs): the per-GPU
# recordings every balance rule reads leave MIG parents out.
NOT_MIG_PARENT = f"unless on ({UUID_KEY}) ({GPU_MIG_ENABLED} == 1)"

# --- recording rules (level:metric:operation) ---------------------------------------------------

GPU_UTIL = "instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m"
ACTIVE_REPLICA = "instance_run:mirrorwatch_training_replica_info:active"
RUN_GPU_UTIL = "run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m"
RUN_UTIL = "run:mirrorwatch_gpu_utilization_ratio:avg1m"
RUN_SPREAD = "run:mirrorwatch_gpu_utilization_ratio:spread1m"
RUN_GPU_DEVIATION = "run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m"
HOST_SPREAD = "instance:mirrorwatch_gpu_utilization_ratio:spread1m"
# The busy GPUs of a host that belong to no active run (busy_unassigned), recorded once: the
# host-level cause rules read them a dozen times an evaluation (docs/scale.md).
BUSY_UNASSIGNED = "instance_gpu:mirrorwatch_gpu_utilization_ratio:busy_unassigned"
THROTTLE = "instance_gpu:mirrorwatch_gpu_throttle_seconds:rate5m"
# Per GPU: the share of the last minute it was throttled for heat (GpuThermalThrottling).
THERMAL_MINUTE = "instance_gpu:mirrorwatch_gpu_thermal_throttle:ratio1m"
# The per-minute shares ride out a scrape gap this long, and are read each second of the minute:
# a share that moves smoothly (1/60 a second), not in steps of a scrape, so that Prometheus and
# vmalert, evaluating a moment apart, agree on it (tests/fleet/test_loopback.py). A recorded
# share averaged over the minute was tried for scale (docs/scale.md) and is not the same: the
# two stores hold different samples of a recorded series in the window while it fills or lags.
GAP_BRIDGED = "2m"
SHARE_STEP = "1s"
# Per GPU and link: its replay, recovery and CRC error counters added up, recorded at every
# evaluation (the scrape's resolution), so that GpuNvlinkErrors takes the 10-minute increase of
# one series per link rather than of one per link and error type (4 times as many samples).
# The four counters of a link are the driver's and reset together, with the driver: their sum
# is a counter too.
NVLINK_ERRORS = "instance_gpu_link:mirrorwatch_gpu_nvlink_errors_total:sum"
THROUGHPUT = "instance_run:mirrorwatch_training_examples_per_second:sum"
THROUGHPUT_BASELINE = "instance_run:mirrorwatch_training_examples_per_second:median1h"
GPU_SM_ACTIVITY = "instance_gpu:mirrorwatch_gpu_sm_activity_ratio:avg1m"
RUN_GPU_SM_ACTIVITY = "run_gpu:mirrorwatch_gpu_sm_activity_ratio:avg1m"
# Per run GPU: SM activity (GPM) where every GPU of the run has it, else utilisation; the
# `source` label says which (sm_activity, utilization). The run's spread is taken of this.
RUN_GPU_BALANCE = "run_gpu:mirrorwatch_gpu_balance_ratio:avg1m"

# A run across hosts (MultiWorkerMirroredStrategy): each worker reports its own share of the
# examples, so the run's throughput is their sum; its steps are every worker's (never summed).
RUN_THROUGHPUT = "run:mirrorwatch_training_examples_per_second:sum"
RUN_THROUGHPUT_BASELINE = "run:mirrorwatch_training_examples_per_second:median1h"
RUN_WORKERS = "run:mirrorwatch_training_active:count"

# --- clock-event (throttle) reasons ---------------------------------------------------------------


def reasons(names: Sequence[str]) -> str:
    """A matcher for one of these clock-event reasons."""
    if len(names) == 1:
        return f'reason="{names[0]}"'
    return f'reason=~"{"|".join(names)}"'


def throttled_share(violation: str, clock_reasons: Sequence[str]) -> str:
    """The share of the last 5 minutes each GPU was held back for one cause: from the driver's
    violation counter (``violation`` reason of THROTTLE), else from how long the matching
    clock-event reasons were active (GPUs without violation counters). `or on` the GPU: the
    counter, where there is one, wins over the clock events, which are a sample per scrape."""
    counter = RULES(THROTTLE, f'reason="{violation}"')
    clocks = RULES(GPU_CLOCKS_EVENT_ACTIVE, reasons(clock_reasons))
    return (
        f"max by ({GPU_KEY}) (\n  {counter}\n  or on ({GPU_KEY})\n  avg_over_time({clocks}[5m])\n)"
    )


def throttled_share_of_minute(violation: str, clock_reasons: Sequence[str]) -> str:
    """The share of the last minute each GPU was held back for one cause, by the same two
    sources as ``throttled_share``: the mean of their readings at every SHARE_STEP of it.

    The counter's irate() is the rate between its last two samples: across a scrape gap of up
    to GAP_BRIDGED it is the true rate over the gap, where increase() over a minute that starts
    in the gap extrapolates from its few samples and reads a fraction of the real share (and a
    minute without samples reads nothing at all, restarting the alert's `for`). The clock
    events carry their last reading across the same gap. Capped at 1: the driver's counter
    may step by a little more than the time between two scrapes. Rounded to 0.01 percentage
    points like the spreads, so that 5% of a minute meets a 0.05 threshold.
    """
    counter = RULES(GPU_THROTTLE_SECONDS_TOTAL, f'reason="{violation}"')
    clocks = RULES(GPU_CLOCKS_EVENT_ACTIVE, reasons(clock_reasons))
    per_minute = f"[1m:{SHARE_STEP}]"
    return (
        f"round(\n  clamp_max(\n    max by ({GPU_KEY}) (\n"
        f"      avg_over_time(irate({counter}[{GAP_BRIDGED}]){per_minute})\n"
        f"      or on ({GPU_KEY})\n"
        f"      avg_over_time(last_over_time({clocks}[{GAP_BRIDGED}]){per_minute})\n"
        "    ),\n    1\n  ),\n  0.0001\n)"
    )


# --- generic shapes -----------------------------------------------------------------------------


def rate(selector: str, window: str) -> str:
    return f"rate({selector}[{window}])"


def increase(selector: str, window: str) -> str:
    return f"increase({selector}[{window}])"


def spread(series: str, by: str) -> str:
    """Highest minus lowest of ``series`` per ``by`` group."""
    return f"max by ({by}) {_grouped(series)} - min by ({by}) {_grouped(series)}"


def labels_of_extreme(series: str, by: str, extreme: Literal["min", "max"]) -> str:
    """Added to a value with one series per ``by`` group, gives it the labels of the group's
    lowest (or highest) series of ``series``: the lagging GPU of an imbalance, the hottest of a
    temperature spread. The value itself is unchanged (0 times the series)."""
    return (
        f"+ on ({by}) group_right ()\n"
        "  (\n"
        "    0 * (\n"
        f"      {series}\n"
        f"      == on ({by}) group_left ()\n"
        f"      {extreme} by ({by}) {_grouped(series)}\n"
        "    )\n"
        "  )"
    )


def _grouped(expr: str) -> str:
    """``expr`` in parentheses, unless one pair already encloses all of it."""
    depth = 0
    for i, char in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and (i < len(expr) - 1 or char != ")"):
            return f"({expr})"
    return expr


# --- GPUs ---------------------------------------------------------------------------------------


def foreign_processes(s: Select) -> str:
    """Processes on each GPU of a run that are not the run's (count), by the exporter's match."""
    return f"max by ({GPU_KEY}, run) ({s(GPU_FOREIGN_PROCESSES)})"


def memory_used_ratio(s: Select) -> str:
    """Memory in use as a share of the GPU's total, by the driver's count."""
    return f"{s(GPU_MEMORY_USED_BYTES)} / {s(GPU_MEMORY_TOTAL_BYTES)}"


def throttle_fraction(s: Select, window: str) -> str:
    """Seconds throttled per second: the share of time each reason held the clocks back."""
    return rate(s(GPU_THROTTLE_SECONDS_TOTAL), window)


def throttle_share_of_window(s: Select, window: str, window_seconds: int) -> str:
    """Seconds throttled per second of the last ``window``: ``throttle_fraction`` for a rule,
    written to mean the same in PromQL and in VictoriaMetrics' MetricsQL (vmalert).

    PromQL's rate() is its increase() over the window divided by the window's length; MetricsQL's
    divides by the time its samples span, without extrapolation
    (https://docs.victoriametrics.com/metricsql/#rate). For a series younger than the window
    (a new exporter, a GPU back on the bus) or after a scrape gap they differ several times over
    (tests/fleet/test_loopback.py shows it). Both stores' increase() counts the same rise, so
    increase / window gives one answer in both, and in Prometheus exactly its rate().
    """
    return f"{increase(s(GPU_THROTTLE_SECONDS_TOTAL), window)} / {window_seconds}"


def energy_kwh_per_hour(s: Select, window: str) -> str:
    # J/s over an hour, in kWh (3.6e6 J).
    return rate(s(GPU_ENERGY_JOULES_TOTAL), window) + " * 3600 / 3.6e6"


# Each PCIe link quantity as it runs now and at the most it supports; each direction's bytes.
PCIE_LINK = {
    "width": (GPU_PCIE_LINK_WIDTH, GPU_PCIE_LINK_WIDTH_MAX),
    "generation": (GPU_PCIE_LINK_GENERATION, GPU_PCIE_LINK_GENERATION_MAX),
}
PCIE_BYTES = {"transmit": GPU_PCIE_TRANSMIT_BYTES_TOTAL, "receive": GPU_PCIE_RECEIVE_BYTES_TOTAL}
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
    return f"sum by (instance, gpu) ({traffic})"


def nvlink_errors_per_10m(s: Select, window: str) -> str:
    """Replay, recovery and CRC errors of each link, as errors per 10 minutes at the current rate
    (the unit of the GpuNvlinkErrors threshold)."""
    errors = rate(s(GPU_NVLINK_ERRORS_TOTAL), window)
    return f"sum by (instance, gpu, link) ({errors}) * 600"


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
        f"sum by (instance, gpu, xid) ({increase(counter, window)} > 0 "
        f"or 0 * (time() - {last_event} < {window_seconds}) + 1)"
    )


def slowdown_headroom(s: Select) -> str:
    """Degrees from each GPU's temperature up to its slowdown threshold."""
    threshold = s(GPU_TEMPERATURE_THRESHOLD_CELSIUS, 'threshold="slowdown"')
    return f"{threshold} - on ({GPU_KEY}) {s(GPU_TEMPERATURE_CELSIUS)}"


def busy_gpus(busy: float) -> str:
    """Each GPU's 1-minute mean utilisation where it is at least ``busy``."""
    return f"{GPU_UTIL} >= {num(busy)}"


def busy_unassigned(busy: float) -> str:
    """Busy GPUs that belong to no active run: the host-level balance looks at these."""
    return f"({busy_gpus(busy)} unless on ({UUID_KEY}) {ACTIVE_REPLICA})"


def busy_temperature(busy: float) -> str:
    """The temperature of each busy GPU."""
    return f"({GPU_TEMPERATURE_CELSIUS} and on ({UUID_KEY}) {busy_gpus(busy)})"


# --- training runs ------------------------------------------------------------------------------


def run_gpus(s: Select) -> str:
    """The UUID_KEY of the GPUs the selected runs report, to filter GPU series."""
    return f"max by ({UUID_KEY}) ({s(TRAINING_REPLICA_INFO)})"


def of_run(expr: str, runs: Select) -> str:
    """The GPU series of ``expr`` that belong to the runs ``runs`` selects."""
    return f"({expr}) and on ({UUID_KEY}) {run_gpus(runs)}"


def replica_memory() -> str:
    """The memory each active replica's allocator holds now, with its GPU's labels."""
    return (
        f'{TRAINING_REPLICA_MEMORY_BYTES}{{kind="current"}}'
        f" * on ({WORKER_KEY}, replica) group_left (gpu, uuid) {ACTIVE_REPLICA}"
    )


def training_runs(s: Select) -> str:
    """Each run's worker, with its model and strategy, valued 1 while active."""
    return f"{s(TRAINING_INFO)} * on ({WORKER_KEY}) group_left () {s(TRAINING_ACTIVE)}"


def examples_per_second(s: Select) -> str:
    """Examples per second of each run, summed over its workers, as the callback reports it."""
    return f"sum by (run) ({s(TRAINING_EXAMPLES_PER_SECOND)})"


def examples_per_second_from_counter(s: Select, window: str) -> str:
    return f"sum by (run) ({rate(s(TRAINING_EXAMPLES_TOTAL), window)})"


def steps_per_second(s: Select, window: str) -> str:
    return f"sum by (run, worker) ({rate(s(TRAINING_STEPS_TOTAL), window)})"


def step_time_quantile(s: Select, quantile: float, window: str) -> str:
    buckets = rate(s(TRAINING_STEP_DURATION_SECONDS.part("bucket")), window)
    return f"histogram_quantile({quantile}, sum by (run, le) ({buckets}))"


def communication_share(s: Select, window: str) -> str:
    """Share of each worker's step time its gradient all-reduces were in flight, 0..1, where
    the worker measures them (the torch monitor on a DDP model: a series only where there is
    one, so a run without it gets no value rather than a 0)."""
    allreduce = rate(s(TRAINING_ALLREDUCE_SECONDS.part("sum")), window)
    steps = rate(s(TRAINING_STEP_DURATION_SECONDS.part("sum")), window)
    return f"clamp_max(sum by ({WORKER_KEY}) ({allreduce}) / sum by ({WORKER_KEY}) ({steps}), 1)"


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


def seconds_since_last_push(s: Select) -> str:
    last_push = s(TRAINING_LAST_PUSH_TIMESTAMP_SECONDS)
    return f"time() - max by (run, worker) ({last_push})"


def replicas(s: Select) -> str:
    return f"max by (run, worker) ({s(TRAINING_REPLICAS)})"


def run_mean_utilization(run_gpu: Select) -> str:
    """The mean of the run's per-GPU 1-minute utilisation (GpuUtilizationImbalance's input)."""
    return f"avg by (run) ({run_gpu(RUN_GPU_UTIL)})"


def run_utilization_spread(run_gpu: Select) -> str:
    return spread(run_gpu(RUN_GPU_UTIL), "run")


# --- alerts -------------------------------------------------------------------------------------


def firing_alerts(s: Select, *more: str) -> str:
    return s("ALERTS", 'alertstate="firing"', *more)


def run_alerts(host: Select, run_matcher: str) -> str:
    """Alerts that name the selected run, and alerts on the GPUs the run reports."""
    own = firing_alerts(host, run_matcher)
    gpus = run_gpus(host.where(run_matcher))
    return f"{own} or ({firing_alerts(host)} and on ({UUID_KEY}) {gpus})"


# --- the run report: one range [end - window, end], asked at its end ----------------------------
# Each function gives an instant query that, evaluated at the range's end, holds one figure of
# the whole range; the run report shows it beside the number so that anyone can ask again.


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


def gpu_utilization_mean(s: Select, window: str) -> str:
    """Each GPU's mean utilisation over ``window`` (the GPU_UTIL rule's expression at 1m)."""
    return f"avg_over_time({s(GPU_UTILIZATION_RATIO)}[{window}])"


def gpu_utilization_spread(s: Select, window: str) -> str:
    """Highest minus lowest ``window``-mean utilisation of the selected GPUs of each host,
    rounded like the spread rules."""
    return f"round({spread(gpu_utilization_mean(s, window), 'instance')}, 0.0001)"


def gpu_utilization_deviation(s: Select, window: str) -> str:
    """Each GPU's ``window``-mean utilisation minus the mean over the selected GPUs."""
    mean = gpu_utilization_mean(s, window)
    return f"{mean} - on (instance) group_left () avg by (instance) ({mean})"


def clock_events(s: Select, clock_reasons: Sequence[str]) -> str:
    """1 for each GPU and clock-event reason of ``clock_reasons`` while it is active."""
    return f"{s(GPU_CLOCKS_EVENT_ACTIVE, reasons(clock_reasons))} == 1"


def throttled_now(s: Select, violation: str, clock_reasons: Sequence[str]) -> str:
    """The GPUs held back for one cause at each moment: one of its clock-event reasons active,
    or its violation counter grown since the scrape before."""
    counter = s(GPU_THROTTLE_SECONDS_TOTAL, f'reason="{violation}"')
    return (
        f"max by ({GPU_KEY}) (\n  {clock_events(s, clock_reasons)}\n  or\n"
        f"  irate({counter}[1m]) > 0\n)"
    )


def held(cause: Cause, s: Select) -> str:
    """Each GPU held back for ``cause`` at each moment (a cause with clock reasons): the one
    condition the live cause and cost rules and the run report read."""
    if cause.violation is None:
        return f"max by ({GPU_KEY}) ({clock_events(s, cause.clock_reasons)})"
    return throttled_now(s, cause.violation, cause.clock_reasons)


def throttled_seconds(s: Select, violation: str, window: str) -> str:
    """Seconds the driver counted a GPU held back for one cause over ``window``."""
    counter = s(GPU_THROTTLE_SECONDS_TOTAL, f'reason="{violation}"')
    return f"sum by ({GPU_KEY}) ({increase(counter, window)})"


def near_slowdown(s: Select, margin_celsius: float) -> str:
    """Each GPU whose temperature is within ``margin_celsius`` of its slowdown threshold."""
    return f"{slowdown_headroom(s)} <= {num(margin_celsius)}"


def pcie_link_degraded(s: Select, busy: float) -> str:
    """Each busy GPU whose PCIe link runs below its widest or fastest."""
    width = f"{s(GPU_PCIE_LINK_WIDTH)} < {s(GPU_PCIE_LINK_WIDTH_MAX)}"
    generation = f"{s(GPU_PCIE_LINK_GENERATION)} < {s(GPU_PCIE_LINK_GENERATION_MAX)}"
    return (
        f"(({width}) or ({generation}))\n"
        f"and on (instance, uuid) {gpu_utilization_mean(s, '1m')} >= {num(busy)}"
    )


def p2p_links(s: Select, window: str) -> str:
    """How each selected GPU reaches each peer, as the exporter saw it during ``window``."""
    return (
        f"max by (instance, gpu, peer_gpu, link) (max_over_time({s(GPU_P2P_LINK_INFO)}[{window}]))"
    )


def nvlink_down(s: Select) -> str:
    return f"{s(GPU_NVLINK_UP)} == 0"


def gpu_lost(s: Select) -> str:
    return f"{s(GPU_UP)} == 0"


def ecc_uncorrected(s: Select, window: str) -> str:
    """Uncorrectable ECC errors counted during ``window``, where there were any."""
    counter = s(GPU_ECC_ERRORS_TOTAL, 'type="uncorrected"')
    return f"sum by (instance, gpu) ({increase(counter, window)}) > 0"


def all_gpus_below(s: Select, window: str, ratio: float) -> str:
    """Each host at moments when even its busiest selected GPU is below ``ratio`` busy."""
    return f"max by (instance) ({gpu_utilization_mean(s, window)}) < {num(ratio)}"


def training_steps(s: Select, window: str) -> str:
    """The run's steps so far (the counters are running totals since the run started). Every
    worker of a multi-worker run counts the same synchronous steps: the most, not the sum."""
    return f"max by (run) (max_over_time({s(TRAINING_STEPS_TOTAL)}[{window}]))"


def scaling(s: Select, metric: Literal["speedup", "efficiency_ratio"], window: str) -> str:
    """The run's mean speed-up or scaling efficiency over ``window``, as the trainer reports."""
    series = {
        "speedup": TRAINING_SCALING_SPEEDUP,
        "efficiency_ratio": TRAINING_SCALING_EFFICIENCY_RATIO,
    }
    return f"avg by (run) (avg_over_time({s(series[metric])}[{window}]))"


def push_silence(s: Select) -> str:
    """Seconds since each worker's last push, at each moment."""
    return seconds_since_last_push(s)


# --- the run report's costs (report/cost.py, docs/report.md "What each cause cost") -------------


def held_sum(
    expr: str, condition: str, window: str, step: str, steps: int, key: str = GPU_KEY
) -> str:
    """``expr`` summed over the range's sampling points at which ``condition`` held (matched
    on ``key``), divided by the points: its mean over the range, 0 where it did not hold."""
    return f"sum_over_time((({expr}) and on ({key}) ({condition}))[{window}:{step}]) / {steps}"


def sm_clock_ratio(s: Select) -> str:
    """Each GPU's SM clock as a share of its maximum."""
    clock, top = (s(metric, 'clock="sm"') for metric in (GPU_CLOCK_HERTZ, GPU_CLOCK_MAX_HERTZ))
    return f"{clock} / on ({GPU_KEY}) {top}"


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


def pcie_busy_share(s: Select, direction: Literal["transmit", "receive"], window: str) -> str:
    """The share of each second each GPU's link spent carrying its ``direction`` traffic, from
    its last two samples in ``window``: rate() over a window longer than the series is old
    (a run that began with its exporter) would understate it."""
    traffic = f"irate({s(PCIE_BYTES[direction])}[{window}])"
    return f"{traffic} / on ({GPU_KEY}) ({pcie_link_bytes_per_second(s)})"
