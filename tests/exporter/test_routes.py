"""The HTTP routes over a fixed backend: health, readiness, metrics, GPU JSON, landing page."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.metrics_core import Metric

from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.backend import BackendStatus
from mirrorwatch.exporter.exposition import OpenMetricsRenderer
from mirrorwatch.exporter.routes import metrics as metrics_route
from mirrorwatch.exporter.settings import Settings
from tests.exporter.static_gpu import StaticBackend, StaticGpu
from tests.exporter.test_negotiation import PROMETHEUS_2_55

UUID1 = "GPU-11111111-1111-1111-1111-111111111111"


@pytest.fixture
def backend() -> StaticBackend:
    return StaticBackend([StaticGpu(), StaticGpu(index=1, uuid=UUID1, is_alive=False)])


@pytest.fixture
def client(backend: StaticBackend) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(), backend)) as client:
        yield client


def test_the_lifespan_starts_and_stops_the_backend_once(backend: StaticBackend) -> None:
    with TestClient(create_app(Settings(), backend)):
        assert (backend.started, backend.stopped) == (1, 0)
    assert (backend.started, backend.stopped) == (1, 1)


def test_healthz_answers_while_serving(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_is_200_when_the_backend_answers(client: TestClient) -> None:
    response = client.get("/readyz")
    assert (response.status_code, response.json()) == (200, {"status": "ready", "backend": "nvml"})


def test_readyz_is_503_naming_the_reason_when_the_backend_is_down(
    client: TestClient, backend: StaticBackend
) -> None:
    backend.status_now = BackendStatus(up=False, reason="NVML: driver not loaded")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "backend": "nvml",
        "reason": "NVML: driver not loaded",
    }
    assert "mirrorwatch_up 0.0" in client.get("/metrics").text


def test_metrics_serve_the_prometheus_text_format(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "mirrorwatch_gpu_utilization_ratio{" in response.text


def test_metrics_serve_openmetrics_when_asked(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


class FrozenRenderer:
    """The route's OpenMetrics renderer, with collector durations held still between scrapes."""

    def __init__(self) -> None:
        self.body: bytes | None = None
        self.renderer = OpenMetricsRenderer()

    def render(self, families: Iterable[Metric]) -> bytes:
        if self.body is None:
            self.body = self.renderer.render(families)
        return self.body


def test_metrics_answer_prometheus_2_55_with_gzipped_openmetrics(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_route, "_openmetrics", FrozenRenderer())
    headers = {"Accept": PROMETHEUS_2_55, "Accept-Encoding": "gzip"}
    # httpx would decode the body itself; the raw stream is what went over the wire.
    with client.stream("GET", "/metrics", headers=headers) as response:
        wire = b"".join(response.iter_raw())
    plain = client.get("/metrics", headers={"Accept": PROMETHEUS_2_55, "Accept-Encoding": ""})
    assert response.headers["content-type"] == (
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    )
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["vary"] == "Accept-Encoding, Accept"
    assert "content-encoding" not in plain.headers
    assert gzip.decompress(wire) == plain.content
    assert plain.text.endswith("# EOF\n")
    assert "mirrorwatch_gpu_utilization_ratio{" in plain.text


def test_metrics_are_not_gzipped_when_gzip_is_refused(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "content-encoding" not in response.headers
    assert response.text.startswith("# HELP")


def test_metrics_refuse_a_format_with_q_zero(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text;q=0,*/*"})
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")


def test_metrics_answer_406_when_no_format_is_acceptable(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": "application/json,*/*;q=0"})
    assert response.status_code == 406
    assert response.headers["vary"] == "Accept-Encoding, Accept"
    assert "application/openmetrics-text; version=1.0.0" in response.text


def test_gpus_json_carries_the_same_values_as_metrics(client: TestClient) -> None:
    document = client.get("/api/v1/gpus").json()
    assert (document["backend"], document["up"]) == ("nvml", True)
    first, lost = document["gpus"]
    assert first["index"] == 0
    assert first["uuid"] == StaticGpu().uuid
    assert first["utilization_ratio"] == 0.97
    assert first["temperature_threshold_celsius"] == {
        "slowdown": 87.0,
        "shutdown": 92.0,
        "gpu_max": 87.0,
    }
    assert first["nvlink_errors_total"]["0"]["crc_flit"] == 3.0
    assert (first["name"], first["pci_bus_id"], first["up"]) == (
        "NVIDIA H100 80GB HBM3",
        "0000:1b:00.0",
        True,
    )
    assert (lost["index"], lost["up"]) == (1, False)
    assert "utilization_ratio" not in lost


def test_landing_page_links_every_endpoint(client: TestClient) -> None:
    page = client.get("/").text
    for link in ("metrics", "api/v1/gpus", "healthz", "readyz"):
        assert f'href="{link}"' in page
    assert "backend nvml: ready" in page


def test_every_linked_page_works_offline(client: TestClient) -> None:
    # Each link of the landing page answers, and nothing the exporter serves as HTML pulls a
    # script or style from another host (FastAPI's /docs loads Swagger UI from a CDN).
    page = client.get("/").text
    links = re.findall(r'href="([^"]+)"', page)
    assert "openapi.json" in links
    for link in links:
        response = client.get("/" + link)
        assert response.status_code == 200, link
        if response.headers["content-type"].startswith("text/html"):
            assert not re.search(r"(src|href)=\"https?://", response.text), link
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404


def test_metrics_publish_the_configured_run_ttl_and_expected_gpus(backend: StaticBackend) -> None:
    settings = Settings(run_ttl=45, expected_gpus=2, collectors="device")
    with TestClient(create_app(settings, backend)) as client:
        lines = client.get("/metrics").text.splitlines()
    assert "mirrorwatch_exporter_run_ttl_seconds 45.0" in lines
    assert "mirrorwatch_exporter_expected_gpus 2.0" in lines
    assert 'mirrorwatch_exporter_collector_success{collector="device"} 1.0' in lines
    assert not any('collector="power"' in line for line in lines)
