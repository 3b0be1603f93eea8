"""Exception handlers: every refusal on the ingest paths becomes a counted JSON error.

Elsewhere FastAPI's own answers are kept, so the GPU routes answer as they always have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from mirrorwatch.exporter.ingest.errors import IngestError, Reason, RejectionCounter
from mirrorwatch.exporter.ingest.guard import is_ingest_path

ERRORS_LISTED = 10
_HTTP_REASONS: dict[int, Reason] = {
    400: "malformed_json",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}


def field_name(loc: Sequence[int | str]) -> str:
    """``("body", "replica_devices", 0, "uuid")`` -> ``body.replica_devices[0].uuid``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
    return name


def validation_error(exc: RequestValidationError) -> IngestError:
    """The first problem as the sentence, the first few as ``errors``; never the input."""
    errors: Sequence[Mapping[str, Any]] = exc.errors()
    first: Mapping[str, Any] = (
        errors[0] if errors else {"loc": ("body",), "msg": "invalid", "type": ""}
    )
    if first["type"] == "json_invalid":
        context: Mapping[str, Any] = first.get("ctx") or {}
        detail = context.get("error", "JSON decode error")
        return IngestError(400, "malformed_json", f"body: not valid JSON ({detail})", "body")
    field = field_name(first["loc"])
    error = IngestError(422, "invalid", f"{field}: {first['msg']}", field)
    error.details = [
        {"field": field_name(item["loc"]), "message": item["msg"]}
        for item in errors[:ERRORS_LISTED]
    ]
    return error


def http_error(exc: HTTPException) -> IngestError:
    reason = _HTTP_REASONS.get(exc.status_code, "invalid")
    if exc.status_code == 400:
        message = "body: could not be parsed as JSON (nested too deeply, or a number too long)"
        return IngestError(400, reason, message, "body")
    if exc.status_code == 404:
        message = "path: no such endpoint; use /api/v1/runs/{run}/workers/{worker}"
        return IngestError(404, reason, message, "path")
    if exc.status_code == 405:
        return IngestError(405, reason, "method: use PUT to push or DELETE to forget a worker")
    return IngestError(exc.status_code, reason, f"request: {exc.detail}")


def install_error_handlers(app: FastAPI, rejections: RejectionCounter) -> None:
    """JSON errors for the ingest paths, each counted by reason; a 5xx is never the client's."""

    def count(request: Request, error: IngestError) -> None:
        client = request.client.host if request.client else None
        rejections.refused(error, client)

    async def on_ingest_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, IngestError)
        count(request, exc)
        return exc.response()

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if not is_ingest_path(request.scope["path"]):
            return await request_validation_exception_handler(request, exc)
        return await on_ingest_error(request, validation_error(exc))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if not is_ingest_path(request.scope["path"]):
            return await http_exception_handler(request, exc)
        error = http_error(exc)
        count(request, error)
        response = error.response()
        response.headers.update(exc.headers or {})
        return response

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Starlette re-raises after this answer, so the traceback goes to the log, not the
        # client.
        return JSONResponse(
            {"error": "internal error; the exporter's log has the details", "reason": "internal"},
            status_code=500,
        )

    app.add_exception_handler(IngestError, on_ingest_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
