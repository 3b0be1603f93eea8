"""An Alertmanager webhook receiver that keeps, and optionally prints, every notification.

It serves `make demo` and the end-to-end tests in-process, and the compose stack's `alert-log`
service as ``python -m demo.receiver --listen 0.0.0.0:9095``. It imports the standard library
and mirrorwatch's base install only (``mirrorwatch.contract.vocabulary``): the compose service
runs it with the exporter image's Python, which has that install.

Alertmanager POSTs one JSON document per notification (webhook payload version 4) to the
receiver's URL: ``/`` for the ordinary receivers and ``/watchdog`` for the dead-man's switch in
alerts/alertmanager.yml. Anything else is 404.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any

from mirrorwatch.contract.vocabulary import Address

PATHS = ("/", "/watchdog")
MAX_BODY_BYTES = 1 << 20  # Alertmanager sends a few KiB per group; this bounds a bad client.


@dataclass(frozen=True)
class Alert:
    """One alert of a notification, as Alertmanager describes it."""

    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: str
    ends_at: str

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")


@dataclass(frozen=True)
class Notification:
    """One webhook call: where it came in, when (wall clock, seconds) and what it carried."""

    path: str
    received_at: float
    payload: Mapping[str, Any]

    @property
    def status(self) -> str:
        return str(self.payload.get("status", ""))

    @property
    def receiver(self) -> str:
        return str(self.payload.get("receiver", ""))

    @property
    def alerts(self) -> list[Alert]:
        raw = self.payload.get("alerts")
        if not isinstance(raw, list):
            return []
        return [_alert(item) for item in raw if isinstance(item, dict)]


def _strings(raw: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _alert(raw: Mapping[str, Any]) -> Alert:
    return Alert(
        status=str(raw.get("status", "")),
        labels=_strings(raw.get("labels")),
        annotations=_strings(raw.get("annotations")),
        starts_at=str(raw.get("startsAt", "")),
        ends_at=str(raw.get("endsAt", "")),
    )


# Labels worth a glance in a one-line summary, in this order; the rest are in the payload.
# "host" is the host as people know it: the agent's `host` label where the alert has one
# (hosts behind agents may all be localhost:9848), else its `instance`.
SHOWN_LABELS = ("run", "gpu", "host", "scope", "link", "xid", "worker")


def _host_label(labels: Mapping[str, str]) -> str | None:
    if "host" in labels:
        return "host"
    return "instance" if "instance" in labels else None


def format_notification(
    notification: Notification,
    *,
    details: bool = False,
    runbook: Callable[[str], str] = str,
) -> str:
    """One line per alert: time, state, name, severity, the telling labels and the summary.

    With ``details``, a firing alert also gets its description and runbook link (``runbook``
    rewrites the link, e.g. to the local file), indented under it: what Alertmanager shows.
    """
    clock = time.strftime("%H:%M:%S", time.localtime(notification.received_at))
    lines = []
    for alert in notification.alerts:
        shown = (_host_label(alert.labels) if k == "host" else k for k in SHOWN_LABELS)
        labels = " ".join(f"{k}={alert.labels[k]}" for k in shown if k and k in alert.labels)
        summary = alert.annotations.get("summary", "")
        severity = alert.labels.get("severity", "")
        lines.append(
            f"{clock} [{notification.receiver or notification.path}] {alert.status.upper():8} "
            f"{alert.name} {severity} {labels}".rstrip()
            + (f" -- {summary}" if summary else "")
        )
        if details and alert.status == "firing":
            description = " ".join(alert.annotations.get("description", "").split())
            if description:
                lines.append(f"           {description}")
            if alert.annotations.get("runbook_url"):
                lines.append(f"           runbook: {runbook(alert.annotations['runbook_url'])}")
    return "\n".join(lines)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        if self.path not in PATHS:
            self._answer(HTTPStatus.NOT_FOUND, "unknown path: POST to / or /watchdog")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._answer(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
            return
        if not 0 <= length <= MAX_BODY_BYTES:
            self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body over 1 MiB")
            return
        try:
            payload = json.loads(self.rfile.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self._answer(HTTPStatus.BAD_REQUEST, "body is not JSON")
            return
        if not isinstance(payload, dict):
            self._answer(HTTPStatus.BAD_REQUEST, "body is not a JSON object")
            return
        self.server.receiver.record(Notification(self.path, time.time(), payload))
        self._answer(HTTPStatus.OK, "ok")

    def do_GET(self) -> None:
        # A liveness answer, so that something can check the receiver is up.
        self._answer(
            HTTPStatus.OK, "mirrorwatch alert receiver: POST notifications to / or /watchdog"
        )

    def _answer(self, status: HTTPStatus, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: each notification is reported once, by the receiver, not per request."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], receiver: Receiver) -> None:
        self.receiver = receiver
        super().__init__(address, _Handler)


class Receiver:
    """The webhook server on a thread; a context manager that always closes its port.

    ``on_notification`` is called on the server's thread for each notification as it arrives.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9095,
        on_notification: Callable[[Notification], None] | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._on_notification = on_notification
        self._notifications: list[Notification] = []
        self._changed = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, with the port the server really got (port 0 picks a free one)."""
        port = self._server.server_address[1] if self._server else self._port
        return f"http://{self._host}:{port}"

    def start(self) -> Receiver:
        self._server = _Server((self._host, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="alert-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def record(self, notification: Notification) -> None:
        with self._changed:
            self._notifications.append(notification)
            self._changed.notify_all()
        if self._on_notification is not None:
            self._on_notification(notification)

    def notifications(self) -> list[Notification]:
        with self._changed:
            return list(self._notifications)

    def wait_for(
        self, matches: Callable[[Notification, Alert], bool], timeout: float
    ) -> tuple[Notification, Alert] | None:
        """The first notification and alert (in arrival order) that match, waiting up to
        ``timeout`` seconds for one to arrive; None when none did."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for notification in self._notifications[seen:]:
                    for alert in notification.alerts:
                        if matches(notification, alert):
                            return notification, alert
                seen = len(self._notifications)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)


def address_argument(text: str) -> Address:
    """An argparse ``type`` for HOST:PORT (also demo/cli.py's)."""
    try:
        return Address.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m demo.receiver``: print every notification until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m demo.receiver", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--listen", type=address_argument, default=Address("127.0.0.1", 9095), metavar="HOST:PORT"
    )
    args = parser.parse_args(argv)
    host, port = args.listen.host, args.listen.port

    def show(notification: Notification) -> None:
        print(format_notification(notification), flush=True)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        receiver = Receiver(host, port, on_notification=show).start()
    except OSError as error:
        print(f"alert receiver: cannot listen on {host}:{port}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"alert receiver: listening on {receiver.url} (/ and /watchdog)", flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
