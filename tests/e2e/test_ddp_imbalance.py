"""A PyTorch DDP run whose worker 1 is starved: the run-scoped imbalance alert names its GPU.

The `imbalance` scenario's GPU 1 runs 15 points below GPU 0 (its input pipeline starves it).
Two gloo ranks (tests/torch_monitor/ddp_fit.py) stand on the two GPUs, one each, as torchrun's
processes on a dual-GPU host do; rank 1 waits for its data before every step, as the starved
rank would, so rank 0 spends its steps waiting for rank 1 in the all-reduce, which the
monitor measures.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from demo.processes import Process
from mirrorwatch.alerts import training_queries
from mirrorwatch.alerts.promql import Select
from tests.e2e.drill import FastRules, running_drill

RUN = "e2e-ddp-imbalance"
# The ranks' torch start on two busy cores, then `for:` (10 s) and group_wait (1 s), with room.
DEADLINE_SECONDS = 150


def ddp_job(workdir: Path, exporter_url: str, bus_ids: str) -> Process:
    args = [
        *(["nice", "-n", "10"] if shutil.which("nice") else []),
        sys.executable,
        "-m",
        "tests.torch_monitor.ddp_fit",
        f"--url={exporter_url}",
        f"--bus-ids={bus_ids}",
        f"--run={RUN}",
        "--steps=0",  # until stopped
        "--interval=1",
        "--starve-rank=1",
        "--starve-seconds=0.05",
        f"--out={workdir}",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return Process("ddp", args, workdir / "ddp.log", env)


def test_a_ddp_run_with_a_starved_worker_fires_the_run_imbalance_alert(
    fast_rules: FastRules, tmp_path: Path
) -> None:
    with running_drill("imbalance", fast_rules, tmp_path) as drill:
        gpus = drill.gpus()
        job = drill.processes.start(
            ddp_job(tmp_path, drill.exporter_url, ",".join(g["pci_bus_id"] for g in gpus[:2]))
        )

        _, alert = drill.wait_alert("GpuUtilizationImbalance", DEADLINE_SECONDS, run=RUN)

        assert job.alive(), job.log_tail()
        assert alert.labels["scope"] == "run"
        assert (alert.labels["gpu"], alert.labels["uuid"]) == ("1", gpus[1]["uuid"])
        # One run of two workers, each on its own GPU.
        joined = drill.query(f'mirrorwatch_training_replica_info{{run="{RUN}"}}')
        assert {(s["metric"]["worker"], s["metric"]["gpu"]) for s in joined} == {
            ("0", "0"),
            ("1", "1"),
        }
        # The measured communication share, by the query the report reads: the rank that was
        # kept waiting (0) spent more of its steps in all-reduce than the starved one.
        run = Select((f'run="{RUN}"',))
        share = {
            s["metric"]["worker"]: float(s["value"][1])
            for s in drill.query(training_queries.communication_share(run, "30s"))
        }
        assert set(share) == {"0", "1"}, share
        assert 0 <= share["1"] < share["0"] <= 1, share
