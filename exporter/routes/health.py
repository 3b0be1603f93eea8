"""GET /healthz (the process serves) and GET /readyz (the GPU backend answers)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from mirrorwatch.exporter.state import ExporterState, get_state

router = APIRouter()


@router.get("/healthz", summary="Liveness: 200 while the process serves")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: 200 when the GPU backend answers, else 503")
def readyz(state: Annotated[ExporterState, Depends(get_state)]) -> JSONResponse:
    status = state.backend.status()
    if status.up:
        return JSONResponse({"status": "ready", "backend": state.backend.kind})
    return JSONResponse(
        {"status": "unavailable", "backend": state.backend.kind, "reason": status.reason},
        status_code=503,
    )
