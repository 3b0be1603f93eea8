"""The label keys that name a target, a GPU, a worker and a run, for PromQL and Alertmanager.

Rules, alert texts, inhibitions, dashboards and the report group and join by these keys only.
"""

from __future__ import annotations

# Every grouping keeps `cluster` and `host`: the external labels a per-host agent (vmagent,
# Prometheus agent mode) adds before it remote-writes to a central store (deploy/fleet/,
# docs/fleet.md). There every host's exporter may be `localhost:9848`, so `job, instance`
# alone would merge hosts. On one Prometheus the two labels are absent and change nothing,
# as kubernetes-mixin's `clusterLabel` groupings do.
# Every alert-text lookup uses the same keys (mirrorwatch.alerts.templates), so it can never
# find another host's series; rules and templates name them as «fragments», never literally.
TARGET_LABELS = ("cluster", "host", "job", "instance")


def key_labels(*labels: str) -> tuple[str, ...]:
    """A grouping key as a list of names (Alertmanager's `equal`): the target's, then ``labels``."""
    return (*TARGET_LABELS, *labels)


def key(*labels: str) -> str:
    """A grouping key as PromQL writes it: the target's labels, then ``labels``."""
    return ", ".join(key_labels(*labels))


TARGET_KEY = key()
GPU_KEY = key("gpu", "uuid")
# A GPU as the training series name it: their `gpu` is the trainer's index, not NVML's.
UUID_KEY = key("uuid")
WORKER_KEY = key("run", "worker")
RUN_KEY = key("run")
# The key sets as rule text names them.
KEY_FRAGMENTS = {
    "TARGET_KEY": TARGET_KEY,
    "GPU_KEY": GPU_KEY,
    "UUID_KEY": UUID_KEY,
    "WORKER_KEY": WORKER_KEY,
    "RUN_KEY": RUN_KEY,
}
