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

# Every grouping keeps `cluster` and `host`: the external labels a per-host agent (vmagent,
# Prometheus agent mode) adds before it remote-writes to a central store (deploy/fleet/,
# docs/fleet.md). There every host's exporter may be `localhost:9848`, so `job, instance`
# alone would merge hosts. On one Prometheus the two labels are absent and change nothing,
# as kubernetes-mixin's `clusterLabel` groupings do.
# Every alert-text lookup uses the same keys (mirrorwatch.alerts.templates), so it can never
# find another host's series; rules and templates name them as «fragments», never literally.
TARGET_LABELS = ("cluster", "host", "job", "instance")


def key_labels(*labels: str) -> tuple[str, ...]:
    """A grouping key as a list of names (Alertmanager's `equal`): the target's, then ``labels``."""
    return (*TARGET_LABELS, *labels)


def key(*labels: str) -> str:
    """A grouping key as PromQL writes it: the target's labels, then ``labels``."""
    return ", ".join(key_labels(*labels))


TARGET_KEY = key()
GPU_KEY = key("gpu", "uuid")
# A GPU as the training series name it: their `gpu` is the trainer's index, not NVML's.
UUID_KEY = key("uuid")
WORKER_KEY = key("run", "worker")
RUN_KEY = key("run")
# The key sets as rule text names them.
KEY_FRAGMENTS = {
    "TARGET_KEY": TARGET_KEY,
    "GPU_KEY": GPU_KEY,
    "UUID_KEY": UUID_KEY,
    "WORKER_KEY": WORKER_KEY,
    "RUN_KEY": RUN_KEY,
}

# A MIG parent's utilisation is no measure of its instances' work (NVML answers NotSupported
# there, and GPM on the parent mixes instances that may serve different jobs): the per-GPU
# recordings every balance rule reads leave MIG parents out.
NOT_MIG_PARENT = f"unless on ({UUID_KEY}) (mirrorwatch_gpu_mig_enabled == 1)"

# --- recording rules (level:metric:operation) ---------------------------------------------------

GPU_UTIL = "instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m"
ACTIVE_REPLICA = "instance_run:mirrorwatch_training_replica_info:active"
RUN_GPU_UTIL = "run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m"
RUN_UTIL = "run:mirrorwatch_gpu_utilization_ratio:avg1m"
RUN_SPREAD = "run:mirrorwatch_gpu_utilization_ratio:spread1m"
RUN_GPU_DEVIATION = "run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m"
HOST_SPREAD = "instance:mirrorwatch_gpu_utilization_ratio:spread1m"
THROTTLE = "instance_gpu:mirrorwatch_gpu_throttle_seconds:rate5m"
# Per GPU: the share of the last minute it was throttled for heat (GpuThermalThrottling), the
# mean of THERMAL_NOW's evaluations in it.
THERMAL_MINUTE = "instance_gpu:mirrorwatch_gpu_thermal_throttle:ratio1m"
# Per GPU, at each evaluation: the share of time it has been throttled for heat since the
# scrape before, riding out a scrape gap this long (queries.throttled_share_now).
THERMAL_NOW = "instance_gpu:mirrorwatch_gpu_thermal_throttle:ratio"
GAP_BRIDGED = "2m"
# The minute THERMAL_MINUTE averages over: 59 s, so that it holds the same four evaluations of
# THERMAL_NOW at a 15 s interval in Prometheus 2 (whose ranges include their start) as in
# VictoriaMetrics (whose ranges do not).
SHARE_WINDOW = "59s"
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

# --- exporter series the rules read by name -------------------------------------------------------

FOREIGN_COUNT = "mirrorwatch_gpu_foreign_processes"
FOREIGN_MEMORY = "mirrorwatch_gpu_foreign_processes_memory_used_bytes"
# A run across hosts (MultiWorkerMirroredStrategy): each worker reports its own share of the
# examples, so the run's throughput is their sum; its steps are every worker's (never summed).
RUN_THROUGHPUT = "run:mirrorwatch_training_examples_per_second:sum"
RUN_THROUGHPUT_BASELINE = "run:mirrorwatch_training_examples_per_second:median1h"
RUN_WORKERS = "run:mirrorwatch_training_active:count"

# --- clock-event (throttle) reasons ---------------------------------------------------------------

THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")
POWER_CAP_REASONS = ("sw_power_cap",)
HARDWARE_SLOWDOWN_REASONS = ("hw_slowdown", "hw_power_brake_slowdown")
# The reasons that cost speed; gpu_idle and the display/application settings do not.
SLOWDOWN_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


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
    clocks = RULES("mirrorwatch_gpu_clocks_event_active", reasons(clock_reasons))
    return (
        f"max by ({GPU_KEY}) (\n  {counter}\n  or on ({GPU_KEY})\n  avg_over_time({clocks}[5m])\n)"
    )


def throttled_share_now(violation: str, clock_reasons: Sequence[str]) -> str:
    """The share of time each GPU has been held back for one cause since the scrape before, by
    the same two sources as ``throttled_share``: recorded at every evaluation (THERMAL_NOW), so
    that the share of a minute is the mean of the recorded series over it, at the scrape's
    resolution, rather than a subquery evaluating this at every second of the minute (61
    evaluations per GPU per rule evaluation; docs/scale.md).

    The counter's irate() is the rate between its last two samples: across a scrape gap of up
    to GAP_BRIDGED it is the true rate over the gap, where increase() over a minute that starts
    in the gap extrapolates from its few samples and reads a fraction of the real share (and a
    minute without samples reads nothing at all, restarting the alert's `for`). The clock
    events carry their last reading across the same gap, on a GPU without the counter only: a
    counter with one sample yet (no rate) gives no share at all rather than the clock events'
    one, so that the minute's mean is the counter's alone, as where the counter has a rate.
    Capped at 1: the driver's counter may step by a little more than the time between two
    scrapes.
    """
    counter = RULES("mirrorwatch_gpu_throttle_seconds_total", f'reason="{violation}"')
    clocks = RULES("mirrorwatch_gpu_clocks_event_active", reasons(clock_reasons))
    return (
        f"clamp_max(\n  max by ({GPU_KEY}) (\n"
        f"    irate({counter}[{GAP_BRIDGED}])\n"
        f"    or on ({GPU_KEY})\n"
        f"    (\n      last_over_time({clocks}[{GAP_BRIDGED}])\n"
        f"      unless on ({GPU_KEY}) last_over_time({counter}[{GAP_BRIDGED}])\n    )\n"
        "  ),\n  1\n)"
    )


def throttled_share_of_minute(now: str) -> str:
    """The share of the last minute each GPU was held back, from the recorded share ``now``
    (``throttled_share_now``): rounded to 0.01 percentage points like the spreads, so that 5%
    of a minute meets a 0.05 threshold."""
    return f"round(avg_over_time({now}[{SHARE_WINDOW}]), 0.0001)"


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
    return f"max by ({GPU_KEY}, run) ({s(FOREIGN_COUNT)})"


def memory_used_ratio(s: Select) -> str:
    """Memory in use as a share of the GPU's total, by the driver's count."""
    return f"{s('mirrorwatch_gpu_memory_used_bytes')} / {s('mirrorwatch_gpu_memory_total_bytes')}"


def throttle_fraction(s: Select, window: str) -> str:
    """Seconds throttled per second: the share of time each reason held the clocks back."""
    return rate(s("mirrorwatch_gpu_throttle_seconds_total"), window)


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
    return f"{increase(s('mirrorwatch_gpu_throttle_seconds_total'), window)} / {window_seconds}"


def energy_kwh_per_hour(s: Select, window: str) -> str:
    # J/s over an hour, in kWh (3.6e6 J).
    return rate(s("mirrorwatch_gpu_energy_joules_total"), window) + " * 3600 / 3.6e6"


def pcie_link_ratio(s: Select, quantity: Literal["width", "generation"]) -> str:
    """The PCIe link's width or generation as a share of the most the GPU supports."""
    metric = f"mirrorwatch_gpu_pcie_link_{quantity}"
    return f"{s(metric)} / {s(metric + '_max')}"


def nvlink_bytes_per_second(
    s: Select, direction: Literal["transmit", "receive"], window: str
) -> str:
    """Payload bytes per second over all NVLink links of each GPU."""
    traffic = rate(s(f"mirrorwatch_gpu_nvlink_{direction}_bytes_total"), window)
    return f"sum by (instance, gpu) ({traffic})"


def nvlink_errors_per_10m(s: Select, window: str) -> str:
    """Replay, recovery and CRC errors of each link, as errors per 10 minutes at the current rate
    (the unit of the GpuNvlinkErrors threshold)."""
    errors = rate(s("mirrorwatch_gpu_nvlink_errors_total"), window)
    return f"sum by (instance, gpu, link) ({errors}) * 600"


def xid_events(s: Select, window: str, window_seconds: str) -> str:
    """XID events per window, by GPU and XID, unharmed by scrape gaps.

    increase() counts the rises it sees, across counter resets and gaps alike. What it cannot
    see, the first event of a new XID series (the exporter creates it at that event) or one
    just before the window's first sample, the exporter's last-event timestamp shows: such an
    event counts once. Never `x unless x offset w`: after every scrape gap the offset finds no
    sample and the whole count is drawn again as new events.
    """
    counter = s("mirrorwatch_gpu_xid_errors_total")
    last_event = s("mirrorwatch_gpu_xid_last_event_timestamp_seconds")
    return (
        f"sum by (instance, gpu, xid) ({increase(counter, window)} > 0 "
        f"or 0 * (time() - {last_event} < {window_seconds}) + 1)"
    )


def slowdown_headroom(s: Select) -> str:
    """Degrees from each GPU's temperature up to its slowdown threshold."""
    threshold = s("mirrorwatch_gpu_temperature_threshold_celsius", 'threshold="slowdown"')
    return f"{threshold} - on ({GPU_KEY}) {s('mirrorwatch_gpu_temperature_celsius')}"


def busy_gpus(busy: float) -> str:
    """Each GPU's 1-minute mean utilisation where it is at least ``busy``."""
    return f"{GPU_UTIL} >= {num(busy)}"


def busy_unassigned(busy: float) -> str:
    """Busy GPUs that belong to no active run: the host-level balance looks at these."""
    return f"({busy_gpus(busy)} unless on ({UUID_KEY}) {ACTIVE_REPLICA})"


def busy_temperature(busy: float) -> str:
    """The temperature of each busy GPU."""
    return f"(mirrorwatch_gpu_temperature_celsius and on ({UUID_KEY}) {busy_gpus(busy)})"


# --- training runs ------------------------------------------------------------------------------


def run_gpus(s: Select) -> str:
    """The UUID_KEY of the GPUs the selected runs report, to filter GPU series."""
    return f"max by ({UUID_KEY}) ({s('mirrorwatch_training_replica_info')})"


def of_run(expr: str, runs: Select) -> str:
    """The GPU series of ``expr`` that belong to the runs ``runs`` selects."""
    return f"({expr}) and on ({UUID_KEY}) {run_gpus(runs)}"


def replica_memory() -> str:
    """The memory each active replica's allocator holds now, with its GPU's labels."""
    return (
        'mirrorwatch_training_replica_memory_bytes{kind="current"}'
        f" * on ({WORKER_KEY}, replica) group_left (gpu, uuid) {ACTIVE_REPLICA}"
    )


def training_runs(s: Select) -> str:
    """Each run's worker, with its model and strategy, valued 1 while active."""
    return (
        f"{s('mirrorwatch_training_info')} * on ({WORKER_KEY}) group_left () "
        f"{s('mirrorwatch_training_active')}"
    )


def examples_per_second(s: Select) -> str:
    """Examples per second of each run, summed over its workers, as the callback reports it."""
    return f"sum by (run) ({s('mirrorwatch_training_examples_per_second')})"


def examples_per_second_from_counter(s: Select, window: str) -> str:
    return f"sum by (run) ({rate(s('mirrorwatch_training_examples_total'), window)})"


def steps_per_second(s: Select, window: str) -> str:
    return f"sum by (run, worker) ({rate(s('mirrorwatch_training_steps_total'), window)})"


def step_time_quantile(s: Select, quantile: float, window: str) -> str:
    buckets = rate(s("mirrorwatch_training_step_duration_seconds_bucket"), window)
    return f"histogram_quantile({quantile}, sum by (run, le) ({buckets}))"


def communication_share(s: Select, window: str) -> str:
    """Share of each worker's step time its gradient all-reduces were in flight, 0..1, where
    the worker measures them (the torch monitor on a DDP model: a series only where there is
    one, so a run without it gets no value rather than a 0)."""
    allreduce = rate(s("mirrorwatch_training_allreduce_seconds_sum"), window)
    steps = rate(s("mirrorwatch_training_step_duration_seconds_sum"), window)
    return f"clamp_max(sum by ({WORKER_KEY}) ({allreduce}) / sum by ({WORKER_KEY}) ({steps}), 1)"


def communication_share_now(s: Select, window: str) -> str:
    """``communication_share`` from each worker's last two samples in ``window`` (as irate()),
    so a range's points follow a change at once; over the whole window where those two saw
    no step (a scrape between the same two pushes)."""
    allreduce = f"irate({s('mirrorwatch_training_allreduce_seconds_sum')}[{window}])"
    steps = f"irate({s('mirrorwatch_training_step_duration_seconds_sum')}[{window}])"
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
    replicas = s("mirrorwatch_training_replica_info")
    return f"max by ({UUID_KEY}) ({replicas} * on ({RUN_KEY}) group_left () {least})"


def seconds_since_last_push(s: Select) -> str:
    last_push = s("mirrorwatch_training_last_push_timestamp_seconds")
    return f"time() - max by (run, worker) ({last_push})"


def replicas(s: Select) -> str:
    return f"max by (run, worker) ({s('mirrorwatch_training_replicas')})"


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
    return f"avg_over_time({s('mirrorwatch_gpu_utilization_ratio')}[{window}])"


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
    return f"{s('mirrorwatch_gpu_clocks_event_active', reasons(clock_reasons))} == 1"


def throttled_now(s: Select, violation: str, clock_reasons: Sequence[str]) -> str:
    """The GPUs held back for one cause at each moment: one of its clock-event reasons active,
    or its violation counter grown since the scrape before."""
    counter = s("mirrorwatch_gpu_throttle_seconds_total", f'reason="{violation}"')
    return (
        f"max by ({GPU_KEY}) (\n  {clock_events(s, clock_reasons)}\n  or\n"
        f"  irate({counter}[1m]) > 0\n)"
    )


def throttled_seconds(s: Select, violation: str, window: str) -> str:
    """Seconds the driver counted a GPU held back for one cause over ``window``."""
    counter = s("mirrorwatch_gpu_throttle_seconds_total", f'reason="{violation}"')
    return f"sum by ({GPU_KEY}) ({increase(counter, window)})"


def near_slowdown(s: Select, margin_celsius: float) -> str:
    """Each GPU whose temperature is within ``margin_celsius`` of its slowdown threshold."""
    return f"{slowdown_headroom(s)} <= {num(margin_celsius)}"


def pcie_link_degraded(s: Select, busy: float) -> str:
    """Each busy GPU whose PCIe link runs below its widest or fastest."""
    width = f"{s('mirrorwatch_gpu_pcie_link_width')} < {s('mirrorwatch_gpu_pcie_link_width_max')}"
    generation = (
        f"{s('mirrorwatch_gpu_pcie_link_generation')}"
        f" < {s('mirrorwatch_gpu_pcie_link_generation_max')}"
    )
    return (
        f"(({width}) or ({generation}))\n"
        f"and on (instance, uuid) {gpu_utilization_mean(s, '1m')} >= {num(busy)}"
    )


def p2p_links(s: Select, window: str) -> str:
    """How each selected GPU reaches each peer, as the exporter saw it during ``window``."""
    return (
        "max by (instance, gpu, peer_gpu, link) "
        f"(max_over_time({s('mirrorwatch_gpu_p2p_link_info')}[{window}]))"
    )


def nvlink_down(s: Select) -> str:
    return f"{s('mirrorwatch_gpu_nvlink_up')} == 0"


def gpu_lost(s: Select) -> str:
    return f"{s('mirrorwatch_gpu_up')} == 0"


def ecc_uncorrected(s: Select, window: str) -> str:
    """Uncorrectable ECC errors counted during ``window``, where there were any."""
    counter = s("mirrorwatch_gpu_ecc_errors_total", 'type="uncorrected"')
    return f"sum by (instance, gpu) ({increase(counter, window)}) > 0"


def all_gpus_below(s: Select, window: str, ratio: float) -> str:
    """Each host at moments when even its busiest selected GPU is below ``ratio`` busy."""
    return f"max by (instance) ({gpu_utilization_mean(s, window)}) < {num(ratio)}"


def training_steps(s: Select, window: str) -> str:
    """The run's steps so far (the counters are running totals since the run started). Every
    worker of a multi-worker run counts the same synchronous steps: the most, not the sum."""
    return f"max by (run) (max_over_time({s('mirrorwatch_training_steps_total')}[{window}]))"


def scaling(s: Select, metric: Literal["speedup", "efficiency_ratio"], window: str) -> str:
    """The run's mean speed-up or scaling efficiency over ``window``, as the trainer reports."""
    return f"avg by (run) (avg_over_time({s(f'mirrorwatch_training_scaling_{metric}')}[{window}]))"


def push_silence(s: Select) -> str:
    """Seconds since each worker's last push, at each moment."""
    return seconds_since_last_push(s)


# --- the run report's costs (report/cost.py, docs/report.md "What each cause cost") -------------

# Payload bytes per second one PCIe lane carries in each direction, by generation: the line
# rate after encoding (8b/10b to gen 2, 128b/130b from gen 3, FLIT 242/256 at gen 6; PCI-SIG
# base specifications), before packet overhead.
PCIE_LANE_BYTES_PER_SECOND = {
    1: 2.5e8,
    2: 5.0e8,
    3: 8e9 * 128 / 130 / 8,
    4: 16e9 * 128 / 130 / 8,
    5: 32e9 * 128 / 130 / 8,
    6: 64e9 * 242 / 256 / 8,
}


def held_sum(
    expr: str, condition: str, window: str, step: str, steps: int, key: str = GPU_KEY
) -> str:
    """``expr`` summed over the range's sampling points at which ``condition`` held (matched
    on ``key``), divided by the points: its mean over the range, 0 where it did not hold."""
    return f"sum_over_time((({expr}) and on ({key}) ({condition}))[{window}:{step}]) / {steps}"


def sm_clock_ratio(s: Select) -> str:
    """Each GPU's SM clock as a share of its maximum."""
    clock, top = (
        s(metric, 'clock="sm"')
        for metric in ("mirrorwatch_gpu_clock_hertz", "mirrorwatch_gpu_clock_max_hertz")
    )
    return f"{clock} / on ({GPU_KEY}) {top}"


def pcie_link_bytes_per_second(s: Select, limit: Literal["", "_max"] = "") -> str:
    """What each GPU's PCIe link carries per direction at the generation and width it runs at
    now (``limit`` "_max": at the most it supports), in bytes per second."""
    generation = s(f"mirrorwatch_gpu_pcie_link_generation{limit}")
    lane = " or ".join(
        f"({generation} == {g}) * 0 + {num(rate)}" for g, rate in PCIE_LANE_BYTES_PER_SECOND.items()
    )
    return f"({lane}) * on ({GPU_KEY}) {s(f'mirrorwatch_gpu_pcie_link_width{limit}')}"


def pcie_busy_share(s: Select, direction: Literal["transmit", "receive"], window: str) -> str:
    """The share of each second each GPU's link spent carrying its ``direction`` traffic, from
    its last two samples in ``window``: rate() over a window longer than the series is old
    (a run that began with its exporter) would understate it."""
    traffic = f"irate({s(f'mirrorwatch_gpu_pcie_{direction}_bytes_total')}[{window}])"
    return f"{traffic} / on ({GPU_KEY}) ({pcie_link_bytes_per_second(s)})"
