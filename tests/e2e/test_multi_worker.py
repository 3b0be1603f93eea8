"""A MultiWorkerMirroredStrategy run over two hosts: one Prometheus sees one run across both.

Two simulated hosts, each with its own exporter; two `mirrorwatch-train --multi-worker` workers
(tf_keras, a loopback gRPC cluster), each pushing to its own host's exporter; one Prometheus
scraping both exporters with the generated rules (every `for:` divided as in the other drills)
and one Alertmanager. Host A is healthy; host B runs the `imbalance` scenario, whose GPU 1 runs
15 points below the rest, and worker 1's one replica stands on that GPU. No host is imbalanced
on its own: the run is, across the two.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from demo.processes import Process, Processes, StackError, get_json
from demo.receiver import Receiver
from demo.stack import (
    exporter_process,
    project_script,
    prometheus_config,
    prometheus_process,
)
from mirrorwatch.contract.vocabulary import Address
from tests.e2e.drill import (
    RESEND_DELAY,
    SCRAPE_INTERVAL,
    Drill,
    FastRules,
    binary,
    fail,
    start_alertmanager,
)
from tests.ports import free_port

RUN = "e2e-multi-worker"
GLOBAL_BATCH = 16
WORKERS = 2
SCENARIOS = ("healthy", "imbalance")  # host A, host B
# Two TensorFlow starts on two busy cores, the cluster forming, then `for:` (10 s) and
# group_wait (1 s), with room.
DEADLINE_SECONDS = 150


@contextmanager
def two_host_drill(rules: FastRules, workdir: Path) -> Iterator[tuple[Drill, list[Address]]]:
    """Exporters of a healthy and an imbalanced host, Alertmanager, one Prometheus for both."""
    hosts = [Address("127.0.0.1", free_port()) for _ in range(WORKERS)]
    prometheus = Address("127.0.0.1", free_port())
    alertmanager = Address("127.0.0.1", free_port())
    with Receiver("127.0.0.1", 0) as receiver, Processes() as processes:
        try:
            exporters = [
                processes.start(
                    exporter_process(workdir / f"host-{i}", scenario, host),
                    f"{host.url}/readyz",
                )
                for i, (scenario, host) in enumerate(zip(SCENARIOS, hosts, strict=True))
            ]
            start_alertmanager(processes, workdir, alertmanager, receiver.url)
            config = prometheus_config(
                exporter=hosts[0],
                alertmanager=alertmanager,
                prometheus=prometheus,
                rule_files=[rules.rules],
                scrape_interval=SCRAPE_INTERVAL,
                evaluation_interval="1s",
            )
            # The exporter job scrapes both hosts, as a fleet's Prometheus does.
            for job in config["scrape_configs"]:
                if job["job_name"] == "mirrorwatch":
                    job["static_configs"] = [{"targets": [str(host) for host in hosts]}]
            processes.start(
                prometheus_process(
                    binary("prometheus"), workdir, prometheus, config, resend_delay=RESEND_DELAY
                ),
                f"{prometheus.url}/-/ready",
            )
        except StackError as error:
            fail(str(error))
            raise
        yield (
            Drill(workdir, receiver, processes, exporters[0], hosts[0], prometheus, alertmanager),
            hosts,
        )


def worker_process(workdir: Path, cluster: str, index: int, host: Address, bus_id: str) -> Process:
    """Worker ``index`` of the cluster, its one CPU replica standing on GPU ``bus_id`` of its
    own host, pushing to that host's exporter."""
    trainer = project_script("mirrorwatch-train")
    assert trainer is not None, "mirrorwatch-train is not installed: run `make install`"
    env = {
        **os.environ,
        "MIRRORWATCH_REPLICA_PCI_BUS_IDS": bus_id,
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    env.pop("TF_CONFIG", None)
    env.pop("TF_USE_LEGACY_KERAS", None)  # --multi-worker chooses tf_keras itself
    args = [
        *(["nice", "-n", "10"] if shutil.which("nice") else []),
        trainer,
        "--multi-worker",
        f"--cluster={cluster}",
        f"--task-index={index}",
        "--model=cnn",
        f"--batch-size={GLOBAL_BATCH}",
        "--steps=100000",  # until stopped
        f"--url={host.url}",
        f"--run={RUN}",
        "--interval=1",
        "--verbose=0",
    ]
    return Process(f"worker-{index}", args, workdir / f"worker-{index}.log", env)


def values(drill: Drill, expr: str) -> dict[tuple[str, ...], float]:
    """``expr``'s value per (instance, worker) label pair (absent labels as '')."""
    return {
        (series["metric"].get("instance", ""), series["metric"].get("worker", "")): float(
            series["value"][1]
        )
        for series in drill.query(expr)
    }


def test_a_two_host_run_is_one_run_and_its_imbalance_alert_spans_both_hosts(
    fast_rules: FastRules, tmp_path: Path
) -> None:
    with two_host_drill(fast_rules, tmp_path) as (drill, hosts):
        gpus: list[list[dict[str, Any]]] = [
            get_json(f"{host.url}/api/v1/gpus")["gpus"] for host in hosts
        ]
        cluster = ",".join(f"127.0.0.1:{free_port()}" for _ in range(WORKERS))
        # Worker 0 on host A's GPU 0 (0.95 busy), worker 1 on host B's GPU 1 (0.80 busy).
        workers = [
            drill.processes.start(
                worker_process(tmp_path, cluster, i, hosts[i], gpus[i][i]["pci_bus_id"])
            )
            for i in range(WORKERS)
        ]

        _, alert = drill.wait_alert(
            "GpuUtilizationImbalance", DEADLINE_SECONDS, run=RUN, scope="run"
        )

        for worker in workers:
            assert worker.alive(), worker.log_tail()
        # The run's lagging GPU is host B's GPU 1: a GPU of the other host than host A's.
        assert alert.labels["instance"] == str(hosts[1])
        assert alert.labels["uuid"] == gpus[1][1]["uuid"]
        assert alert.labels["gpu"] == "1"
        a, b = str(hosts[0]), str(hosts[1])
        # The run's GPUs are one of each host, joined by UUID to that host's GPU series.
        run_gpus = drill.query(f'run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m{{run="{RUN}"}}')
        assert {(s["metric"]["instance"], s["metric"]["uuid"]) for s in run_gpus} == {
            (a, gpus[0][0]["uuid"]),
            (b, gpus[1][1]["uuid"]),
        }
        spread = drill.query(f'run:mirrorwatch_gpu_utilization_ratio:spread1m{{run="{RUN}"}}')
        assert len(spread) == 1, spread
        assert float(spread[0]["value"][1]) > 0.05, spread
        # Neither host is imbalanced by itself once the run is known: the other GPU of each is
        # in no run. (Before worker 1's first push, host B's two busy GPUs, 15 points apart and
        # in no run, are rightly a host imbalance: TensorFlow's start on a loaded machine can
        # outlast its 10 s `for:`. So the claim is Prometheus's, from the moment the run alert
        # fired, at least that `for:` after the run was known, not the receiver's.)
        since = drill.first_sample_time(
            f'ALERTS{{alertname="GpuUtilizationImbalance",scope="run",run="{RUN}",'
            f'alertstate="firing"}}'
        )
        host_alerts = drill.query(
            f'ALERTS{{alertname="GpuUtilizationImbalance",scope="host"}}'
            f"[{max(1, int(time.time() - since))}s]"
        )
        assert host_alerts == [], host_alerts

        # Each worker is itself, on its own host, under the strategy and run they share.
        info = drill.query(f'mirrorwatch_training_info{{run="{RUN}"}}')
        assert {(s["metric"]["instance"], s["metric"]["worker"]) for s in info} == {
            (a, "0"),
            (b, "1"),
        }
        assert {s["metric"]["strategy"] for s in info} == {"MultiWorkerMirroredStrategy"}
        # replicas: each worker's own; global_batch_size: the run's, the same on both.
        assert values(drill, f'mirrorwatch_training_replicas{{run="{RUN}"}}') == {
            (a, "0"): 1,
            (b, "1"): 1,
        }
        assert values(drill, f'mirrorwatch_training_global_batch_size{{run="{RUN}"}}') == {
            (a, "0"): GLOBAL_BATCH,
            (b, "1"): GLOBAL_BATCH,
        }
        # examples_total: each worker's share of every global batch (1 replica of 2), so that
        # the run's examples are the sum over its workers; exact in every snapshot.
        shares = values(
            drill,
            f'mirrorwatch_training_examples_total{{run="{RUN}"}} '
            f"/ on (job, instance, run, worker) "
            f'mirrorwatch_training_steps_total{{run="{RUN}"}}',
        )
        assert shares == {(a, "0"): GLOBAL_BATCH / 2, (b, "1"): GLOBAL_BATCH / 2}
        # steps_total: the run's steps on each worker (they step together), never summed.
        rates = values(drill, f'rate(mirrorwatch_training_steps_total{{run="{RUN}"}}[15s])')
        assert min(rates.values()) > 0.8 * max(rates.values()), rates
        run_examples = values(
            drill,
            f'sum by (run) (rate(mirrorwatch_training_examples_total{{run="{RUN}"}}[15s]))',
        )[("", "")]
        run_steps = max(rates.values())
        assert 0.8 < run_examples / (run_steps * GLOBAL_BATCH) < 1.25, (run_examples, run_steps)
        # The run's throughput adds up the workers' own gauges, across the two hosts (a mean
        # would read half). Each gauge is the client's 30-second window of its measured step
        # time (telemetry/snapshot.py), so it moves little between the rule's last evaluation
        # and now; it is not compared with the counters' wall-clock rate, which on a loaded
        # machine also counts the time between steps.
        throughput = values(
            drill, f'run:mirrorwatch_training_examples_per_second:sum{{run="{RUN}"}}'
        )[("", "")]
        gauges = values(drill, f'mirrorwatch_training_examples_per_second{{run="{RUN}"}}')
        assert set(gauges) == {(a, "0"), (b, "1")}, gauges
        assert 0.75 < throughput / sum(gauges.values()) < 1.33, (throughput, gauges)
