"""The served OpenAPI document, exercised by a property-based API fuzzer (schemathesis): no 5xx, and every
answer conforms to the document (status codes, content types, bodies) (SERVICE-9).

Schemathesis is driven through its Python API and Hypothesis only — the schema is
loaded with ``schemathesis.openapi.from_url`` and each operation's ``as_strategy()`` runs
under a plain ``@given`` inside one ordinary test — not through its pytest integration
(``schemathesis.pytest.from_fixture`` / ``@schema.parametrize``), which reaches into
pytest's private attributes and broke with pytest 9.2.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import lakefmt
from tests.service.conftest import TOKEN, ServiceProcess, small_files_table

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")
from hypothesis import HealthCheck, Phase, given, note, settings

MAX_EXAMPLES = 25  # per operation: bounded, so the whole module takes a few seconds
FUZZ_SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                         phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzz_service(tmp_path_factory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    catalog = lakefmt.Catalog(str(root / "wh"), create=True)
    small_files_table(catalog, "ops.events", appends=3, rows=90)
    proc = ServiceProcess(root / "wh", root / "serve.log", env={"LAKEFMT_COMPACTION_ENABLED": "false"})
    yield proc
    assert proc.terminate() == 0
    assert TOKEN not in proc.log_text()
    assert not [e for e in proc.events() if e["level"] == "error"], "the fuzzer made the service log an error"


def test_no_server_errors_and_answers_match_the_document(fuzz_service):
    schema = schemathesis.openapi.from_url(fuzz_service.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # an unusable operation raises here
    labels = {op.label for op in operations}
    assert {"GET /api/v1/status", "POST /api/v1/trigger", "GET /api/v1/history", "GET /metrics"} <= labels, labels
    for operation in operations:
        fuzz(operation, fuzz_service.url)


def fuzz(operation, base_url: str) -> None:
    """Call one operation with MAX_EXAMPLES generated requests; each answer must conform and not be a 5xx."""
    headers = {"Authorization": f"Bearer {TOKEN}"}

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy())
    def call(case):
        note(f"operation: {operation.label}")
        response = case.call_and_validate(base_url=base_url, headers=headers)
        assert response.status_code < 500, (case.method, case.formatted_path, case.body, response.text[:500])

    call()
