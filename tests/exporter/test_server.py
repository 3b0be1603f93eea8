"""The exporter's uvicorn server: no tick while idle, a correct Date header, a prompt exit."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest
import uvicorn

from mirrorwatch.exporter.server import QuietServer

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def hello(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


class CountingServer(QuietServer):
    ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


@contextmanager
def serving() -> Iterator[tuple[CountingServer, str, threading.Thread]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(hello, lifespan="off", log_level="warning", http="httptools")
    server = CountingServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield server, f"http://127.0.0.1:{port}", thread
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def test_idle_the_server_does_not_tick_and_the_date_header_is_current() -> None:
    with serving() as (server, url, _):
        time.sleep(1.3)  # past the second the server started in
        response = httpx.get(url)
        assert response.text == "hello"
        date = parsedate_to_datetime(response.headers["date"]).timestamp()
        assert abs(date - time.time()) < 1.5
        assert server.ticks == 0


def test_should_exit_ends_the_server_at_once() -> None:
    with serving() as (server, _, thread):
        started = time.monotonic()
        server.should_exit = True  # what uvicorn's signal handler does on SIGTERM
        thread.join(5)
        assert not thread.is_alive()
        assert time.monotonic() - started < 1.0


def test_options_that_need_uvicorns_tick_are_refused() -> None:
    with pytest.raises(ValueError, match="limit_max_requests"):
        QuietServer(uvicorn.Config(hello, limit_max_requests=10))
