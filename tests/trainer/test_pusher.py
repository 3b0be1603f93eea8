"""The push thread: cumulative snapshots over HTTP, drops counted, never blocking for long."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from mirrorwatch.exporter.ingest.schema import StepDurations, TrainingSnapshot
from mirrorwatch.telemetry.pusher import Endpoint, Outcome, Pusher, put
from tests.trainer.recorder import recording_exporter, silent_exporter, unused_url


def body(active: bool, sequence: int, dropped: int) -> bytes:
    snapshot = TrainingSnapshot(
        schema=1,
        session="s1",
        sequence=sequence,
        active=active,
        replicas=1,
        steps_total=sequence,
        step_duration_seconds=StepDurations(bucket_counts=[0] * 14, count=0, sum_seconds=0),
        telemetry_dropped_total=dropped,
    )
    return snapshot.model_dump_json(by_alias=True, exclude_none=True).encode()


def endpoint(url: str, token: str | None = None) -> Endpoint:
    return Endpoint.parse(url, "run-1", 3, token)


def test_endpoint_is_the_contracts_worker_path() -> None:
    parsed = Endpoint.parse("http://host:9848/prefix/", "r.1", 7, None)
    assert (parsed.host, parsed.port, parsed.path) == (
        "host",
        9848,
        "/prefix/api/v1/runs/r.1/workers/7",
    )


def test_url_without_scheme_means_http() -> None:
    assert Endpoint.parse("127.0.0.1:9848", "r", 0, None).scheme == "http"


def test_url_with_another_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="url"):
        Endpoint.parse("ftp://host", "r", 0, None)


def test_put_sends_the_snapshot_with_the_bearer_token() -> None:
    with recording_exporter() as exporter:
        outcome, _ = put(endpoint(exporter.url, "s3cret"), body(True, 1, 0), timeout=2)
    assert outcome is Outcome.ACCEPTED
    [push] = exporter.pushes
    assert push.path == "/api/v1/runs/run-1/workers/3"
    assert push.authorization == "Bearer s3cret"
    assert push.snapshot.sequence == 1


def test_put_without_token_sends_no_authorization() -> None:
    with recording_exporter() as exporter:
        put(endpoint(exporter.url), body(True, 1, 0), timeout=2)
    assert exporter.pushes[0].authorization is None


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.ACCEPTED),
        (204, Outcome.ACCEPTED),
        (409, Outcome.STALE),
        (401, Outcome.REJECTED),
        (422, Outcome.REJECTED),
        (429, Outcome.REJECTED),
        (503, Outcome.UNREACHABLE),
    ],
)
def test_put_outcome_follows_the_status(status: int, outcome: Outcome) -> None:
    with recording_exporter(status=status) as exporter:
        assert put(endpoint(exporter.url), body(True, 1, 0), timeout=2)[0] is outcome


def test_put_to_a_closed_port_is_unreachable_at_once() -> None:
    started = time.monotonic()
    assert put(endpoint(unused_url()), body(True, 1, 0), timeout=2)[0] is Outcome.UNREACHABLE
    assert time.monotonic() - started < 1


def test_put_to_a_silent_exporter_gives_up_after_the_timeout() -> None:
    with silent_exporter() as url:
        started = time.monotonic()
        assert put(endpoint(url), body(True, 1, 0), timeout=0.3)[0] is Outcome.UNREACHABLE
        assert time.monotonic() - started < 1.5


def test_pusher_pushes_at_once_then_every_interval_then_a_final_inactive_one() -> None:
    with recording_exporter() as exporter:
        pusher = Pusher(endpoint(exporter.url), body, interval=0.1)
        pusher.start()
        time.sleep(0.45)
        assert pusher.stop(2.0)
    snapshots = exporter.snapshots
    assert len(snapshots) >= 3
    assert [s.sequence for s in snapshots] == list(range(1, len(snapshots) + 1))
    assert all(s.active for s in snapshots[:-1])
    assert not snapshots[-1].active
    assert pusher.final_outcome is Outcome.ACCEPTED
    assert pusher.dropped_total == 0


def test_stale_pushes_are_not_counted_as_dropped() -> None:
    with recording_exporter(status=409) as exporter:
        pusher = Pusher(endpoint(exporter.url), body, interval=0.05)
        pusher.start()
        time.sleep(0.2)
        pusher.stop(2.0)
    assert pusher.dropped_total == 0


def test_rejected_pushes_are_counted_and_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, "mirrorwatch.trainer"),
        recording_exporter(422) as exporter,
    ):
        pusher = Pusher(endpoint(exporter.url), body, interval=0.05)
        pusher.start()
        time.sleep(0.3)
        pusher.stop(2.0)
    assert pusher.dropped_total >= 3
    # The next snapshot carries the count of those given up on before it.
    assert exporter.snapshots[-1].telemetry_dropped_total == pusher.dropped_total - 1
    assert len([r for r in caplog.records if "rejected" in r.getMessage()]) == 1


def test_unreachable_exporter_is_counted_and_backed_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "mirrorwatch.trainer"):
        pusher = Pusher(endpoint(unused_url()), body, interval=0.05)
        pusher.start()
        time.sleep(0.5)
        pusher.stop(2.0)
    # Without backoff, 0.5 s at 0.05 s would be 10 tries; doubling allows about 4.
    assert 2 <= pusher.dropped_total <= 6
    assert len([r for r in caplog.records if "cannot reach" in r.getMessage()]) == 1


def test_stop_is_bounded_by_the_deadline_when_the_exporter_hangs() -> None:
    with silent_exporter() as url:
        pusher = Pusher(endpoint(url), body, interval=0.1, push_timeout=5.0)
        pusher.start()
        time.sleep(0.1)
        started = time.monotonic()
        finished = pusher.stop(0.5)
        assert time.monotonic() - started < 0.8
    assert not finished


def test_a_failing_snapshot_builder_never_kills_the_thread() -> None:
    calls = []

    def broken(active: bool, sequence: int, dropped: int) -> bytes:
        calls.append(sequence)
        if sequence == 1:
            raise ValueError("out of range")
        return body(active, sequence, dropped)

    with recording_exporter() as exporter:
        pusher = Pusher(endpoint(exporter.url), broken, interval=0.05)
        pusher.start()
        time.sleep(0.2)
        pusher.stop(2.0)
    assert pusher.dropped_total == 1
    assert exporter.snapshots[-1].telemetry_dropped_total == 1


@contextlib.contextmanager
def trickling_exporter() -> Iterator[str]:
    """Answers a byte every 0.1 s: each read succeeds, so only a total deadline ends a push."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000:
                    if stop.wait(0.1):
                        return
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        listener.close()


def test_put_is_bounded_in_all_not_per_socket_read() -> None:
    with trickling_exporter() as url:
        started = time.monotonic()
        outcome, _ = put(endpoint(url), body(True, 1, 0), timeout=0.5)
        elapsed = time.monotonic() - started
    assert outcome is Outcome.UNREACHABLE
    assert elapsed < 1.3  # each read got a byte within 0.5 s: per-read timeouts never fire
