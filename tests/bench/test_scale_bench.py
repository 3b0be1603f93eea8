"""The scale bench's Prometheus-alone stack: its configuration is one Prometheus accepts, and it
scrapes what vmagent scrapes in the other stack, labelled alike."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.scale_bench import RULES, prometheus_config, vmagent_config
from demo.stack import write_yaml
from mirrorwatch.contract.vocabulary import Address
from tests.fleet.fleet import binary

EXPORTERS = [Address("127.0.0.1", 19848), Address("127.0.0.1", 19849)]


def test_the_prometheus_alone_config_passes_promtool(tmp_path: Path) -> None:
    config = write_yaml(tmp_path / "prometheus.yml", prometheus_config(EXPORTERS, 4, RULES))

    checked = subprocess.run(
        [binary("promtool"), "check", "config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheus_alone_scrapes_vmagents_targets_with_the_cluster_label_on_each() -> None:
    agent = vmagent_config(EXPORTERS, 4)
    (agent_job,) = agent["scrape_configs"]

    (job,) = prometheus_config(EXPORTERS, 4, RULES)["scrape_configs"]

    assert [g["targets"] for g in job["static_configs"]] == [
        g["targets"] for g in agent_job["static_configs"]
    ]
    assert [g["labels"] for g in job["static_configs"]] == [
        {**g["labels"], **agent["global"]["external_labels"]} for g in agent_job["static_configs"]
    ]
