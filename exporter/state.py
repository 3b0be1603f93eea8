"""What the routes share: the backend, its metrics and the training run store, built once."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from prometheus_client import CollectorRegistry

from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.collectors.registry import GpuMetrics
from mirrorwatch.exporter.ingest.store import RunStore


@dataclass(frozen=True)
class ExporterState:
    backend: GpuBackend
    metrics: GpuMetrics
    registry: CollectorRegistry
    store: RunStore


def get_state(request: Request) -> ExporterState:
    """FastAPI dependency: the state the lifespan attached to the app."""
    state: ExporterState = request.app.state.exporter
    return state
