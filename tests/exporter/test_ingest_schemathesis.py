"""Fuzzing the exporter's OpenAPI document with schemathesis: nothing a client sends is a 5xx."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error

from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.settings import Settings
from tests.exporter.static_gpu import StaticBackend, StaticGpu

TOKEN = "fuzz-token"

app = create_app(
    Settings(ingest_token=SecretStr(TOKEN), max_runs=4, max_workers=8, max_replicas=4),
    StaticBackend([StaticGpu()]),
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_from_the_openapi_document_gets_a_server_error(
    case: schemathesis.Case[Any],
) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error]
    )
