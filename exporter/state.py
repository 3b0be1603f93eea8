"""What the routes share: the backend and its metrics, built once per app."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from prometheus_client import CollectorRegistry

from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.collectors.registry import GpuMetrics


@dataclass(frozen=True)
class ExporterState:
    backend: GpuBackend
    metrics: GpuMetrics
    registry: CollectorRegistry


def get_state(request: Request) -> ExporterState:
    """FastAPI dependency: the state the lifespan attached to the app."""
    state: ExporterState = request.app.state.exporter
    return state
