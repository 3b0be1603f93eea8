"""demo/receiver.py: keeps and prints Alertmanager's webhook notifications."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from demo.receiver import Notification, Receiver, format_notification
from demo.stack import REPO
from tests.hang import HANG_SECONDS
from tests.ports import free_port

PAYLOAD = {
    "version": "4",
    "status": "firing",
    "receiver": "default",
    "groupLabels": {"alertname": "GpuUtilizationImbalance"},
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "GpuUtilizationImbalance",
                "severity": "warning",
                "run": "resnet-a",
                "gpu": "1",
                "instance": "gpu-host:9848",
            },
            "annotations": {"summary": "GPU utilisation imbalance in run resnet-a"},
            "startsAt": "2026-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
        }
    ],
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver("127.0.0.1", 0) as running:
        yield running


def test_receiver_keeps_each_notification_with_its_path(receiver: Receiver) -> None:
    for path in ("/", "/watchdog"):
        response = httpx.post(receiver.url + path, json=PAYLOAD, timeout=5)
        assert response.status_code == 200
    notifications = receiver.notifications()
    assert [n.path for n in notifications] == ["/", "/watchdog"]
    assert notifications[0].alerts[0].labels["run"] == "resnet-a"


def test_receiver_refuses_other_paths_and_bodies_that_are_not_json(receiver: Receiver) -> None:
    assert httpx.post(receiver.url + "/elsewhere", json=PAYLOAD, timeout=5).status_code == 404
    assert httpx.post(receiver.url + "/", content=b"{", timeout=5).status_code == 400
    assert httpx.post(receiver.url + "/", json=[1], timeout=5).status_code == 400
    assert receiver.notifications() == []


def test_wait_for_returns_the_first_matching_alert(receiver: Receiver) -> None:
    httpx.post(receiver.url + "/", json=PAYLOAD, timeout=5)
    found = receiver.wait_for(lambda n, a: a.labels.get("gpu") == "1", timeout=5)
    assert found is not None
    assert found[1].name == "GpuUtilizationImbalance"
    assert receiver.wait_for(lambda n, a: a.name == "Other", timeout=0.2) is None


def test_stop_frees_the_port() -> None:
    port = free_port()
    with Receiver("127.0.0.1", port):
        pass
    with Receiver("127.0.0.1", port) as again:
        assert again.url.endswith(f":{port}")


def test_format_shows_state_name_severity_labels_and_summary() -> None:
    line = format_notification(Notification("/", time.time(), PAYLOAD))
    assert "FIRING" in line
    assert "GpuUtilizationImbalance warning run=resnet-a gpu=1 instance=gpu-host:9848" in line
    assert line.endswith("-- GPU utilisation imbalance in run resnet-a")


def test_format_names_the_host_behind_an_agent_not_its_shared_instance() -> None:
    alert = PAYLOAD["alerts"][0]  # type: ignore[index]
    labels = {**alert["labels"], "instance": "localhost:9848", "host": "gpu-b"}
    payload = {**PAYLOAD, "alerts": [{**alert, "labels": labels}]}
    line = format_notification(Notification("/", time.time(), payload))
    assert "run=resnet-a gpu=1 host=gpu-b --" in line
    assert "localhost:9848" not in line


def test_the_module_needs_only_the_standard_library_and_mirrorwatch() -> None:
    """What the exporter image's Python has for the compose alert-log service: the standard
    library and the mirrorwatch base install, nothing of the test or demo tooling (private
    names such as __main__ and setuptools' _distutils_hack are the interpreter's own)."""
    program = (
        "import sys, demo.receiver\n"
        "names = {m.split('.')[0] for m in sys.modules if not m.startswith('_')}\n"
        "print(sorted(names - set(sys.stdlib_module_names)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=True,
    )
    assert result.stdout.strip() == "['demo', 'mirrorwatch']"


def test_module_prints_notifications() -> None:
    """As the compose alert-log service runs it: ``python -m demo.receiver`` from a checkout."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "demo.receiver", "--listen", f"127.0.0.1:{port}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_SECONDS
        while True:
            try:
                response = httpx.post(f"http://127.0.0.1:{port}/", json=PAYLOAD, timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the receiver did not start"
                time.sleep(0.1)
        assert response.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=15)
    assert process.returncode == 0, err
    assert "listening on http://127.0.0.1:" in out
    assert "FIRING   GpuUtilizationImbalance warning run=resnet-a" in out
