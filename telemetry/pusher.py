"""The daemon thread that PUTs snapshots to the exporter: off the training thread, never raising.

Every ``interval`` seconds it builds a full cumulative snapshot and PUTs it with a short
timeout. A failed push is given up on (the next snapshot carries everything anyway) and counted
in ``telemetry_dropped_total``; connection failures back off exponentially. At the end one
final snapshot goes out within the deadline the caller gives, and a process that ends without
one (an exception through the fit, which calls no ``on_train_end``; a script that never calls
``close()``) sends it on its way out: see :func:`stop_all`.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import logging
import multiprocessing.util
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

# The Keras callback's logger; the torch monitor passes its own.
log = logging.getLogger("mirrorwatch.trainer")

MAX_BACKOFF_SECONDS = 60.0
PUSH_TIMEOUT_SECONDS = 2.0
# All the end of training, or of the process, may wait for the last snapshots: connect, send
# and answer together, for every pusher of the process at once.
FINAL_PUSH_DEADLINE_SECONDS = 1.0


class Outcome(Enum):
    ACCEPTED = "accepted"
    STALE = "stale"  # 409: the exporter already has a newer snapshot of this session
    REJECTED = "rejected"  # any other 4xx: this snapshot will never be accepted
    UNREACHABLE = "unreachable"  # connection refused, timeout, 5xx: try again later


# Where telemetry goes when neither the caller nor MIRRORWATCH_URL says: the exporter's port.
DEFAULT_URL = "http://127.0.0.1:9848"


@dataclass(frozen=True)
class Endpoint:
    """Where one worker's snapshots go: ``PUT {url}/api/v1/runs/{run}/workers/{worker}``."""

    scheme: str
    host: str
    port: int | None
    path: str
    token: str | None

    @classmethod
    def parse(cls, url: str, run: str, worker: int, token: str | None) -> Endpoint:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http://host:port or https://host:port, got {url!r}")
        path = f"{parts.path.rstrip('/')}/api/v1/runs/{run}/workers/{worker}"
        return cls(parts.scheme, parts.hostname, parts.port, path, token or None)

    @property
    def url(self) -> str:
        """The exporter's address as a user would write it: ``https://host:9848``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" + (f":{self.port}" if self.port is not None else "")


def put(endpoint: Endpoint, body: bytes, timeout: float) -> tuple[Outcome, str]:
    """One PUT, all of it (connect, send, wait for the answer) within ``timeout`` seconds.

    http.client's timeout bounds each socket operation, not their sum: an exporter that
    answers a byte at a time would hold the push for ever. A timer shuts the socket down when
    the time is up, which ends whatever read or write is waiting.
    """
    connection: http.client.HTTPConnection
    if endpoint.scheme == "https":
        # The system's CAs, or the file in SSL_CERT_FILE (OpenSSL reads it on each call).
        context = ssl.create_default_context()
        connection = http.client.HTTPSConnection(
            endpoint.host, endpoint.port, timeout=timeout, context=context
        )
    else:
        connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    headers = {"Content-Type": "application/json", "Connection": "close"}
    if endpoint.token:
        headers["Authorization"] = f"Bearer {endpoint.token}"
    watchdog = threading.Timer(timeout, _shut_down, [connection])
    watchdog.daemon = True
    # Python 3.12 starts no thread once the interpreter is finalizing (the push at exit): each
    # socket operation's own timeout bounds it then, and stop()'s join bounds the wait.
    with contextlib.suppress(RuntimeError):
        watchdog.start()
    try:
        connection.request("PUT", endpoint.path, body=body, headers=headers)
        response = connection.getresponse()
        detail = response.read(4096).decode("utf-8", "replace")
    except ssl.SSLCertVerificationError as error:
        return Outcome.UNREACHABLE, (
            f"its certificate does not verify: {error.verify_message}; "
            "set SSL_CERT_FILE to the CA that signed it"
        )
    except (OSError, http.client.HTTPException, ssl.SSLError) as error:
        return Outcome.UNREACHABLE, f"{type(error).__name__}: {error}"
    finally:
        watchdog.cancel()
        connection.close()
    status = response.status
    if 200 <= status < 300:
        return Outcome.ACCEPTED, ""
    if status == 409:
        return Outcome.STALE, detail
    if 400 <= status < 500:
        return Outcome.REJECTED, f"HTTP {status}: {detail}"
    return Outcome.UNREACHABLE, f"HTTP {status}: {detail}"


def _shut_down(connection: http.client.HTTPConnection) -> None:
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed: the push ended on its own
            sock.shutdown(socket.SHUT_RDWR)


# Builds the body of push number `sequence`, given `dropped` pushes given up on so far.
BuildBody = Callable[[bool, int, int], bytes]


class Pusher:
    """Owns the push thread, the sequence number and the count of pushes given up on."""

    def __init__(
        self,
        endpoint: Endpoint,
        build_body: BuildBody,
        interval: float,
        prepare: Callable[[], None] | None = None,
        push_timeout: float | None = None,
        log: logging.Logger = log,
    ) -> None:
        self._log = log
        self._endpoint = endpoint
        self._build_body = build_body
        self._interval = interval
        self._prepare = prepare
        # A push should not outlast the interval: at most 2 s, at least 0.5 s for slow links.
        self._push_timeout = push_timeout or min(PUSH_TIMEOUT_SECONDS, max(0.5, interval))
        self._stop = threading.Event()
        self._final_deadline = 0.0
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        self.sequence = 0
        self.dropped_total = 0
        self.accepted_total = 0
        self.final_outcome: Outcome | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="mirrorwatch-pusher", daemon=True)
        _started(self)
        self._thread.start()

    def stop(self, deadline_seconds: float) -> bool:
        """Ask for the final snapshot and wait at most ``deadline_seconds``; True if it finished."""
        deadline = time.monotonic() + deadline_seconds
        self.request_stop(deadline)
        return self.join(deadline)

    def request_stop(self, deadline: float) -> None:
        """Ask for the final snapshot, to be sent by ``deadline`` (``time.monotonic()``)."""
        if self._thread is not None:
            self._final_deadline = deadline
            self._stop.set()

    def join(self, deadline: float) -> bool:
        """Wait for the final snapshot until ``deadline`` at most; True if it finished."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(max(0.0, deadline - time.monotonic()))
        self._thread = None
        _stopped(self)
        return not thread.is_alive()

    def _run(self) -> None:
        try:
            if self._prepare is not None:
                try:
                    self._prepare()
                except Exception as error:  # the pushes go on without what it would add
                    self._warn_once("prepare", f"mirrorwatch: cannot map replicas: {error!r}")
            failures = 0
            delay = 0.0  # the first snapshot goes out at once: the exporter learns of the run
            while not self._stop.wait(delay):
                outcome = self._push(active=True, timeout=self._push_timeout)
                failures = failures + 1 if outcome is Outcome.UNREACHABLE else 0
                delay = self._interval
                if failures:
                    backoff = min(self._interval * 2 ** (failures - 1), MAX_BACKOFF_SECONDS)
                    delay = max(self._interval, backoff) * random.uniform(0.9, 1.1)
            remaining = self._final_deadline - time.monotonic()
            if remaining > 0.05:
                self.final_outcome = self._push(active=False, timeout=remaining)
        except Exception as error:  # never let telemetry take anything down; say so once
            self._warn_once("crash", f"mirrorwatch: telemetry stopped: {error!r}")

    def _push(self, active: bool, timeout: float) -> Outcome:
        self.sequence += 1
        try:
            body = self._build_body(active, self.sequence, self.dropped_total)
        except Exception as error:  # e.g. a value outside the schema: skip this one, say so
            self.dropped_total += 1
            self._warn_once("build", f"mirrorwatch: cannot build a snapshot: {error!r}")
            return Outcome.REJECTED
        try:
            outcome, reason = put(self._endpoint, body, timeout)
        except (ValueError, socket.gaierror) as error:  # a malformed host or port
            outcome, reason = Outcome.UNREACHABLE, repr(error)
        if outcome is Outcome.ACCEPTED:
            self.accepted_total += 1
        elif outcome is Outcome.REJECTED:
            self.dropped_total += 1
            self._warn_once("rejected", f"mirrorwatch: the exporter rejected a snapshot: {reason}")
        elif outcome is Outcome.UNREACHABLE:
            self.dropped_total += 1
            self._warn_once(
                "unreachable",
                f"mirrorwatch: cannot reach the exporter at {self._endpoint.url} ({reason}); "
                "training goes on, telemetry retries",
            )
        return outcome

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            self._log.warning(message)


# -- the pushes at process exit ------------------------------------------------------------

_running: set[Pusher] = set()
_running_lock = threading.Lock()
_exit_hooked_in: int | None = None  # the process whose exit sends the final snapshots


def _started(pusher: Pusher) -> None:
    global _exit_hooked_in
    with _running_lock:
        _running.add(pusher)
        if _exit_hooked_in == os.getpid():
            return
        _exit_hooked_in = os.getpid()
    # Registered at the first start, after the framework has set up: atexit runs the last
    # registered first, so the snapshots go out before TensorFlow or torch tear down. A process
    # that multiprocessing forked ends in os._exit without atexit; its finalizers still run.
    atexit.register(stop_all)
    multiprocessing.util.Finalize(None, stop_all, exitpriority=100)


def _stopped(pusher: Pusher) -> None:
    with _running_lock:
        _running.discard(pusher)


def _forget_the_parents_pushers() -> None:
    # A forked child has none of the parent's threads, and their locks may be held for ever.
    global _running, _running_lock, _exit_hooked_in
    _running, _running_lock, _exit_hooked_in = set(), threading.Lock(), None


os.register_at_fork(after_in_child=_forget_the_parents_pushers)


def stop_all(deadline_seconds: float = FINAL_PUSH_DEADLINE_SECONDS) -> None:
    """Send every running pusher's final snapshot (marked inactive), all within
    ``deadline_seconds``: the process is ending without the front end's ``on_train_end`` or
    ``close()``. Never raises, and adds at most ``deadline_seconds`` to the exit."""
    try:
        with _running_lock:
            pushers = list(_running)
        deadline = time.monotonic() + deadline_seconds
        for pusher in pushers:
            pusher.request_stop(deadline)
        for pusher in pushers:
            if not pusher.join(deadline):
                pusher._warn_once("exit", "mirrorwatch: the final snapshot did not go out at exit")
    except Exception:  # nothing at exit may raise; the exporter's TTL still ends the run
        pass
