"""PUT and DELETE /api/v1/runs/{run}/workers/{worker}: training telemetry in, schema 1.

Credentials and body size are checked before this router sees a request (ingest/guard.py);
refusals become counted JSON errors (ingest/handlers.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Path, Request, Response
from fastapi.openapi.models import Schema
from pydantic import BaseModel

from mirrorwatch.contract.vocabulary import MAX_WORKER, RUN_PATTERN, RUN_RULE
from mirrorwatch.exporter.ingest.errors import IngestError
from mirrorwatch.exporter.ingest.schema import TrainingSnapshot
from mirrorwatch.exporter.ingest.store import PushRefusedError, RefusalKind, RunStore
from mirrorwatch.exporter.state import ExporterState

WORKER_PATH = "/api/v1/runs/{run}/workers/{worker}"

RunId = Annotated[
    str,
    # The lengths too, though the pattern bounds them: their messages say what is wrong.
    Path(
        min_length=1, max_length=64, pattern=RUN_PATTERN.pattern, description=f"run id: {RUN_RULE}"
    ),
]
WorkerIndex = Annotated[
    int,
    Path(
        ge=0,
        le=MAX_WORKER,
        description=f"the worker's task index (TF_CONFIG), 0..{MAX_WORKER}",
    ),
]


class FieldProblem(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    """Every refusal: one sentence that names the field, and a machine-readable reason."""

    error: str
    reason: str
    field: str | None = None
    limit: str | None = None
    errors: list[FieldProblem] | None = None


class PushAccepted(BaseModel):
    """What became of an accepted snapshot."""

    run: str
    worker: int
    outcome: Literal["created", "updated", "unchanged", "restarted"]
    sequence: int


_SCHEMAS = "#/components/schemas/"


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {
        400: "malformed JSON, not UTF-8, or no Host header",
        401: "missing or wrong bearer token",
        403: "no token configured and the client is not on loopback",
        404: "no such worker",
        408: "the body was not received in time",
        409: "stale push: a late retry of an older sequence or an earlier session",
        413: "body over 1 MiB, a string over 1024 bytes, or more values than a snapshot has",
        415: "body not sent as application/json",
        422: "schema violation, or a counter that went down within a session",
        429: "over a limit (named in `limit`): runs, workers of the run, workers in all, or "
        "replicas per worker",
        431: "request line and headers over the exporter's limit",
    }
    # Not `"model": ErrorBody`: FastAPI would build a serializer for every error response of
    # every route when this module is imported, for the OpenAPI document alone (0.1-0.2 MiB
    # of the exporter's memory); publish_openapi_extras adds the schema when the document is
    # first asked for instead.
    body = {"application/json": {"schema": {"$ref": f"{_SCHEMAS}ErrorBody"}}}
    return {code: {"description": text[code], "content": body} for code in codes}


def _error_body_schemas() -> dict[str, Any]:
    """ErrorBody's JSON schema and those it refers to, as OpenAPI components, written as
    FastAPI writes the document's other schemas (its OpenAPI model, None fields left out)."""
    schema = ErrorBody.model_json_schema(ref_template=_SCHEMAS + "{model}", mode="serialization")
    schemas = {"ErrorBody": schema, **schema.pop("$defs", {})}
    return {
        name: Schema.model_validate(found).model_dump(by_alias=True, exclude_none=True)
        for name, found in schemas.items()
    }


_STATUS: dict[RefusalKind, int] = {"stale": 409, "invalid": 422, "over_limit": 429}
_PATH_PARTS = ("run", "worker")


def refusal_error(refused: PushRefusedError) -> IngestError:
    """The store's refusal as the API says it: its status, and the field as the client sent it
    (``path.run``, ``path.worker`` or ``body.<field>``)."""
    where = "path" if refused.subject in _PATH_PARTS else "body"
    field = f"{where}.{refused.subject}"
    return IngestError(
        _STATUS[refused.kind], refused.kind, f"{field}: {refused.message}", field, refused.limit
    )


def _store(request: Request) -> RunStore:
    state: ExporterState = request.app.state.exporter
    return state.store


router = APIRouter(tags=["training telemetry"])

# ingest/guard.py enforces the token before the body is read; the OpenAPI document says so
# through this scheme rather than a per-request dependency, which would cost every push.
BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "the exporter's MIRRORWATCH_INGEST_TOKEN; without one configured, "
    "only loopback clients are answered",
}
_SECURED: dict[str, Any] = {"security": [{"bearer": []}]}


def publish_openapi_extras(app: FastAPI) -> None:
    """Add the bearer scheme and the error body's schema to ``app``'s OpenAPI document
    (generated once, on first ask)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            components = document.setdefault("components", {})
            schemas = components.setdefault("schemas", {})
            schemas.update(_error_body_schemas())
            components["schemas"] = dict(sorted(schemas.items()))
            components.setdefault("securitySchemes", {})["bearer"] = BEARER_SCHEME
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


@router.put(
    WORKER_PATH,
    summary="Push one worker's full cumulative training snapshot (schema 1)",
    responses=_errors(400, 401, 403, 408, 409, 413, 415, 422, 429, 431),
    openapi_extra=_SECURED,
)
async def push_snapshot(
    run: RunId, worker: WorkerIndex, snapshot: TrainingSnapshot, request: Request
) -> PushAccepted:
    # The hot path of every worker's push: `async` with lock-only work, and no sync dependency,
    # so no threadpool hop.
    try:
        outcome = _store(request).put(run, worker, snapshot)
    except PushRefusedError as refused:
        raise refusal_error(refused) from None
    return PushAccepted(run=run, worker=worker, outcome=outcome.value, sequence=snapshot.sequence)


@router.delete(
    WORKER_PATH,
    status_code=204,
    response_class=Response,
    summary="Forget a worker now (its series disappear from the next scrape)",
    responses=_errors(401, 403, 404, 413, 422),
    openapi_extra=_SECURED,
)
async def forget_worker(run: RunId, worker: WorkerIndex, request: Request) -> Response:
    if not _store(request).delete(run, worker):
        raise IngestError(
            404,
            "not_found",
            f"path.worker: worker {worker} of run {run!r} is not known "
            "(never pushed, already deleted, or expired)",
            "path.worker",
        )
    return Response(status_code=204)
