"""Go-template pieces of the alert annotations: which host, GPU and run, a related series' value.

Written as Prometheus's template engine reads them; «name» marks where a fragment goes in.

Every lookup finds its series by the labels the alert's rule grouped by (a key of
mirrorwatch.contract.labels), all of them: behind per-host agents two hosts may share `instance`
(localhost:9848) and differ only in `host`, so a lookup by `instance` alone would quote the
other host's value. An alert without `cluster` or `host` looks them up as "", which is how
PromQL matches a label that is absent (https://prometheus.io/docs/prometheus/latest/querying/basics/
"Label matchers that match empty label values also select all time series that do not have
the specific label set at all"), so the same text serves one Prometheus and a fleet alike.
"""

from __future__ import annotations

from mirrorwatch.alerts.fragments import fill
from mirrorwatch.alerts.recorded import ACTIVE_REPLICA
from mirrorwatch.contract.labels import RUN_KEY, TARGET_KEY, UUID_KEY, WORKER_KEY

# The host as people know it: the agent's `host` label where there is one, else the address.
HOST = "{{ or $labels.host $labels.instance }}"
GPU = fill("GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on «host»", {"host": HOST})
WORKER = fill("worker {{ $labels.worker }} of run {{ $labels.run }} on «host»", {"host": HOST})
PCT = "{{ $value | humanizePercentage }}"
# A difference of two ratios (a spread, a lag) in percentage points with one decimal, as the run
# report writes it (report/words.py: 15.2 pp). Prometheus's templates have no arithmetic, so a
# query multiplies (a scalar's query result is a one-sample vector, rules.EngineQueryFunc).
_ONE_DECIMAL = '{{ . | first | value | printf "%.1f" }}'
POINTS = fill('{{ with printf "100 * %f" $value | query }}«one»{{ end }} pp', {"one": _ONE_DECIMAL})


def matchers(key: str, of: str = "$labels") -> tuple[str, str]:
    """The printf matchers of a key (``cluster=%q,host=%q,...``) and their arguments
    (``$labels.cluster $labels.host ...``, or another template variable's labels)."""
    labels = key.split(", ")
    return ",".join(f"{label}=%q" for label in labels), " ".join(
        f"{of}.{label}" for label in labels
    )


def value_of(metric: str, key: str = UUID_KEY, extra: str = "", pipe: str = "") -> str:
    """A template piece printing the value of ``metric`` (with ``extra`` matchers) for this
    alert's own ``key``."""
    wanted, args = matchers(key)
    return fill(
        "{{ with printf `«metric»{«wanted»«extra»}` «args» | query }}"
        "{{ . | first | value«pipe» }}{{ end }}",
        {
            "metric": metric,
            "wanted": wanted,
            "extra": f",{extra}" if extra else "",
            "args": args,
            "pipe": f" | {pipe}" if pipe else "",
        },
    )


def points_of(metric: str, key: str = UUID_KEY, extra: str = "") -> str:
    """A template piece printing ``metric`` (a difference of ratios) for this alert's own
    ``key`` in percentage points, as POINTS does."""
    wanted, args = matchers(key)
    return fill(
        "{{ with printf `100 * «metric»{«wanted»«extra»}` «args» | query }}«one»{{ end }} pp",
        {
            "metric": metric,
            "wanted": wanted,
            "extra": f",{extra}" if extra else "",
            "args": args,
            "one": _ONE_DECIMAL,
        },
    )


def gpu_value(metric: str, pipe: str = "", extra: str = "") -> str:
    """A template piece printing ``metric`` of this alert's GPU."""
    return value_of(metric, UUID_KEY, extra, pipe)


def _listing(query: str, key: str, by: str, each: str, empty: str) -> str:
    """Names the ``by`` label of each series ``query`` (a printf format) finds for this alert's
    ``key``, sorted and joined by ", "."""
    wanted, args = matchers(key)
    return fill(
        '{{ with printf `«query»` «args» | query | sortByLabel "«by»" }}'
        "«each» {{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s.Labels.«by» }}{{ end }}"
        "{{ else }}«empty»{{ end }}",
        {
            "query": query.replace("«wanted»", wanted),
            "args": args,
            "by": by,
            "each": each,
            "empty": empty,
        },
    )


# Which active run uses this GPU, if any: GPU series carry no run label.
RUN_OF_GPU = _listing(
    f"count by (run) ({ACTIVE_REPLICA}{{«wanted»}})",
    UUID_KEY,
    "run",
    "used by run",
    "in no active run",
)
GPUS_OF_WORKER = _listing(
    "count by (gpu) (mirrorwatch_training_replica_info{«wanted»})",
    WORKER_KEY,
    "gpu",
    "on GPU",
    "on no reported GPU",
)
GPUS_OF_RUN = _listing(
    "count by (gpu) (mirrorwatch_training_replica_info{«wanted»})",
    RUN_KEY,
    "gpu",
    "on GPU",
    "on no reported GPU",
)

# The GPUs of a run on each of its hosts: "on GPU 0, 1 of gpu-a; GPU 0 of gpu-b". Hosts are
# told apart by the whole target key, named as HOST names them, sorted by that name.
_EACH_HOST, _HOST_ARGS = matchers(TARGET_KEY, of="$host.Labels")
GPUS_OF_RUN_ON_EVERY_HOST = fill(
    "{{ with printf `count by («target») (mirrorwatch_training_replica_info{run=%q})` $labels.run"
    ' | query | sortByLabel "instance" | sortByLabel "host" }}on '
    "{{ range $i, $host := . }}{{ if $i }}; {{ end }}GPU "
    "{{ range $j, $s := printf "
    "`count by (gpu) (mirrorwatch_training_replica_info{«each_host»,run=%q})` "
    '«host_args» $labels.run | query | sortByLabel "gpu" }}{{ if $j }}, {{ end }}'
    "{{ $s.Labels.gpu }}{{ end }} of {{ or $host.Labels.host $host.Labels.instance }}{{ end }}"
    "{{ else }}on no reported GPU{{ end }}",
    {"target": TARGET_KEY, "each_host": _EACH_HOST, "host_args": _HOST_ARGS},
)


# Every rule's text may name these.
COMMON = {
    "HOST": HOST,
    "GPU": GPU,
    "WORKER": WORKER,
    "PCT": PCT,
    "RUN_OF_GPU": RUN_OF_GPU,
    "GPUS_OF_WORKER": GPUS_OF_WORKER,
    "GPUS_OF_RUN": GPUS_OF_RUN,
}
