"""GET /: a small HTML page linking the exporter's endpoints."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from mirrorwatch.exporter import __version__
from mirrorwatch.exporter.state import ExporterState, get_state

router = APIRouter()

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mirrorwatch exporter</title></head>
<body>
<h1>mirrorwatch exporter</h1>
<p>Version {version}, backend {backend}: {status}.</p>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="api/v1/gpus">/api/v1/gpus</a>: every GPU as JSON</li>
<li><a href="healthz">/healthz</a>: liveness</li>
<li><a href="readyz">/readyz</a>: readiness of the GPU backend</li>
<li><a href="openapi.json">/openapi.json</a>: the HTTP API (OpenAPI document)</li>
</ul>
</body></html>
"""


@router.get("/", response_class=HTMLResponse, summary="Landing page")
def landing(state: Annotated[ExporterState, Depends(get_state)]) -> HTMLResponse:
    status = state.backend.status()
    text = "ready" if status.up else f"unavailable ({status.reason})"
    return HTMLResponse(PAGE.format(version=__version__, backend=state.backend.kind, status=text))
