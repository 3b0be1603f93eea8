"""The GPU host's XID errors panel, evaluated by promtool over a timeline with a scrape gap.

Prometheus's own evaluator (`promtool test rules`, promql_expr_test) runs the committed
panel query, its Grafana variables expanded as Grafana would for a 15 s scrape interval
($__rate_interval 1m), over an XID that happens, a five-minute scrape gap with no new event,
a second event, and an exporter restart that brings an XID back. The panel must draw exactly
the events, and nothing after the gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.alerts.tools import promtool_expr_test
from tests.dashboards.queries import expand, load_dashboards, panels

STEP_SECONDS = 15
END_SECONDS = 16 * 60
GRAFANA_VALUES = {
    "__rate_interval": "1m",
    "__rate_interval_ms": "60000",
    "job": ".+",
    "host": ".*",
    "instance": ".+",
    "gpu": ".+",
}
GPU = 'job="mirrorwatch",instance="h1:9848",gpu="0",uuid="GPU-0"'


def samples(at: dict[tuple[int, int], str]) -> str:
    """promtool input values every STEP_SECONDS: ``at[(start, end)]`` over [start, end),
    `_` (no sample) elsewhere."""
    values = []
    for t in range(0, END_SECONDS + 1, STEP_SECONDS):
        values.append(next((v for (a, b), v in at.items() if a <= t < b), "_"))
    return " ".join(values)


def timeline() -> list[dict[str, str]]:
    """XID 43 at 1m55s; Prometheus cannot scrape from 5m to 10m (staleness marker at 5m);
    XID 43 again at 13m55s. XID 79: five events before the gap, then the exporter restarts
    during it and XID 79 comes back once, at 9m58s (the new process counts from 1)."""
    xid43 = {
        "counter": {(120, 300): "1", (300, 301): "stale", (600, 840): "1", (840, 10**6): "2"},
        "last": {(120, 300): "115", (300, 301): "stale", (600, 840): "115", (840, 10**6): "835"},
    }
    xid79 = {
        "counter": {(60, 300): "5", (300, 301): "stale", (600, 10**6): "1"},
        "last": {(60, 300): "50", (300, 301): "stale", (600, 10**6): "598"},
    }
    found = []
    for xid, parts in (("43", xid43), ("79", xid79)):
        labels = f'{GPU},xid="{xid}"'
        found.append(
            {
                "series": f"mirrorwatch_gpu_xid_errors_total{{{labels}}}",
                "values": samples(parts["counter"]),
            }
        )
        found.append(
            {
                "series": f"mirrorwatch_gpu_xid_last_event_timestamp_seconds{{{labels}}}",
                "values": samples(parts["last"]),
            }
        )
    return found


def panel_query() -> str:
    host = next(d for d in load_dashboards().values() if d["title"] == "GPU host")
    (panel,) = (p for p in panels(host) if p["title"] == "XID errors")
    (target,) = panel["targets"]
    return expand(target["expr"], GRAFANA_VALUES)


def one_bar(xid: str) -> list[dict[str, Any]]:
    # One bar per GPU by the target key (job, instance, gpu, uuid here) and XID.
    return [{"labels": f'{{{GPU},xid="{xid}"}}', "value": 1}]


# eval time -> what the panel must show then
EXPECTED: dict[str, list[dict[str, Any]]] = {
    "50s": [],
    "1m45s": one_bar("79"),  # XID 79's series is born at 1m, five events in: one bar
    "2m15s": one_bar("43"),  # the first XID 43: increase() cannot see it, its timestamp can
    "4m": [],
    "10m15s": one_bar("79"),  # XID 79 again, after the exporter restart
    "11m": [],  # XID 43's series is back after the gap with no new event: nothing
    "12m": [],
    "14m15s": one_bar("43"),  # the second XID 43, a rise increase() sees
    "15m30s": [],
}


def promtool_test(tmp_path: Path, expr: str, cases: dict[str, list[dict[str, Any]]]) -> str:
    return promtool_expr_test(
        tmp_path / "xid-panel.yml",
        f"{STEP_SECONDS}s",
        timeline(),
        [
            {"expr": expr, "eval_time": at, "exp_samples": expected}
            for at, expected in cases.items()
        ],
    )


def test_the_panel_draws_each_event_and_nothing_after_a_scrape_gap(tmp_path: Path) -> None:
    failures = promtool_test(tmp_path, panel_query(), EXPECTED)
    assert not failures, failures


@pytest.mark.parametrize("at", ["11m", "12m"])
def test_the_timeline_catches_the_unless_offset_query(tmp_path: Path, at: str) -> None:
    """The query the panel had before: after the gap, `x offset 1m` finds no sample and the
    whole count of XID 43 is drawn again as a new event. This timeline must show that."""
    xid = 'mirrorwatch_gpu_xid_errors_total{job=~".+", instance=~".+", gpu=~".+"}'
    old = f"sum by (instance, gpu, xid) (increase({xid}[1m]) or ({xid} unless {xid} offset 1m))"
    assert promtool_test(tmp_path, old, {at: []}), "the old query drew no false bar"
