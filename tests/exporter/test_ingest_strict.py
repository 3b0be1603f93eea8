"""One spelling of each thing: what the ingest API used to take loosely is refused by name.

Worker ``+1``, `` 1``, ``1.0`` and ``01`` are not worker 1; ``..`` and ``%2e%2e`` are not runs;
a body is UTF-8 without a byte order mark and declares no other charset; a key is given once;
and a body's shape (strings, values, nesting) is bounded before it is parsed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.ingest.body import BodyLimits
from mirrorwatch.exporter.settings import Settings
from tests.exporter.ingest_snapshots import labels, parse_series, snapshot_body
from tests.exporter.static_gpu import StaticBackend, StaticGpu

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json", **AUTH}
URL = "/api/v1/runs/r1/workers/0"
# The value bound at the default replica limit (256 + 32 per replica).
OVER_VALUES = f"body: over {BodyLimits.for_replicas(Settings().max_replicas).max_values} values"


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(
        create_app(Settings(ingest_token=SecretStr(TOKEN)), StaticBackend([StaticGpu()]))
    ) as client:
        yield client


def rejected(client: TestClient, reason: str) -> float:
    series = parse_series(client.get("/metrics").text)
    return series["mirrorwatch_exporter_ingest_rejected_total"][labels(reason=reason)]


def body() -> bytes:
    return json.dumps(snapshot_body()).encode()


@pytest.mark.parametrize("worker", ["+1", "%201", "1%20", "1.0", "01", "1e0", "%31"])
def test_a_worker_is_plain_digits(client: TestClient, worker: str) -> None:
    response = client.put(f"/api/v1/runs/r1/workers/{worker}", content=body(), headers=JSON)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "path.worker"
    assert response.json()["error"].startswith("path.worker: must be decimal digits 0..1023")
    assert rejected(client, "invalid") == 1


@pytest.mark.parametrize("run", ["%2e%2e", "%2E", ".%2e", "r%2d1", "a%2Fb"])
def test_a_run_is_spelled_as_sent_and_never_a_dot_segment(client: TestClient, run: str) -> None:
    # A literal `..` is resolved by httpx itself: the live tests send it raw.
    response = client.put(f"/api/v1/runs/{run}/workers/0", content=body(), headers=JSON)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "path.run"


def test_plain_worker_and_run_spellings_are_accepted(client: TestClient) -> None:
    assert (
        client.put("/api/v1/runs/r.1-a_b/workers/1023", content=body(), headers=JSON).status_code
        == 200
    )
    assert (
        client.put("/api/v1/runs/r...x/workers/0", content=body(), headers=JSON).status_code == 200
    )


@pytest.mark.parametrize(
    ("encoded", "error"),
    [
        (
            b"\xef\xbb\xbf" + json.dumps(snapshot_body()).encode(),
            "body: starts with a byte order mark",
        ),
        (json.dumps(snapshot_body()).encode("utf-16"), "body: holds NUL bytes"),
        (json.dumps(snapshot_body()).encode("utf-16-le"), "body: holds NUL bytes"),
        (json.dumps(snapshot_body()).encode("utf-32"), "body: holds NUL bytes"),
        (
            json.dumps(snapshot_body(model="caf\u00e9"), ensure_ascii=False).encode("latin-1"),
            "body: not UTF-8",
        ),
    ],
    ids=["utf-8 bom", "utf-16 bom", "utf-16 no bom", "utf-32", "latin-1"],
)
def test_a_body_that_is_not_plain_utf8_is_400(
    client: TestClient, encoded: bytes, error: str
) -> None:
    response = client.put(URL, content=encoded, headers=JSON)
    assert response.status_code == 400, response.text
    assert (response.json()["reason"], response.json()["field"]) == ("malformed_json", "body")
    assert response.json()["error"].startswith(error), response.json()["error"]


@pytest.mark.parametrize("charset", ["latin-1", "utf-16", "iso-8859-1", '"utf-16"'])
def test_a_charset_other_than_utf8_is_415(client: TestClient, charset: str) -> None:
    headers = {**AUTH, "Content-Type": f"application/json; charset={charset}"}
    response = client.put(URL, content=body(), headers=headers)
    assert response.status_code == 415, response.text
    assert response.json()["field"] == "header.content-type"
    assert "UTF-8" in response.json()["error"]


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", '"utf-8"'])
def test_charset_utf8_is_accepted(client: TestClient, charset: str) -> None:
    headers = {**AUTH, "Content-Type": f"application/json; charset={charset}"}
    assert client.put(URL, content=body(), headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"schema": 1, "schema": 1}', "body.schema"),
        ('{"step_duration_seconds": {"count": 1, "count": 2}}', "body.step_duration_seconds.count"),
        (
            '{"replica_devices": [{"replica": 0}, {"uuid": "a", "uuid": "b"}]}',
            "body.replica_devices[1].uuid",
        ),
    ],
)
def test_a_key_given_twice_is_refused_by_name(client: TestClient, text: str, field: str) -> None:
    response = client.put(URL, content=text, headers=JSON)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert response.json()["error"] == f"{field}: given twice in one object; send each key once"


@pytest.mark.parametrize(
    ("text", "status", "error"),
    [
        ('{"model": "' + "x" * 1_000_000 + '"}', 413, "body: a string over 1024 bytes"),
        ("{" + ",".join(f'"k{i}": 1' for i in range(50_000)) + "}", 413, OVER_VALUES),
        ("[" + ",".join(["1"] * 100_000) + "]", 413, OVER_VALUES),
        ('{"model": "' + '\\"' * 100_000 + '"}', 413, "body: a string over 1024 bytes"),
        ('{"model": "abc', 400, "body: not valid JSON"),
        ('{"a":' * 9 + "1" + "}" * 9, 400, "body: nested deeper than 8 levels"),
    ],
    ids=["1 MB string", "50k keys", "100k numbers", "long escaped string", "open string", "9 deep"],
)
def test_a_heavy_body_is_refused_before_it_is_parsed(
    client: TestClient, text: str, status: int, error: str
) -> None:
    response = client.put(URL, content=text, headers=JSON)
    assert response.status_code == status, response.text
    assert response.json()["error"].startswith(error), response.json()["error"]
    assert client.put(URL, content=body(), headers=JSON).status_code == 200


def test_the_value_bound_leaves_room_beyond_the_replica_limit(client: TestClient) -> None:
    # 100 replicas against the limit of 64: the replica limit answers, not the shape bound.
    devices = [
        {"replica": i, "device": f"/device:GPU:{i}", "memory_current_bytes": 1.0}
        for i in range(100)
    ]
    response = client.put(
        URL, json=snapshot_body(replicas=2, replica_devices=devices), headers=AUTH
    )
    assert (response.status_code, response.json()["field"]) == (429, "body.replica_devices")
