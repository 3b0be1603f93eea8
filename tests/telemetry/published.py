"""What the real exporter publishes of one run: its training samples, read from /metrics."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def training_samples(url: str, run: str, worker: str | None = None) -> Samples:
    """``{(sample name, labels without run/worker): value}`` of one run's training series (of
    one worker, where given)."""
    text = httpx.get(url + "/metrics", timeout=5).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.startswith("mirrorwatch_training_") or labels.get("run") != run:
                continue
            if worker is not None and labels.get("worker") != worker:
                continue
            rest = {k: v for k, v in labels.items() if k not in ("run", "worker")}
            samples[(sample.name, frozenset(rest.items()))] = sample.value
    return samples


def value(samples: Samples, name: str) -> float:
    """The one value of the sample ``name`` without labels beyond run and worker."""
    [found] = [v for (n, labels), v in samples.items() if n == name and not labels]
    return found
