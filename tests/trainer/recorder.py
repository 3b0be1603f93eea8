"""Loopback stand-ins for the exporter: one that records PUTs, one that never answers."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mirrorwatch.exporter.ingest.schema import TrainingSnapshot


@dataclass
class Push:
    path: str
    authorization: str | None
    snapshot: TrainingSnapshot


@dataclass
class Recorder:
    """Records every PUT, checked against schema 1; answers ``status`` (200 unless told)."""

    url: str = ""
    status: int = 200
    pushes: list[Push] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    @property
    def snapshots(self) -> list[TrainingSnapshot]:
        return [push.snapshot for push in self.pushes]


class _Server(ThreadingHTTPServer):
    """socketserver's listen backlog is 5: a callback pushing every 50 ms on a loaded machine
    fills it before the accept loop runs, and Linux then resets the connections it cannot
    queue (ConnectionResetError in the pusher's warning). uvicorn, the exporter's server,
    listens with a backlog of 2048."""

    request_queue_size = 128
    daemon_threads = True


@contextmanager
def recording_exporter(status: int = 200) -> Iterator[Recorder]:
    recorder = Recorder(status=status)

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                snapshot = TrainingSnapshot.model_validate_json(body)
            except ValueError as error:
                recorder.invalid.append(str(error))
            else:
                push = Push(self.path, self.headers.get("Authorization"), snapshot)
                recorder.pushes.append(push)
            reply = json.dumps({"error": "test"}).encode() if recorder.status >= 300 else b"{}"
            self.send_response(recorder.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_exporter() -> Iterator[str]:
    """A socket that accepts connections and never replies: an exporter that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for connection in held:
            connection.close()
        listener.close()


def unused_url() -> str:
    """The URL of a loopback port nothing listens on: an exporter that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"
