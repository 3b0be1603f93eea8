"""What the ingest API refuses: the reasons, the error raised for one, and the count of each."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Literal, get_args

from starlette.responses import JSONResponse

from mirrorwatch.exporter.logs import RejectionLog

Reason = Literal[
    "malformed_json",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "too_large",
    "unsupported_media_type",
    "invalid",
    "stale",
    "over_limit",
    "headers_too_large",
    "timeout",
    "malformed_http",
]
REASONS: tuple[Reason, ...] = get_args(Reason)


class IngestError(Exception):
    """A push or delete the ingest API refuses; ``message`` is one sentence naming the field."""

    def __init__(
        self,
        status: int,
        reason: Reason,
        message: str,
        field: str | None = None,
        limit: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.field = field
        self.limit = limit  # the setting a 429 is over, e.g. max_workers_per_run
        # Further problems of the same request, as {"field", "message"}; first one included.
        self.details: list[dict[str, str]] = []

    def body(self) -> dict[str, object]:
        """``{"error": ..., "reason": ..., "field": ..., "limit": ..., "errors": [...]}``."""
        body: dict[str, object] = {"error": self.message, "reason": self.reason}
        if self.field is not None:
            body["field"] = self.field
        if self.limit is not None:
            body["limit"] = self.limit
        if self.details:
            body["errors"] = self.details
        return body

    def response(self, close: bool = False) -> JSONResponse:
        """The JSON answer; ``close`` ends the connection after it (a body left unread)."""
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}
        if close:
            headers["Connection"] = "close"
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


class RejectionCounter:
    """Thread-safe running count of rejections by reason, every reason present from 0."""

    def __init__(self, log: RejectionLog | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Reason, int] = dict.fromkeys(REASONS, 0)
        self._log = log

    def add(
        self, reason: Reason, status: int = 0, client: str | None = None, limit: str | None = None
    ) -> None:
        """Count one refusal, and log it unless this reason was logged moments ago."""
        with self._lock:
            self._counts[reason] += 1
        if self._log is not None:
            self._log.refused(reason, status, client, limit)

    def refused(self, error: IngestError, client: str | None, *, counted: bool = True) -> None:
        """Count ``error``, answered to ``client``; only log it where ``counted`` is false (a
        connection-level refusal of a request that is not for the ingest API)."""
        if counted:
            self.add(error.reason, error.status, client, error.limit)
        elif self._log is not None:
            self._log.refused(error.reason, error.status, client, error.limit)

    def counts(self) -> Mapping[Reason, int]:
        with self._lock:
            return dict(self._counts)
