"""GET /api/v1/gpus: every GPU as JSON, built from the very samples /metrics would serve."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.state import ExporterState, get_state

router = APIRouter()

GPU_PREFIX = "mirrorwatch_gpu_"


def gpus_document(families: Iterable[Metric]) -> dict[str, Any]:
    """Group GPU samples by GPU index; extra labels become nested keys, in label order.

    ``mirrorwatch_gpu_temperature_threshold_celsius{threshold="slowdown"} 87`` on GPU 0 becomes
    ``gpus[0]["temperature_threshold_celsius"]["slowdown"] == 87``.
    """
    by_index: dict[str, dict[str, Any]] = {}
    for family in families:
        if not family.name.startswith(GPU_PREFIX):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            index = labels.pop("gpu")
            gpu = by_index.setdefault(index, {"index": int(index), "uuid": labels.pop("uuid")})
            labels.pop("uuid", None)
            key = sample.name.removeprefix(GPU_PREFIX)
            if key == "info":  # identity labels are the GPU's own fields
                gpu.update(labels)
                continue
            if key == "up":
                gpu["up"] = sample.value == 1
                continue
            if not labels:
                gpu[key] = sample.value
                continue
            node: dict[str, Any] = gpu.setdefault(key, {})
            *path, last = labels.values()
            for part in path:
                node = node.setdefault(part, {})
            node[last] = sample.value
    return {"gpus": [by_index[key] for key in sorted(by_index, key=int)]}


@router.get("/api/v1/gpus", summary="Every GPU's current readings as JSON")
def gpus(state: Annotated[ExporterState, Depends(get_state)]) -> dict[str, Any]:
    document = gpus_document(state.metrics.collect())
    document["backend"] = state.backend.kind
    document["up"] = state.backend.status().up
    return document
