"""GPU alerts on processes: a training run's GPU shared with a process that is not the run's."""

from __future__ import annotations

from mirrorwatch.alerts import gpu_queries
from mirrorwatch.alerts.promql import RULES
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.templates import value_of
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.labels import key
from mirrorwatch.contract.metrics import GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES


def alerts(t: Thresholds) -> list[Alert]:
    return [
        # The exporter publishes foreign processes only for the GPUs of active runs whose
        # workers reported their pid (docs/api.md), so no join with the run is needed here.
        Alert(
            "GpuSharedWithForeignProcess",
            "warning",
            "«foreign» > 0",
            "GPU {{ $labels.gpu }} of run {{ $labels.run }} is shared with another process",
            "«GPU», used by run {{ $labels.run }}, also runs {{ $value }} process(es) that "
            "are not the run's, holding «memory»B of its memory. They take SM time and memory "
            "from the replica on that GPU, and every synchronous step waits for it.",
            "{{ $value }}",
            labels={"scope": "run"},
            fragments={
                "foreign": gpu_queries.foreign_processes(RULES),
                "memory": value_of(
                    GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES, key("uuid", "run"), pipe="humanize1024"
                ),
            },
        ),
    ]
