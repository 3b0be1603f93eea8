"""ASGI middleware in front of the ingest paths: credentials, content type and body size.

It runs before FastAPI reads or parses anything, so an unauthenticated client cannot make the
exporter read a body, and no body over the limit is ever held whole: a declared
Content-Length over the limit is refused at once, and a chunked body is read only up to one
byte past the limit. An accepted body is handed on to the app as one message.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirrorwatch.exporter.ingest.auth import IngestAuth
from mirrorwatch.exporter.ingest.errors import IngestError, RejectionCounter

INGEST_PATH = "/api/v1/runs"
MAX_BODY_BYTES = 1024 * 1024


def is_ingest_path(path: str) -> bool:
    return path == INGEST_PATH or path.startswith(INGEST_PATH + "/")


class IngestGuard:
    """Refuses what must not reach the ingest routes, counting each refusal by reason."""

    def __init__(
        self,
        app: ASGIApp,
        auth: IngestAuth,
        rejections: RejectionCounter,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.auth = auth
        self.rejections = rejections
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ingest_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            refusal = self.auth.check(scope)
            if refusal is not None:
                raise refusal
            self._check_headers(scope)
            body = await self._read_body(receive)
        except IngestError as error:
            self.rejections.add(error.reason)
            await error.response()(scope, receive, send)
            return
        if body is None:  # the client went away before sending its body
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_headers(self, scope: Scope) -> None:
        headers = dict(scope["headers"])  # the last of a repeated header wins
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise IngestError(
                    400, "invalid", "header.content-length: not a number", "header.content-length"
                )
            if int(length) > self.max_body_bytes:
                raise self._too_large()
        if scope["method"] == "PUT" and not _is_json(headers.get(b"content-type")):
            raise IngestError(
                415,
                "unsupported_media_type",
                "header.content-type: send the snapshot as application/json",
                "header.content-type",
            )

    async def _read_body(self, receive: Receive) -> bytes | None:
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


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
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
