"""Builds the FastAPI app: the backend starts in the lifespan and shuts down cleanly with it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from mirrorwatch.exporter import __version__
from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.basic_auth import BasicAuthGuard, WatchedUsers
from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics, select_collectors
from mirrorwatch.exporter.collectors.training import TrainingMetrics
from mirrorwatch.exporter.ingest.auth import IngestAuth
from mirrorwatch.exporter.ingest.body import BodyLimits
from mirrorwatch.exporter.ingest.errors import RejectionCounter
from mirrorwatch.exporter.ingest.guard import IngestGuard
from mirrorwatch.exporter.ingest.handlers import install_error_handlers
from mirrorwatch.exporter.ingest.store import Clock, Limits, RunStore
from mirrorwatch.exporter.logs import RejectionLog
from mirrorwatch.exporter.routes import gpus, health, ingest, landing, metrics
from mirrorwatch.exporter.settings import Settings
from mirrorwatch.exporter.state import ExporterState
from mirrorwatch.exporter.web_config import WebConfig

log = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    backend: GpuBackend,
    clock: Clock | None = None,
    web_config: WebConfig | None = None,
) -> FastAPI:
    """The exporter's app over ``backend``; starting and stopping it is the lifespan's job.

    ``clock`` drives training-worker expiry; tests pass a fake one. ``web_config`` (the
    --web-config-file, already loaded) puts basic auth in front of every route but ingest
    PUT/DELETE.
    """
    gpu_metrics = GpuMetrics(
        backend,
        ExporterInfo(
            version=__version__,
            run_ttl_seconds=settings.run_ttl,
            expected_gpus=settings.expected_gpus,
            top_processes=settings.top_processes,
        ),
        select_collectors(settings.collectors),
    )
    store = RunStore(Limits.from_settings(settings), clock)
    rejections = RejectionCounter(RejectionLog(logging.getLogger("mirrorwatch.exporter.ingest")))
    auth = IngestAuth(settings.ingest_token_value())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(gpu_metrics)
    registry.register(TrainingMetrics(store, backend, rejections))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if auth.loopback_only:
            log.warning(
                "no ingest token configured: the training ingest API answers loopback "
                "clients only (set MIRRORWATCH_INGEST_TOKEN or --ingest-token-file)"
            )
        backend.start()
        app.state.exporter = ExporterState(backend, gpu_metrics, registry, store)
        try:
            yield
        finally:
            backend.shutdown()
            log.info("stopped: every request answered, the GPU backend shut down")

    app = FastAPI(
        title="mirrorwatch exporter",
        version=__version__,
        summary="GPU metrics for training hosts, and training telemetry ingest.",
        lifespan=lifespan,
        # No Swagger UI or ReDoc: FastAPI loads both from a CDN (fastapi/openapi/docs.py,
        # get_swagger_ui_html's cdn.jsdelivr.net URLs), so they are blank on an offline GPU
        # host. The OpenAPI document itself, /openapi.json, needs nothing from outside.
        docs_url=None,
        redoc_url=None,
    )
    # Ingest first: routes are matched in order, and pushes are the most frequent request.
    for module in (ingest, metrics, health, gpus, landing):
        app.include_router(module.router)
    ingest.publish_openapi_extras(app)
    install_error_handlers(app, rejections)
    app.add_middleware(
        IngestGuard,
        auth=auth,
        rejections=rejections,
        body_limits=BodyLimits.for_replicas(settings.max_replicas),
        body_timeout=settings.body_timeout,
    )
    if web_config is not None:
        # Before the ingest guard: a scrape without credentials is refused before anything.
        app.add_middleware(BasicAuthGuard, users=WatchedUsers(web_config.path, web_config.users))
    # Outermost, so the guard sees the client it computes. Here rather than uvicorn's own
    # (cli.py turns that off): only the configured proxies count, never FORWARDED_ALLOW_IPS,
    # and uvicorn's _TrustedHosts takes the right-most address that is not one of them.
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.proxies)
    # The connection-level guard (ingest/protocol.py) counts its refusals here too.
    app.state.rejections = rejections
    return app
