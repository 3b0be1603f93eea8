"""Fuzzing the exporter's OpenAPI document with schemathesis: nothing a client sends is a 5xx."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation

from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.settings import Settings
from tests.exporter.static_gpu import StaticBackend, StaticGpu

TOKEN = "fuzz-token"

app = create_app(
    Settings(ingest_token=SecretStr(TOKEN), max_runs=4, max_workers=8, max_replicas=4),
    StaticBackend([StaticGpu()]),
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
# One test per operation, named by it. Not schema.parametrize(): its items share one node id,
# and pytest-xdist, which schedules by node id, would fuzz only the first operation.
RESULTS = list(schema.get_all_operations())
OPERATIONS = [result.ok() for result in RESULTS if isinstance(result, Ok)]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.label)
@given(data=st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_from_the_openapi_document_gets_a_server_error(
    operation: APIOperation[Any, Any, Any, Any], data: st.DataObject
) -> None:
    case = data.draw(operation.as_strategy())
    case.call_and_validate(
        headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error]
    )


def test_every_operation_of_the_document_is_fuzzed() -> None:
    assert [result for result in RESULTS if not isinstance(result, Ok)] == []
    assert {operation.label for operation in OPERATIONS} >= {
        "PUT /api/v1/runs/{run}/workers/{worker}",
        "DELETE /api/v1/runs/{run}/workers/{worker}",
        "GET /metrics",
    }
