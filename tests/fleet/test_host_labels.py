"""Two hosts whose exporters are both `localhost:9848`: the rules keep them apart by `host`.

A per-host agent scrapes its own exporter, so at the central store every host's `instance` may
be the same address (the Prometheus agent of deploy/fleet/ keeps it; vmagent relabels it to
the host name). The agents add `host` and `cluster` as external labels, and every grouping of
the rules keeps both (contract/labels.py, TARGET_KEY). promtool evaluates the generated rules
on such a fleet, and the same rules with `cluster, host` taken out of their groupings, to
show the collision the labels prevent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.alerts.tools import RULES, promtool_expr_test

INSTANCE = "localhost:9848"
TARGET = f'job="mirrorwatch", instance="{INSTANCE}", cluster="lab"'
# Host a: GPU 1 lags (0.95 against 0.80); host b: balanced. Both hosts' GPUs have the same
# uuids, as two simulated hosts of one scenario do.
SERIES = [
    ("a", "0", 0.95),
    ("a", "1", 0.80),
    ("b", "0", 0.90),
    ("b", "1", 0.90),
]
SPREAD = "instance:mirrorwatch_gpu_utilization_ratio:spread1m"


def promtool_test(tmp: Path, rules: Path, expected: list[dict[str, Any]]) -> str:
    """Run promtool's unit test of ``rules`` on SERIES; its output (empty when it passes)."""
    series = [
        {
            "series": "mirrorwatch_gpu_utilization_ratio"
            f'{{{TARGET}, host="{host}", gpu="{gpu}", uuid="GPU-{gpu}"}}',
            "values": f"{value}x20",
        }
        for host, gpu, value in SERIES
    ]
    cases = [{"expr": SPREAD, "eval_time": "4m", "exp_samples": expected}]
    return promtool_expr_test(tmp / "fleet-test.yml", "15s", series, cases, [rules])


def test_the_rules_keep_hosts_with_the_same_instance_apart(tmp_path: Path) -> None:
    expected = [
        {"labels": f'{SPREAD}{{{TARGET}, host="a"}}', "value": 0.15},
        {"labels": f'{SPREAD}{{{TARGET}, host="b"}}', "value": 0},
    ]
    assert promtool_test(tmp_path, RULES, expected) == ""


def test_without_host_in_their_groupings_the_hosts_collide(tmp_path: Path) -> None:
    stripped = tmp_path / "stripped.rules.yml"
    text = RULES.read_text(encoding="utf-8")
    stripped.write_text(re.sub(r"\bcluster, host, ", "", text), encoding="utf-8")
    assert "host" not in re.findall(r"(?:by|on) \(([^)]*)\)", stripped.read_text())
    # One series for two hosts, and no `host` to say which one lags: host b's balanced GPUs
    # are folded into host a's spread.
    expected = [{"labels": f'{SPREAD}{{job="mirrorwatch", instance="{INSTANCE}"}}', "value": 0.15}]
    assert promtool_test(tmp_path, stripped, expected) == ""
