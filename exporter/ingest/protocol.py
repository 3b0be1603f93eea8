"""The HTTP protocol the exporter serves with: uvicorn's httptools one, bounded before any app.

uvicorn's httptools protocol (``uvicorn/protocols/http/httptools_impl.py``) feeds every byte to
the parser, which keeps a header it is still receiving in its own buffer however long it
grows, and it starts no timer until a first response is sent: one request with a 32 MiB
header is read whole, and a client that sends its head a byte at a time holds a connection
for ever. (Its h11 protocol bounds the head at ``h11_max_incomplete_event_size``, 16 KiB by
default, but parses in Python, and has no head timer either.) This subclass adds the two
bounds at the byte level, before the parser or the app sees anything:

- at most ``max_head_bytes`` of request line and headers: beyond that, ``431`` and close;
- the head complete within ``head_timeout`` seconds of the connection opening or of the
  request's first byte: otherwise ``408`` and close.

Both answers are JSON like every other refusal and logged at a bounded rate; so are heads the
parser cannot read (``400``, ``malformed_http``), where uvicorn would log each one. Each is
counted in ``mirrorwatch_exporter_ingest_rejected_total`` only when the request is known to be
for the ingest API: its target, as far as it arrived, is under ``/api/v1/runs``. A scrape or
any other request refused here, or a head refused before its path arrived, is no ingest
refusal (docs/api.md, Limits).
"""

from __future__ import annotations

import asyncio
import http
import json
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mirrorwatch.exporter.ingest.errors import IngestError, Reason, RejectionCounter
from mirrorwatch.exporter.ingest.guard import is_ingest_path


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size and a time bound on each request head."""

    # Set by bounded_protocol from the settings (their one home); declared only here.
    max_head_bytes: int
    head_timeout: float
    rejections: RejectionCounter | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_bytes = 0
        self._awaiting_head = True
        self._head_timer: asyncio.TimerHandle | None = None
        self._target = b""  # the request target of the head being read, as far as it arrived
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._awaiting_head:
            self._feed(data)
            return
        if self._head_timer is None:  # the first byte of the next request on this connection
            self._arm_head_timer()
        room = self.max_head_bytes - self._head_bytes
        head, rest = data[:room], data[room:]
        self._head_bytes += len(head)
        self._feed(head)
        if not rest or self.transport.is_closing():
            return
        if not self._head_complete():
            self._refuse(
                431,
                "headers_too_large",
                f"header: request line and headers over {self.max_head_bytes} bytes",
            )
            return
        self._feed(rest)  # the body, or a pipelined request after it

    def _head_complete(self) -> bool:
        return not self._awaiting_head

    def _feed(self, data: bytes) -> None:
        # uvicorn's data_received, but a head the parser cannot read is counted and its log
        # line rate-limited instead of a warning for each.
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._refuse(400, "malformed_http", "request: not a valid HTTP/1.1 request")
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def on_url(self, url: bytes) -> None:
        self._target += url  # bounded: part of the head, at most max_head_bytes
        super().on_url(url)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # The next bytes are the next request's head; its timer starts with its first byte
        # (until then, uvicorn's keep-alive timeout applies).
        self._awaiting_head = True
        self._head_bytes = 0
        self._target = b""

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._awaiting_head or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response is still being written: no second one
            return
        self._refuse(
            408,
            "timeout",
            f"request: line and headers not received within {self.head_timeout:g} s",
        )

    def _refuse(self, status: int, reason: Reason, message: str) -> None:
        self._awaiting_head = False
        self._cancel_head_timer()
        error = IngestError(status, reason, message, message.split(":", 1)[0])
        if self.rejections is not None:
            client = self.client[0] if self.client else None
            self.rejections.refused(error, client, counted=self._for_ingest())
        self.transport.write(raw_response(status, error.body()))
        self.transport.close()

    def _for_ingest(self) -> bool:
        """Whether the refused request is known to be for the ingest API (origin-form target)."""
        path = self._target.split(b"?", 1)[0]
        return is_ingest_path(path.decode("latin-1"))


def raw_response(status: int, body: dict[str, Any]) -> bytes:
    """A complete HTTP/1.1 response with a JSON body that closes the connection."""
    content = json.dumps(body).encode()
    phrase = http.HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(content)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + content


def bounded_protocol(
    max_head_bytes: int, head_timeout: float, rejections: RejectionCounter
) -> type[BoundedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http=``, with these bounds and this counter."""
    return type(
        "BoundedHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {
            "max_head_bytes": max_head_bytes,
            "head_timeout": head_timeout,
            "rejections": rejections,
        },
    )
