"""One cause table: rules rank causes as the report orders findings; notifications say them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mirrorwatch.contract.causes import KINDS, LIVE, RANK
from mirrorwatch.report.evidence import Finding, ordered
from tests.alerts.tools import ALERTS, RULES, binary, firing_alert, load_yaml, render_template, run

# The finding kinds of the project contract (CONTRACT.md, "Run report").
CONTRACT_KINDS = {
    "imbalance",
    "thermal_throttling",
    "power_capping",
    "hardware_slowdown",
    "temperature_headroom",
    "pcie_degraded",
    "interconnect",
    "gpu_error",
    "input_bound",
    "telemetry_gap",
    "foreign_process",
    "straggler",
    "none",
}
GPU = 'job="mirrorwatch",instance="h1:9848",gpu="{i}",uuid="GPU-{i}"'
# Every cause a run GPU can have at once, on GPU 1 (input-bound and none exclude the rest).
AT_ONCE = ("hardware_slowdown", "thermal_throttling", "power_capping", "pcie_degraded")


def test_the_table_holds_exactly_the_contract_kinds() -> None:
    assert set(KINDS) == CONTRACT_KINDS
    assert len(KINDS) == len(CONTRACT_KINDS)


def series(metric: str, gpu: int, value: float, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{GPU.format(i=gpu)}{extra}}}", "values": f"{value}+0x10"}


def all_causes_on_gpu_1() -> list[dict[str, str]]:
    """Two GPUs of run r; GPU 1 in hardware slowdown, thermal and power throttled, at PCIe x8,
    shared with a foreign process and across CPU sockets from GPU 0."""
    run = 'job="mirrorwatch",instance="h1:9848",run="r",worker="0"'
    out = [{"series": f"mirrorwatch_training_active{{{run}}}", "values": "1+0x10"}]
    for i in (0, 1):
        on = int(i == 1)
        out += [
            {
                "series": f'mirrorwatch_training_replica_info{{{run},replica="{i}",gpu="{i}",'
                f'uuid="GPU-{i}"}}',
                "values": "1+0x10",
            },
            series("mirrorwatch_gpu_utilization_ratio", i, 0.9),
            series("mirrorwatch_gpu_temperature_celsius", i, 70 + 20 * on),
            series("mirrorwatch_gpu_clock_hertz", i, 1.98e9 - on * 1e9, clock="sm"),
            series("mirrorwatch_gpu_clock_max_hertz", i, 1.98e9, clock="sm"),
            series("mirrorwatch_gpu_power_watts", i, 250 + 50 * on),
            series("mirrorwatch_gpu_power_limit_watts", i, 300),
            series("mirrorwatch_gpu_pcie_link_width", i, 16 - 8 * on),
            series("mirrorwatch_gpu_pcie_link_width_max", i, 16),
            series("mirrorwatch_gpu_pcie_link_generation", i, 4),
            series("mirrorwatch_gpu_pcie_link_generation_max", i, 4),
            series("mirrorwatch_gpu_foreign_processes", i, on, run="r"),
            series("mirrorwatch_gpu_p2p_link_info", i, 1, peer_gpu=str(1 - i), link="cross_numa"),
        ]
        for reason in ("hw_slowdown", "sw_thermal_slowdown", "sw_power_cap"):
            out.append(series("mirrorwatch_gpu_clocks_event_active", i, on, reason=reason))
    return out


def rank_sample(kind: str) -> dict[str, Any]:
    cause = next(c for c in LIVE if c.kind == kind)
    labels = (
        f'cause="{kind}",evidence="{cause.evidence}",gpu="1",instance="h1:9848",'
        'job="mirrorwatch",run="r",uuid="GPU-1"'
    )
    return {"labels": f"run_gpu:mirrorwatch_gpu_cause:rank{{{labels}}}", "value": RANK[kind]}


def test_the_rules_rank_causes_in_the_order_the_report_lists_them(tmp_path: Path) -> None:
    kinds = (*AT_ONCE, "foreign_process", "interconnect")
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": all_causes_on_gpu_1(),
                "promql_expr_test": [
                    {
                        "expr": 'run_gpu:mirrorwatch_gpu_cause:rank{gpu="1"}',
                        "eval_time": "5m",
                        "exp_samples": [rank_sample(kind) for kind in kinds],
                    },
                    {
                        "expr": 'run_gpu:mirrorwatch_gpu_cause:likely{gpu="1"}',
                        "eval_time": "5m",
                        "exp_samples": [
                            {
                                **rank_sample("hardware_slowdown"),
                                "labels": rank_sample("hardware_slowdown")["labels"].replace(
                                    ":rank", ":likely"
                                ),
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "ranks.yml"
    path.write_text(yaml.safe_dump(test, allow_unicode=True), encoding="utf-8")
    result = run([binary("promtool"), "test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    # What promtool found the rules to rank, the report orders the same way.
    by_rule = sorted(kinds, key=lambda kind: RANK[kind])
    findings = [Finding(kind, "1", "h1:9848", 0.5, kind, [], "") for kind in reversed(kinds)]
    assert [f.kind for f in ordered(findings)] == by_rule


def imbalance_description(case: str) -> str:
    """The description promtool checks for one case of alerts/tests/causes.yml."""
    tests = load_yaml(ALERTS / "tests" / "causes.yml")["tests"]
    (test,) = [t for t in tests if t["name"] == case]
    description: str = test["alert_rule_test"][0]["exp_alerts"][0]["exp_annotations"]["description"]
    return description


def render(tmp_path: Path, annotations: dict[str, str], name: str) -> str:
    labels = {
        "alertname": "GpuUtilizationImbalance",
        "severity": "warning",
        "instance": "h1:9848",
        "gpu": "1",
        "uuid": "GPU-1",
        "run": "bert-2",
    }
    return render_template(tmp_path, firing_alert(labels, annotations), name)


def test_slack_and_email_show_the_lagging_gpus_cause_and_its_runbook(tmp_path: Path) -> None:
    description = imbalance_description(
        "heat on the lagging GPU: its temperature, slowdown threshold and SM clock"
    )
    annotations = {
        "summary": "GPU utilisation imbalance in run bert-2",
        "description": description,
        "value": "12%",
        "runbook_url": "https://example.org/runbook.md#gpuutilizationimbalance",
    }
    heat = "GPU 1 is held back for heat: 91 °C against its 87 °C slowdown, SM clock 1.42GHz"
    section = "docs/runbook.md#gputhermalthrottling"
    for template in ("mirrorwatch.slack.text", "mirrorwatch.text", "mirrorwatch.email.html"):
        text = render(tmp_path, annotations, template)
        assert heat in text, template
        assert section in text, template
