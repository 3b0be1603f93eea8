"""uvicorn's server without its 10 Hz tick: idle, the event loop sleeps until a request or exit.

uvicorn's ``Server.main_loop`` (uvicorn/server.py, 0.54) wakes every 0.1 s to refresh the
``Date`` header once a second and to check ``should_exit``; idle, that tick is most of the
exporter's CPU. Here ``main_loop`` awaits an event that setting ``should_exit`` (the signal
handler, ``handle_exit``, does) fires, and the ``Date`` header is made when a request asks for
the default headers (``httptools_impl`` reads ``server_state.default_headers`` once per
request), so it is still correct to the second. The tick's other jobs are options the exporter
never sets: ``limit_max_requests`` and ``callback_notify`` (refused here, so they cannot be
set by mistake and silently ignored).

Over TLS its ``startup`` also bounds the handshake: uvicorn leaves asyncio's 60 s default, so
a client that opens TLS and stalls would hold a connection a minute before the head timer
(ingest/protocol.py), which starts after the handshake, could see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from email.utils import formatdate

import uvicorn
from uvicorn.server import ServerState

STARTUP_FAILURE = 3  # uvicorn.server's exit code when the lifespan fails to start


class _OnDemandDateState(ServerState):
    """``default_headers`` with a ``Date`` made when asked, at most once per second."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._config = config
        self._second = -1
        self._headers: list[tuple[bytes, bytes]] = []
        super().__init__()

    @property
    def default_headers(self) -> list[tuple[bytes, bytes]]:
        now = time.time()
        second = int(now)
        if second != self._second:
            date = [(b"date", formatdate(now, usegmt=True).encode())]
            headers = date if self._config.date_header else []
            self._headers = headers + self._config.encoded_headers
            self._second = second
        return self._headers

    @default_headers.setter
    def default_headers(self, value: list[tuple[bytes, bytes]]) -> None:
        # uvicorn assigns its own (date-stamped) copy; the getter makes a fresh one instead.
        del value


class QuietServer(uvicorn.Server):
    """A ``uvicorn.Server`` that does nothing between requests until told to exit."""

    def __init__(self, config: uvicorn.Config, ssl_handshake_timeout: float | None = None) -> None:
        self._handshake_timeout = ssl_handshake_timeout
        if config.limit_max_requests is not None or config.callback_notify is not None:
            raise ValueError("QuietServer has no tick for limit_max_requests or callback_notify")
        self._exit: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._should_exit = False
        super().__init__(config)
        self.server_state = _OnDemandDateState(config)

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        loop, event = self._loop, self._exit
        if value and loop is not None and event is not None and not loop.is_closed():
            # From the signal handler or another thread: only call_soon_threadsafe is safe.
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing waits
                loop.call_soon_threadsafe(event.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit = asyncio.Event()
        if not self._should_exit:
            await self._exit.wait()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if self._handshake_timeout is None or config.ssl is None or sockets is None:
            await super().startup(sockets)
            return
        # uvicorn's startup for sockets it is given (uvicorn/server.py, 0.55), the handshake
        # bounded: asyncio and uvloop both take ssl_handshake_timeout in create_server.
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )

        loop = asyncio.get_running_loop()
        self.servers = [
            await loop.create_server(
                create_protocol,
                sock=sock,
                ssl=config.ssl,
                backlog=config.backlog,
                ssl_handshake_timeout=self._handshake_timeout,
            )
            for sock in sockets
        ]
        self.started = True
