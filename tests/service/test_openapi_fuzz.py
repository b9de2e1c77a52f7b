"""The served OpenAPI document, exercised by a property-based API fuzzer (schemathesis): no 5xx, and every
answer conforms to the document (status codes, content types, bodies) (SERVICE-9)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import lakefmt
from tests.service.conftest import TOKEN, ServiceProcess, small_files_table

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")
from hypothesis import HealthCheck, Phase, settings

MAX_EXAMPLES = 25  # per operation: bounded, so the whole module takes a few seconds


@pytest.fixture(scope="module")
def fuzz_service(tmp_path_factory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    catalog = lakefmt.Catalog(str(root / "wh"))
    small_files_table(catalog, "ops.events", appends=3, rows=90)
    proc = ServiceProcess(root / "wh", root / "serve.log", env={"LAKEFMT_COMPACTION_ENABLED": "false"})
    yield proc
    assert proc.terminate() == 0
    assert TOKEN not in proc.log_text()
    assert not [e for e in proc.events() if e["level"] == "error"], "the fuzzer made the service log an error"


@pytest.fixture
def api_schema(fuzz_service):
    return schemathesis.openapi.from_url(fuzz_service.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case, fuzz_service):
    response = case.call_and_validate(base_url=fuzz_service.url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, (case.method, case.formatted_path, case.body, response.text[:500])
