"""`foreign-process`: a stray process on a run's GPU raises GpuSharedWithForeignProcess for that
GPU only, end to end; the simulated Hopper GPUs' GPM measures the run's balance."""

from __future__ import annotations

import os
from pathlib import Path

from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE
from tests.e2e.drill import FastRules, Latency, measure, running_drill, synthetic_training

RUN = "e2e-foreign"
# The notebook arrives 10 s after the exporter starts; then `for:` (10 s) and group_wait.
DEADLINE_SECONDS = 90


# A worker in the host PID namespace with this test's pid: no simulated process has it, so
# both simulated processes are foreign to the run.
OWN_PID = {"pid": os.getpid(), "pid_namespace": INIT_PID_NAMESPACE}


def test_a_foreign_process_on_a_runs_gpu_alerts_for_that_gpu(
    fast_rules: FastRules, tmp_path: Path, latencies: list[Latency]
) -> None:
    with running_drill("foreign-process", fast_rules, tmp_path) as drill:
        gpus = drill.gpus()
        with synthetic_training(drill, RUN, extra=OWN_PID):
            notification, alert = drill.wait_alert(
                "GpuSharedWithForeignProcess", DEADLINE_SECONDS, run=RUN
            )

            assert alert.labels["gpu"] == "1"
            assert alert.labels["uuid"] == gpus[1]["uuid"]
            assert alert.labels["severity"] == "warning"
            assert alert.labels["instance"] == str(drill.exporter_address)
            assert "holding 12GiB" in alert.annotations["description"]
            # GPM on the simulated Hopper GPUs, and the run's balance measured in it.
            active = drill.query("mirrorwatch_gpu_sm_activity_ratio")
            assert sorted(s["metric"]["gpu"] for s in active) == ["0", "1"]
            spread = drill.query(f'run:mirrorwatch_gpu_utilization_ratio:spread1m{{run="{RUN}"}}')
            assert [s["metric"]["source"] for s in spread] == ["sm_activity"]
            # The per-process series name the stray process.
            stray = drill.query('mirrorwatch_gpu_process_memory_used_bytes{gpu="1"}')
            assert [(s["metric"]["pid"], s["metric"]["process"]) for s in stray] == [
                ("4194817", "python3")
            ]

        shared = {
            a.labels.get("gpu")
            for n in drill.receiver.notifications()
            for a in n.alerts
            if a.name == "GpuSharedWithForeignProcess"
        }
        assert shared == {"1"}
        started = drill.first_sample_time(
            f'mirrorwatch_gpu_foreign_processes{{gpu="1",run="{RUN}"}}', value=1.0
        )
        latencies.append(
            measure(
                fast_rules,
                "foreign-process",
                "foreign process first scraped",
                started,
                notification,
                alert,
            )
        )
