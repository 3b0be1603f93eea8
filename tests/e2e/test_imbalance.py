"""`imbalance` with a real training run: the run's alert names the run, the lagging GPU and why."""

from __future__ import annotations

from pathlib import Path

from demo.stack import trainer_process
from tests.e2e.drill import FastRules, Latency, measure, running_drill

RUN = "e2e-imbalance"
# TensorFlow's start on two busy cores, then `for:` (10 s) and group_wait (1 s), with room.
DEADLINE_SECONDS = 150


def test_imbalance_alert_names_the_run_and_its_lagging_gpu(
    fast_rules: FastRules, tmp_path: Path, latencies: list[Latency]
) -> None:
    with running_drill("imbalance", fast_rules, tmp_path) as drill:
        gpus = drill.gpus()
        trainer = drill.processes.start(
            trainer_process(tmp_path, drill.exporter_url, RUN, interval=1.0)
        )

        notification, alert = drill.wait_alert("GpuUtilizationImbalance", DEADLINE_SECONDS, run=RUN)

        assert trainer.alive(), trainer.log_tail()
        # GPU 1 runs at ~0.80 against GPU 0's ~0.95 (docs/scenarios.md).
        assert alert.labels["gpu"] == "1"
        assert alert.labels["uuid"] == gpus[1]["uuid"]
        assert alert.labels["scope"] == "run"
        assert alert.labels["instance"] == str(drill.exporter_address)
        description = alert.annotations["description"]
        assert RUN in description
        # The scenario starves GPU 1 of input and nothing else: the notification says so, with
        # the runbook section for it, from the cause rules of the same Prometheus.
        assert "No hardware cause on GPU 1: most likely its input pipeline" in description
        assert "runbook.md#gpuutilizationimbalance." in description
        assert "held back" not in description
        # The run-scoped alert can start once the run's first push has been scraped.
        started = drill.first_sample_time(f'mirrorwatch_training_replica_info{{run="{RUN}"}}')
        latencies.append(
            measure(
                fast_rules, "imbalance", "first training push scraped", started, notification, alert
            )
        )
