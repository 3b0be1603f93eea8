"""ASGI middleware in front of the ingest paths: credentials, headers, path, body.

It runs before FastAPI reads or parses anything, in this order: the token (nothing else is
looked at for a client without one), the Host and Content-* headers, the run and worker as
the client spelled them (``raw_path``, before percent-decoding), then the body, read within
a deadline and only up to one byte past the limit, and checked for encoding and shape
(ingest/body.py) before the schema sees it. A refusal before the body is read closes the
connection, so an unread body is never drained. An accepted body is handed on as one message.
"""

from __future__ import annotations

import asyncio
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirrorwatch.contract.vocabulary import RUN_RULE, WORKER_RULE, is_run_id, is_worker_index
from mirrorwatch.exporter.ingest.auth import IngestAuth
from mirrorwatch.exporter.ingest.body import BodyLimits, check_and_parse
from mirrorwatch.exporter.ingest.errors import IngestError, RejectionCounter

INGEST_PATH = "/api/v1/runs"
MAX_BODY_BYTES = 1024 * 1024
_WORKER_PATH = re.compile(rb"^/api/v1/runs/([^/]+)/workers/([^/]+)$")


def is_ingest_path(path: str) -> bool:
    return path == INGEST_PATH or path.startswith(INGEST_PATH + "/")


class IngestGuard:
    """Refuses what must not reach the ingest routes, counting each refusal by reason."""

    def __init__(
        self,
        app: ASGIApp,
        auth: IngestAuth,
        rejections: RejectionCounter,
        body_limits: BodyLimits,
        body_timeout: float,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.auth = auth
        self.rejections = rejections
        self.max_body_bytes = max_body_bytes
        self.body_limits = body_limits
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ingest_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        body_read = False
        try:
            refusal = self.auth.check(scope)
            if refusal is not None:
                raise refusal
            self._check_headers(scope)
            _check_path(scope)
            body = await self._read_body(receive)
            body_read = True
            if body and scope["method"] == "PUT":  # empty: the schema says what is missing
                check_and_parse(body, self.body_limits)
        except IngestError as error:
            client = scope.get("client")
            self.rejections.refused(error, client[0] if client else None)
            await error.response(close=not body_read)(scope, receive, send)
            return
        if body is None:  # the client went away before sending its body
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_headers(self, scope: Scope) -> None:
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        # RFC 9112 section 3.2: a 400 for HTTP/1.1 without Host, or with more than one.
        if len(hosts) > 1 or (not hosts and scope.get("http_version") == "1.1"):
            raise IngestError(
                400, "invalid", "header.host: send exactly one Host header", "header.host"
            )
        headers = dict(scope["headers"])  # the last of a repeated header wins
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise IngestError(
                    400, "invalid", "header.content-length: not a number", "header.content-length"
                )
            if int(length) > self.max_body_bytes:
                raise self._too_large()
        if scope["method"] == "PUT":
            _check_content_type(headers.get(b"content-type"))

    async def _read_body(self, receive: Receive) -> bytes | None:
        try:
            async with asyncio.timeout(self.body_timeout):
                return await self._read_body_now(receive)
        except TimeoutError:
            raise IngestError(
                408,
                "timeout",
                f"body: not received within {self.body_timeout:g} s",
                "body",
            ) from None

    async def _read_body_now(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> IngestError:
        return IngestError(
            413,
            "too_large",
            f"body: over the limit of {self.max_body_bytes} bytes; a snapshot is a few KiB",
            "body",
        )


def _check_path(scope: Scope) -> None:
    """The run and worker as sent: ``%2e%2e`` is not a run and ``+1`` not a worker."""
    raw = scope.get("raw_path") or scope["path"].encode()
    match = _WORKER_PATH.match(raw.split(b"?", 1)[0])
    if match is None:
        return  # not a worker path: the router answers 404
    run, worker = (part.decode("latin-1") for part in match.groups())
    if not is_run_id(run):
        raise IngestError(422, "invalid", f"path.run: must be {RUN_RULE}", "path.run")
    if not is_worker_index(worker):
        raise IngestError(422, "invalid", f"path.worker: must be {WORKER_RULE}", "path.worker")


def _check_content_type(content_type: bytes | None) -> None:
    """``application/json`` or ``application/*+json``, with no charset but UTF-8 (RFC 8259)."""
    media, _, parameters = (content_type or b"").partition(b";")
    media = media.strip().lower()
    if not (
        media == b"application/json"
        or (media.startswith(b"application/") and media.endswith(b"+json"))
    ):
        raise IngestError(
            415,
            "unsupported_media_type",
            "header.content-type: send the snapshot as application/json",
            "header.content-type",
        )
    for parameter in parameters.split(b";"):
        name, _, value = parameter.partition(b"=")
        if name.strip().lower() == b"charset" and value.strip(b' "').lower() != b"utf-8":
            raise IngestError(
                415,
                "unsupported_media_type",
                "header.content-type: the snapshot must be UTF-8; send charset=utf-8 or none",
                "header.content-type",
            )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that yields the buffered body once, then defers to the client's (disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
