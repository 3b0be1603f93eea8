"""Go-template pieces of the alert annotations: which GPU, which run, a related series' value.

Written as Prometheus's template engine reads them; «name» marks where a fragment goes in.
"""

from __future__ import annotations

from mirrorwatch.alerts.fragments import fill
from mirrorwatch.alerts.queries import ACTIVE_REPLICA

GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }}"
WORKER = "worker {{ $labels.worker }} of run {{ $labels.run }} on {{ $labels.instance }}"
PCT = "{{ $value | humanizePercentage }}"

# Which active run uses this GPU, if any: GPU series carry no run label.
RUN_OF_GPU = fill(
    "{{ with printf `count by (run) («active»{instance=%q,uuid=%q})` "
    '$labels.instance $labels.uuid | query | sortByLabel "run" }}'
    "used by run {{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s.Labels.run }}{{ end }}"
    "{{ else }}in no active run{{ end }}",
    {"active": ACTIVE_REPLICA},
)


def gpus_of(matchers: str, args: str) -> str:
    """A template piece listing the GPUs a run (or one worker of it) reported."""
    return fill(
        "{{ with printf `count by (gpu) (mirrorwatch_training_replica_info{«matchers»})` "
        '«args» | query | sortByLabel "gpu" }}'
        "on GPU {{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s.Labels.gpu }}{{ end }}"
        "{{ else }}on no reported GPU{{ end }}",
        {"matchers": matchers, "args": args},
    )


GPUS_OF_WORKER = gpus_of(
    "instance=%q,run=%q,worker=%q", "$labels.instance $labels.run $labels.worker"
)
GPUS_OF_RUN = gpus_of("instance=%q,run=%q", "$labels.instance $labels.run")


def value_of(selector: str, args: str = "$labels.instance $labels.uuid", pipe: str = "") -> str:
    """A template piece printing the value of one series, found with printf ``args``."""
    return fill(
        "{{ with printf `«selector»` «args» | query }}{{ . | first | value«pipe» }}{{ end }}",
        {"selector": selector, "args": args, "pipe": f" | {pipe}" if pipe else ""},
    )


def gpu_value(metric: str, pipe: str = "", matchers: str = "") -> str:
    """A template piece printing ``metric`` of this alert's GPU (by instance and uuid)."""
    extra = f",{matchers}" if matchers else ""
    selector = fill("«metric»{instance=%q,uuid=%q«extra»}", {"metric": metric, "extra": extra})
    return value_of(selector, pipe=pipe)


# Every rule's text may name these.
COMMON = {
    "GPU": GPU,
    "WORKER": WORKER,
    "PCT": PCT,
    "RUN_OF_GPU": RUN_OF_GPU,
    "GPUS_OF_WORKER": GPUS_OF_WORKER,
    "GPUS_OF_RUN": GPUS_OF_RUN,
}
