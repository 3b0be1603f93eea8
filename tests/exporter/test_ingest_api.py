"""The ingest API over a fixed two-GPU host: what a push publishes, and how pushes relate."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.backend import BackendStatus
from mirrorwatch.exporter.ingest.errors import REASONS
from mirrorwatch.exporter.settings import Settings
from tests.exporter.ingest_snapshots import (
    BUS0,
    BUS1,
    UUID0,
    UUID1,
    FakeClock,
    labels,
    parse_series,
    snapshot_body,
    training_series,
)
from tests.exporter.static_gpu import StaticBackend, StaticGpu

URL = "/api/v1/runs/r1/workers/0"
W = {"run": "r1", "worker": "0"}
LOOPBACK = ("127.0.0.1", 50000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend() -> StaticBackend:
    # NVML index order differs from replica order on purpose: the join must not assume it.
    return StaticBackend(
        [
            StaticGpu(index=0, uuid=UUID1, pci_bus_id=BUS1),
            StaticGpu(index=1, uuid=UUID0, pci_bus_id=BUS0),
        ]
    )


@pytest.fixture
def client(backend: StaticBackend, clock: FakeClock) -> Iterator[TestClient]:
    app = create_app(Settings(run_ttl=60), backend, clock)
    with TestClient(app, client=LOOPBACK) as client:
        yield client


def metric(client: TestClient, name: str, **label_values: str) -> float | None:
    return parse_series(client.get("/metrics").text).get(name, {}).get(labels(**label_values))


def test_a_push_publishes_every_training_series_with_its_value(
    client: TestClient, clock: FakeClock
) -> None:
    response = client.put(URL, json=snapshot_body())
    assert (response.status_code, response.json()) == (
        200,
        {"run": "r1", "worker": 0, "outcome": "created", "sequence": 1},
    )
    one = labels(**W)
    buckets = {
        labels(**W, le=repr(bound)): 0.0 if bound < 0.04 else 100.0
        for bound in STEP_DURATION_BUCKETS
    }
    assert training_series(client.get("/metrics").text) == {
        "mirrorwatch_training_active": {one: 1},
        "mirrorwatch_training_info": {
            labels(**W, model="resnet50", strategy="MirroredStrategy"): 1
        },
        "mirrorwatch_training_replicas": {one: 2},
        "mirrorwatch_training_global_batch_size": {one: 64},
        "mirrorwatch_training_steps_total": {one: 100},
        "mirrorwatch_training_examples_total": {one: 6400},
        "mirrorwatch_training_step_duration_seconds_bucket": {
            **buckets,
            labels(**W, le="+Inf"): 100,
        },
        "mirrorwatch_training_step_duration_seconds_count": {one: 100},
        "mirrorwatch_training_step_duration_seconds_sum": {one: 4.0},
        "mirrorwatch_training_examples_per_second": {one: 1600},
        "mirrorwatch_training_epoch": {one: 2},
        "mirrorwatch_training_loss": {one: 0.25},
        "mirrorwatch_training_replica_info": {
            labels(**W, replica="0", gpu="1", uuid=UUID0): 1,  # by UUID
            labels(**W, replica="1", gpu="0", uuid=UUID1): 1,  # by PCI bus id
        },
        "mirrorwatch_training_replica_memory_bytes": {
            labels(**W, replica="0", kind="current"): 1e9,
            labels(**W, replica="0", kind="peak"): 2e9,
        },
        "mirrorwatch_training_telemetry_dropped_total": {one: 3},
        "mirrorwatch_training_last_push_timestamp_seconds": {one: clock.wall()},
    }


def test_scaling_gauges_appear_with_a_scaling_result(client: TestClient) -> None:
    scaling = {
        "speedup": 1.87,
        "efficiency_ratio": 0.935,
        "baseline_examples_per_second": 800.0,
        "examples_per_second": 1496.0,
    }
    client.put(URL, json=snapshot_body(scaling=scaling))
    assert metric(client, "mirrorwatch_training_scaling_speedup", **W) == 1.87
    assert metric(client, "mirrorwatch_training_scaling_efficiency_ratio", **W) == 0.935


def test_values_a_snapshot_leaves_out_are_absent_not_zero(client: TestClient) -> None:
    body = snapshot_body(loss=None, examples_total=None, examples_per_second=None)
    del body["global_batch_size"]
    client.put(URL, json=body)
    series = training_series(client.get("/metrics").text)
    for name in ("loss", "examples_total", "examples_per_second", "global_batch_size"):
        assert f"mirrorwatch_training_{name}" not in series
    assert "mirrorwatch_training_scaling_speedup" not in series


def test_a_repeated_push_is_accepted_and_counts_nothing_twice(client: TestClient) -> None:
    client.put(URL, json=snapshot_body())
    response = client.put(URL, json=snapshot_body())
    assert (response.status_code, response.json()["outcome"]) == (200, "unchanged")
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 100


def test_an_older_sequence_is_a_stale_push_refused_with_409(client: TestClient) -> None:
    client.put(URL, json=snapshot_body(sequence=7, steps_total=700))
    response = client.put(URL, json=snapshot_body(sequence=6, steps_total=600))
    assert response.status_code == 409
    assert response.json()["reason"] == "stale"
    assert response.json()["error"].startswith("body.sequence: 6 is older than the accepted 7")
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 700
    assert metric(client, "mirrorwatch_exporter_ingest_rejected_total", reason="stale") == 1


def test_a_counter_going_back_within_a_session_is_422_naming_it(client: TestClient) -> None:
    client.put(URL, json=snapshot_body())
    response = client.put(URL, json=snapshot_body(sequence=2, examples_total=10))
    assert response.status_code == 422
    assert response.json()["field"] == "body.examples_total"
    assert response.json()["error"].startswith("body.examples_total: went down from 6400 to 10")


def test_a_new_session_is_a_restart_whose_counters_start_again(client: TestClient) -> None:
    client.put(URL, json=snapshot_body(sequence=50, steps_total=5000))
    response = client.put(URL, json=snapshot_body(session="s-2", sequence=1, steps_total=20))
    assert (response.status_code, response.json()["outcome"]) == (200, "restarted")
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 20


def test_a_silent_worker_shows_inactive_after_the_ttl_then_disappears(
    client: TestClient, clock: FakeClock
) -> None:
    client.put(URL, json=snapshot_body())
    clock.advance(60)
    assert metric(client, "mirrorwatch_training_active", **W) == 0
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 100
    clock.advance(60)
    assert training_series(client.get("/metrics").text) == {}


def test_a_final_push_with_active_false_shows_inactive(client: TestClient) -> None:
    client.put(URL, json=snapshot_body(active=False))
    assert metric(client, "mirrorwatch_training_active", **W) == 0


def test_delete_forgets_the_worker_now(client: TestClient) -> None:
    client.put(URL, json=snapshot_body())
    client.put("/api/v1/runs/r1/workers/1", json=snapshot_body())
    assert client.delete(URL).status_code == 204
    series = training_series(client.get("/metrics").text)
    assert list(series["mirrorwatch_training_steps_total"]) == [labels(run="r1", worker="1")]


def test_deleting_an_unknown_worker_is_404_json(client: TestClient) -> None:
    response = client.delete("/api/v1/runs/r1/workers/9")
    assert response.status_code == 404
    assert response.json()["error"].startswith("path.worker: worker 9 of run 'r1' is not known")
    assert metric(client, "mirrorwatch_exporter_ingest_rejected_total", reason="not_found") == 1


def test_a_bus_id_in_nvml_spelling_resolves_too(client: TestClient) -> None:
    device = {"replica": 0, "device": "/device:GPU:0", "pci_bus_id": "00000000:1B:00.0"}
    client.put(URL, json=snapshot_body(replicas=1, replica_devices=[device]))
    assert metric(
        client, "mirrorwatch_training_replica_info", **W, replica="0", gpu="1", uuid=UUID0
    )


def test_a_replica_not_on_this_host_gets_no_replica_info_row(client: TestClient) -> None:
    elsewhere = "GPU-99999999-9999-9999-9999-999999999999"
    devices = [
        # A UUID that is not ours wins over a bus id that happens to match one of ours.
        {"replica": 0, "device": "/device:GPU:0", "uuid": elsewhere, "pci_bus_id": BUS0},
        {"replica": 1, "device": "/device:GPU:1", "pci_bus_id": "0000:ff:00.0"},
        {"replica": 2, "device": "/device:CPU:0", "memory_current_bytes": 5.0},
    ]
    client.put(URL, json=snapshot_body(replicas=3, replica_devices=devices))
    series = training_series(client.get("/metrics").text)
    assert "mirrorwatch_training_replica_info" not in series
    assert series["mirrorwatch_training_replica_memory_bytes"] == {
        labels(**W, replica="2", kind="current"): 5.0
    }


def test_replicas_resolve_to_nothing_while_the_gpu_backend_is_down(
    client: TestClient, backend: StaticBackend
) -> None:
    backend.status_now = BackendStatus(up=False, reason="NVML: driver not loaded")
    client.put(URL, json=snapshot_body())
    series = training_series(client.get("/metrics").text)
    assert "mirrorwatch_training_replica_info" not in series
    assert series["mirrorwatch_training_steps_total"] == {labels(**W): 100}


def test_a_push_between_scrapes_shows_on_the_next_scrape(client: TestClient) -> None:
    # A worker's samples are kept from scrape to scrape until its next push.
    client.put(URL, json=snapshot_body())
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 100
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 100
    client.put(URL, json=snapshot_body(sequence=2, steps_total=150, loss=0.125))
    assert metric(client, "mirrorwatch_training_steps_total", **W) == 150
    assert metric(client, "mirrorwatch_training_loss", **W) == 0.125


def test_a_gpu_going_down_after_the_push_costs_its_replicas_at_the_next_scrape(
    client: TestClient, backend: StaticBackend
) -> None:
    client.put(URL, json=snapshot_body())
    replica_info = "mirrorwatch_training_replica_info"
    assert len(training_series(client.get("/metrics").text)[replica_info]) == 2
    backend.status_now = BackendStatus(up=False, reason="NVML: driver not loaded")
    series = training_series(client.get("/metrics").text)
    assert replica_info not in series
    assert series["mirrorwatch_training_steps_total"] == {labels(**W): 100}


def test_every_rejection_reason_is_published_from_zero(client: TestClient) -> None:
    series = parse_series(client.get("/metrics").text)
    assert series["mirrorwatch_exporter_ingest_rejected_total"] == {
        labels(reason=reason): 0 for reason in REASONS
    }


def test_the_gpu_routes_keep_working_beside_ingest(client: TestClient) -> None:
    client.put(URL, json=snapshot_body())
    assert [gpu["uuid"] for gpu in client.get("/api/v1/gpus").json()["gpus"]] == [UUID1, UUID0]
    assert client.get("/nope").json() == {"detail": "Not Found"}  # FastAPI's answer off ingest
    assert "mirrorwatch_gpu_utilization_ratio{" in client.get("/metrics").text


def test_the_snapshot_schema_is_in_the_openapi_document(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    put = document["paths"]["/api/v1/runs/{run}/workers/{worker}"]["put"]
    body_schema = put["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema == {"$ref": "#/components/schemas/TrainingSnapshot"}
    assert "schema" in document["components"]["schemas"]["TrainingSnapshot"]["properties"]
    assert put["security"] == [{"bearer": []}]
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")


def test_every_refusal_in_the_openapi_document_is_the_error_body(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    route = document["paths"]["/api/v1/runs/{run}/workers/{worker}"]
    refusals = [
        response
        for operation in (route["put"], route["delete"])
        for code, response in operation["responses"].items()
        if code.startswith("4") and code != "422"  # 422 is FastAPI's own validation error too
    ]
    assert len(refusals) == 13
    for response in refusals:
        schema = response["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}, response
    schemas = document["components"]["schemas"]
    body = schemas["ErrorBody"]
    assert body["required"] == ["error", "reason"]
    assert "default" not in body["properties"]["field"]  # as FastAPI writes optional fields
    assert body["properties"]["errors"]["anyOf"][0]["items"] == {
        "$ref": "#/components/schemas/FieldProblem"
    }
    assert set(schemas["FieldProblem"]["properties"]) == {"field", "message"}


def test_without_a_token_the_start_logs_loopback_only_once(
    backend: StaticBackend, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), TestClient(create_app(Settings(), backend)) as client:
        client.get("/metrics")
        client.get("/metrics")
    messages = [record.getMessage() for record in caplog.records]
    assert sum("loopback clients only" in message for message in messages) == 1


def test_with_a_token_nothing_is_logged_about_loopback(
    backend: StaticBackend, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(ingest_token=SecretStr("t0ken"))
    with caplog.at_level(logging.WARNING), TestClient(create_app(settings, backend)):
        pass
    assert not any("loopback" in record.getMessage() for record in caplog.records)
