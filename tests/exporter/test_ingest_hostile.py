"""Hostile and broken requests to the ingest API: the contract's 4xx, a JSON error naming the
field, the rejection counted by reason, and the exporter still accepting the next valid push."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from pydantic import SecretStr

from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.settings import Settings
from tests.exporter.ingest_snapshots import labels, parse_series, snapshot_body
from tests.exporter.static_gpu import StaticBackend, StaticGpu

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json", **AUTH}
URL = "/api/v1/runs/r1/workers/0"
MIB = 1024 * 1024


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = Settings(ingest_token=SecretStr(TOKEN), max_runs=2, max_workers=3, max_replicas=4)
    with TestClient(create_app(settings, StaticBackend([StaticGpu()]))) as client:
        yield client


def rejected(client: TestClient, reason: str) -> float:
    series = parse_series(client.get("/metrics").text)
    return series["mirrorwatch_exporter_ingest_rejected_total"][labels(reason=reason)]


REASON = {
    400: "malformed_json",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "over_limit",
}


def nan_body(field: str, literal: str) -> str:
    return json.dumps(snapshot_body(**{field: 0.5})).replace("0.5", literal)


def chunks(total: int) -> Iterator[bytes]:
    for _ in range(total // 65536):
        yield b" " * 65536


# id: (raw body, status, how the error sentence starts)
BODIES: dict[str, tuple[str | bytes, int, str]] = {
    "truncated JSON": ('{"schema": 1,', 400, "body: not valid JSON"),
    "not JSON": ("hello", 400, "body: not valid JSON"),
    "deep arrays": ("[" * 100_000, 400, "body: nested deeper than 8 levels"),
    "deep objects": ('{"a":' * 100_000, 400, "body: nested deeper than 8 levels"),
    "5000-digit integer": ('{"steps_total": ' + "9" * 5000 + "}", 400, "body: could not"),
    "empty": ("", 422, "body: Field required"),
    "an array": ("[]", 422, "body: Input should be a valid dictionary"),
    "NaN": (nan_body("loss", "NaN"), 422, "body.loss: Input should be a finite number"),
    "Infinity": (
        nan_body("examples_per_second", "Infinity"),
        422,
        "body.examples_per_second: Input should be a finite number",
    ),
    "1e400": (nan_body("loss", "1e400"), 422, "body.loss: Input should be a finite number"),
    "2 MiB": (b" " * 2 * MIB, 413, "body: over the limit of 1048576 bytes"),
}

# id: (fields changed in a valid snapshot, status, how the error sentence starts)
FIELDS: dict[str, tuple[dict[str, Any], int, str]] = {
    "wrong type": ({"steps_total": "many"}, 422, "body.steps_total: Input should be a valid int"),
    "negative counter": ({"steps_total": -1}, 422, "body.steps_total: Input should be greater"),
    "unknown field": ({"lossy": 0.1}, 422, "body.lossy: Extra inputs are not permitted"),
    "schema 2": ({"schema": 2}, 422, "body.schema: Input should be 1"),
    "bad bus id": (
        {"replica_devices": [{"replica": 0, "device": "x", "pci_bus_id": "1b:00"}]},
        422,
        "body.replica_devices[0].pci_bus_id: String should match pattern",
    ),
    "too many replicas": ({"replicas": 5}, 429, "body.replicas: 5 replicas is over"),
}

# id: (path, status, how the error sentence starts)
PATHS: dict[str, tuple[str, int, str]] = {
    "run with a space": ("/api/v1/runs/a%20b/workers/0", 422, "path.run: must be 1 to 64"),
    "run of 65 chars": (f"/api/v1/runs/{'r' * 65}/workers/0", 422, "path.run: must be 1 to"),
    "run in unicode": ("/api/v1/runs/r%C3%BCn/workers/0", 422, "path.run: must be 1 to 64"),
    "empty run": ("/api/v1/runs//workers/0", 404, "path: no such endpoint"),
    "worker 1024": ("/api/v1/runs/r1/workers/1024", 422, "path.worker: must be decimal digits"),
    "worker -1": ("/api/v1/runs/r1/workers/-1", 422, "path.worker: must be decimal digits"),
    "worker x": ("/api/v1/runs/r1/workers/x", 422, "path.worker: must be decimal digits"),
}


def refused_and_recovered(client: TestClient, response: Response, status: int, error: str) -> None:
    """The 4xx with its JSON sentence, counted once by reason, and a valid push right after."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["reason"] == REASON[status]
    assert body["error"].startswith(error), body["error"]
    assert rejected(client, REASON[status]) == 1
    assert client.put(URL, json=snapshot_body(), headers=AUTH).status_code == 200


@pytest.mark.parametrize(("body", "status", "error"), BODIES.values(), ids=BODIES.keys())
def test_a_hostile_body_is_refused(
    client: TestClient, body: str | bytes, status: int, error: str
) -> None:
    response = client.put(URL, content=body, headers=JSON)
    refused_and_recovered(client, response, status, error)


@pytest.mark.parametrize(("changes", "status", "error"), FIELDS.values(), ids=FIELDS.keys())
def test_a_bad_field_is_refused_by_name(
    client: TestClient, changes: dict[str, Any], status: int, error: str
) -> None:
    response = client.put(URL, json=snapshot_body(**changes), headers=AUTH)
    refused_and_recovered(client, response, status, error)


@pytest.mark.parametrize(("path", "status", "error"), PATHS.values(), ids=PATHS.keys())
def test_a_bad_run_or_worker_is_refused_by_name(
    client: TestClient, path: str, status: int, error: str
) -> None:
    response = client.put(path, json=snapshot_body(), headers=AUTH)
    refused_and_recovered(client, response, status, error)


def test_a_2_mib_chunked_body_is_cut_off_at_the_limit(client: TestClient) -> None:
    response = client.put(URL, content=chunks(2 * MIB), headers=JSON)
    refused_and_recovered(client, response, 413, "body: over the limit")


def test_a_body_that_is_not_json_is_415(client: TestClient) -> None:
    headers = {**AUTH, "Content-Type": "text/plain"}
    response = client.put(URL, content=json.dumps(snapshot_body()), headers=headers)
    refused_and_recovered(client, response, 415, "header.content-type: send the snapshot as")


def test_other_methods_are_405(client: TestClient) -> None:
    response = client.post(URL, json=snapshot_body(), headers=AUTH)
    refused_and_recovered(client, response, 405, "method: use PUT to push or DELETE")


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({}, "header.authorization: missing"),
        ({"Authorization": "Bearer s3cret-tokem"}, "header.authorization: the bearer token is"),
        ({"Authorization": f"Basic {TOKEN}"}, "header.authorization: expected 'Bearer <token>'"),
    ],
    ids=["no token", "wrong token", "basic auth"],
)
def test_a_missing_or_wrong_token_is_401(
    client: TestClient, headers: dict[str, str], error: str
) -> None:
    response = client.put(URL, json=snapshot_body(), headers=headers)
    refused_and_recovered(client, response, 401, error)


def test_delete_needs_the_token_too(client: TestClient) -> None:
    refused_and_recovered(client, client.delete(URL), 401, "header.authorization: missing")


def test_401_asks_for_a_bearer_token(client: TestClient) -> None:
    assert client.put(URL, json=snapshot_body()).headers["WWW-Authenticate"] == "Bearer"


def test_the_bearer_scheme_is_case_insensitive(client: TestClient) -> None:
    headers = {"Authorization": f"bearer {TOKEN}"}
    assert client.put(URL, json=snapshot_body(), headers=headers).status_code == 200


def test_unauthenticated_requests_are_refused_before_the_body_is_looked_at(
    client: TestClient,
) -> None:
    response = client.put(URL, content=b"[" * 100_000, headers={"Content-Type": "text/plain"})
    assert response.status_code == 401


def test_one_run_too_many_is_429_naming_the_run(client: TestClient) -> None:
    for run in ("a", "b"):
        response = client.put(f"/api/v1/runs/{run}/workers/0", json=snapshot_body(), headers=AUTH)
        assert response.status_code == 200
    response = client.put("/api/v1/runs/c/workers/0", json=snapshot_body(), headers=AUTH)
    assert (response.status_code, response.json()["field"]) == (429, "path.run")
    assert rejected(client, "over_limit") == 1


def test_one_worker_too_many_is_429_naming_the_worker(client: TestClient) -> None:
    for worker in range(3):
        client.put(f"/api/v1/runs/a/workers/{worker}", json=snapshot_body(), headers=AUTH)
    response = client.put("/api/v1/runs/a/workers/3", json=snapshot_body(), headers=AUTH)
    assert (response.status_code, response.json()["field"]) == (429, "path.worker")
    assert response.json()["limit"] == "max_workers"


@pytest.fixture
def host_client() -> Iterator[TestClient]:
    """An exporter at the default limits."""
    settings = Settings(ingest_token=SecretStr(TOKEN))
    with TestClient(create_app(settings, StaticBackend([StaticGpu()]))) as client:
        yield client


def test_at_the_default_limits_a_run_takes_16_workers_and_the_17th_gets_429(
    host_client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    for worker in range(16):
        url = f"/api/v1/runs/sweep/workers/{worker}"
        assert host_client.put(url, json=snapshot_body(), headers=AUTH).status_code == 200
    for _ in range(3):  # a client retrying: every refusal counted, one log line
        response = host_client.put(
            "/api/v1/runs/sweep/workers/16", json=snapshot_body(), headers=AUTH
        )
    body = response.json()
    assert (response.status_code, body["field"], body["limit"]) == (
        429,
        "path.worker",
        "max_workers_per_run",
    )
    assert body["error"].startswith("path.worker: run 'sweep' already has 16 workers tracked")
    assert rejected(host_client, "over_limit") == 3
    lines = [r.getMessage() for r in caplog.records if "ingest request refused" in r.getMessage()]
    assert len(lines) == 1
    assert "over_limit (429, --max-workers-per-run)" in lines[0]


def test_at_the_default_limits_16_replicas_are_taken_and_17_get_429(
    host_client: TestClient,
) -> None:
    def body(count: int) -> dict[str, Any]:
        devices = [{"replica": i, "device": f"/device:GPU:{i}"} for i in range(count)]
        return snapshot_body(replicas=count, replica_devices=devices)

    assert host_client.put(URL, json=body(16), headers=AUTH).status_code == 200
    response = host_client.put("/api/v1/runs/r1/workers/1", json=body(17), headers=AUTH)
    assert (response.status_code, response.json()["field"], response.json()["limit"]) == (
        429,
        "body.replicas",
        "max_replicas",
    )


def test_a_body_at_the_limit_is_read_and_judged(client: TestClient) -> None:
    body = json.dumps(snapshot_body()).encode()
    padded = body + b" " * (MIB - len(body))
    assert client.put(URL, content=padded, headers=JSON).status_code == 200


@pytest.fixture
def open_app() -> Any:
    return create_app(Settings(), StaticBackend([StaticGpu()]))


@pytest.mark.parametrize("host", ["10.0.0.5", "192.168.1.20", "2001:db8::1", "testclient"])
def test_without_a_token_other_hosts_are_forbidden(open_app: Any, host: str) -> None:
    with TestClient(open_app, client=(host, 50000)) as client:
        response = client.put(URL, json=snapshot_body())
        assert response.status_code == 403
        assert response.json()["reason"] == "forbidden"
        assert rejected(client, "forbidden") == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_without_a_token_loopback_clients_may_push(open_app: Any, host: str) -> None:
    with TestClient(open_app, client=(host, 50000)) as client:
        assert client.put(URL, json=snapshot_body()).status_code == 200
