"""Builds the FastAPI app: the backend starts in the lifespan and shuts down cleanly with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from mirrorwatch.exporter import __version__
from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.routes import gpus, health, landing, metrics
from mirrorwatch.exporter.settings import Settings
from mirrorwatch.exporter.state import ExporterState


def create_app(settings: Settings, backend: GpuBackend) -> FastAPI:
    """The exporter's app over ``backend``; starting and stopping it is the lifespan's job."""
    gpu_metrics = GpuMetrics(
        backend,
        ExporterInfo(version=__version__, expected_gpus=settings.expected_gpus),
        settings.enabled_collectors,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(gpu_metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backend.start()
        app.state.exporter = ExporterState(backend, gpu_metrics, registry)
        try:
            yield
        finally:
            backend.shutdown()

    app = FastAPI(
        title="mirrorwatch exporter",
        version=__version__,
        summary="GPU metrics for training hosts, and training telemetry ingest.",
        lifespan=lifespan,
    )
    for module in (metrics, health, gpus, landing):
        app.include_router(module.router)
    return app
