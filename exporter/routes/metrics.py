"""GET /metrics: the Prometheus exposition, text or OpenMetrics by the Accept header."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Response
from prometheus_client.exposition import choose_encoder

from mirrorwatch.exporter.exposition import CONTENT_TYPE, TextRenderer
from mirrorwatch.exporter.state import ExporterState, get_state

router = APIRouter()
# Only a cache of label-set strings: rendering the same GPUs again skips their escaping.
_renderer = TextRenderer()


# A plain `def`: FastAPI runs it in the threadpool, so NVML calls never block the event loop.
@router.get("/metrics", response_class=Response, summary="Prometheus metrics")
def metrics(
    state: Annotated[ExporterState, Depends(get_state)],
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    encoder, content_type = choose_encoder(accept or "")
    if content_type.startswith("text/plain"):
        return Response(_renderer.render(state.registry.collect()), media_type=CONTENT_TYPE)
    return Response(content=encoder(state.registry), media_type=content_type)
