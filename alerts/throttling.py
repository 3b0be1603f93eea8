"""Held back for a cause: the clock-event reasons and the driver's throttle counters, as the
rules, the dashboards and the run report read them."""

from __future__ import annotations

from collections.abc import Sequence

from mirrorwatch.alerts.promql import RULES, Select, increase, rate
from mirrorwatch.alerts.recorded import THROTTLE
from mirrorwatch.contract.causes import Cause
from mirrorwatch.contract.labels import GPU_KEY
from mirrorwatch.contract.metrics import (
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_THROTTLE_SECONDS_TOTAL,
)

# The per-minute shares ride out a scrape gap this long, and are read each second of the minute:
# a share that moves smoothly (1/60 a second), not in steps of a scrape, so that Prometheus and
# vmalert, evaluating a moment apart, agree on it (tests/fleet/test_loopback.py). A recorded
# share averaged over the minute was tried for scale (docs/scale.md) and is not the same: the
# two stores hold different samples of a recorded series in the window while it fills or lags.
GAP_BRIDGED = "2m"
SHARE_STEP = "1s"


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
