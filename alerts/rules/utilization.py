"""GPU alerts on utilisation and memory: an imbalanced run or host, memory nearly full."""

from __future__ import annotations

from mirrorwatch.alerts import gpu_queries, promql, recorded, training_queries
from mirrorwatch.alerts.promql import RULES
from mirrorwatch.alerts.rules import Alert, causes
from mirrorwatch.alerts.templates import POINTS, gpu_value, value_of
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.labels import TARGET_KEY, key

FULL_SUMMARY = "GPU {{ $labels.gpu }} of «HOST» memory is nearly full"


def alerts(t: Thresholds) -> list[Alert]:
    busy_unassigned = gpu_queries.busy_unassigned(t.busy_utilization_ratio)
    replica_memory = {"replica_memory": training_queries.replica_memory()}
    return [
        Alert(
            "GpuUtilizationImbalance",
            "warning",
            """
            (
              run:mirrorwatch_gpu_utilization_ratio:spread1m > «spread_ratio»
              and on (run)
              max by (run) (run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m) >= «busy»
            )
            «labels_of_lagging_gpu»
            """,
            "GPU utilisation imbalance in run {{ $labels.run }}",
            'The 1-minute mean {{ if eq $labels.source "sm_activity" }}SM activity (GPM)'
            "{{ else }}utilisation{{ end }} of the GPUs of run {{ $labels.run }} spans «points» "
            "(more than «spread_ratio:pp»). «GPU» lags the most, at «lagging». «why»",
            "«points»",
            labels={"scope": "run"},
            fragments={
                "points": POINTS,
                "labels_of_lagging_gpu": promql.labels_of_extreme(
                    recorded.RUN_GPU_BALANCE, "run", "min"
                ),
                "lagging": value_of(
                    recorded.RUN_GPU_BALANCE, key("run", "uuid"), pipe="humanizePercentage"
                ),
                "why": causes.why_run(t.runbook_url),
            },
        ),
        Alert(
            "GpuUtilizationImbalance",
            "warning",
            """
            (instance:mirrorwatch_gpu_utilization_ratio:spread1m > «spread_ratio»)
            «labels_of_lagging_gpu»
            """,
            "GPU utilisation imbalance on «HOST»",
            "The 1-minute mean utilisation of the busy GPUs of «HOST» that "
            "report no training run spans «points» (more than «spread_ratio:pp»). «GPU», "
            "«RUN_OF_GPU», lags the most, at «lagging». «why»",
            "«points»",
            labels={"scope": "host"},
            fragments={
                "points": POINTS,
                "labels_of_lagging_gpu": promql.labels_of_extreme(
                    busy_unassigned, TARGET_KEY, "min"
                ),
                "lagging": gpu_value(recorded.GPU_UTIL, "humanizePercentage"),
                "why": causes.why_host(t.runbook_url),
            },
        ),
        Alert(
            "GpuMemoryNearlyFull",
            "warning",
            """
            sum by («RUN_KEY», gpu, uuid) (
              («replica_memory»)
              / on («UUID_KEY») group_left (gpu)
                mirrorwatch_gpu_memory_total_bytes
            ) > «used_ratio»
            """,
            FULL_SUMMARY,
            "Run {{ $labels.run }} uses «PCT» of the memory of «GPU» by its framework's own "
            "count (alert above «used_ratio:%»).",
            "«PCT»",
            labels={"scope": "run"},
            fragments=replica_memory,
        ),
        Alert(
            "GpuMemoryNearlyFull",
            "warning",
            """
            «memory_used_ratio» > «used_ratio»
            unless on («UUID_KEY»)
              («replica_memory»)
            """,
            FULL_SUMMARY,
            "«GPU», «RUN_OF_GPU», has «PCT» of its memory in use (alert above «used_ratio:%»).",
            "«PCT»",
            labels={"scope": "host"},
            fragments={**replica_memory, "memory_used_ratio": gpu_queries.memory_used_ratio(RULES)},
        ),
    ]
