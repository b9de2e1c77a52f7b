"""The compaction service in-process: skipped firings, and what it stores (spec/service.md SERVICE-5,
SERVICE-24)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import lakefmt
from lakefmt.service.config import load_config
from lakefmt.service.daemon import CompactionService
from lakefmt.service.jobs import INSTANCES_TABLE, JOBS_TABLE, stored_history
from lakefmt.service.logs import LOGGER_NAME
from tests.conftest import downlinks, rows
from tests.service.conftest import small_files_table

pytestmark = pytest.mark.service

QUIET = {"LAKEFMT_COMPACTION_ENABLED": "false", "LAKEFMT_SERVICE_GAUGE_REFRESH_SECONDS": "0",
         "LAKEFMT_SERVICE_HEARTBEAT_SECONDS": "0.2"}


class Events(logging.Handler):
    """The service's log events (name and fields) as they are emitted."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.changed:
            self.events.append((record.getMessage(), dict(getattr(record, "lakefmt_fields", None) or {})))
            self.changed.notify_all()

    def named(self, name: str) -> list[dict[str, Any]]:
        with self.changed:
            return [fields for event, fields in self.events if event == name]

    def wait_for(self, name: str, timeout: float) -> dict[str, Any]:
        with self.changed:
            assert self.changed.wait_for(lambda: any(e == name for e, _ in self.events), timeout), \
                f"no {name} event in {timeout} s: {[e for e, _ in self.events]}"
        return self.named(name)[0]


@pytest.fixture
def events():
    logger = logging.getLogger(LOGGER_NAME)
    handler, level = Events(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def warehouse(tmp_path):
    return lakefmt.Catalog(str(tmp_path / "wh"), create=True)


@pytest.fixture
def make_service(warehouse):
    services: list[CompactionService] = []

    def make(env: dict[str, str] | None = None) -> CompactionService:
        config = load_config(environ={**QUIET, **(env or {})}, warehouse=warehouse.warehouse)
        service = CompactionService(config, catalog=warehouse)
        service.start("inproc")
        services.append(service)
        return service

    yield make
    for s in services:
        s.stop(grace=0)


def wait(service: CompactionService, job_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = service.job(job_id)
        if record.status not in ("queued", "running"):
            return record
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s")


def test_a_schedule_firing_while_its_previous_job_runs_is_skipped(warehouse, make_service, events):
    """SERVICE-5: the compaction schedule fires every second while its first job (slowed by a read
    budget) runs: the later firings are logged as skipped and trigger no second job."""
    small_files_table(warehouse, "ops.events", properties={"compaction.max-concurrent-groups": "1"})
    service = make_service(env={"LAKEFMT_COMPACTION_ENABLED": "true",
                                "LAKEFMT_COMPACTION_SCHEDULE": "* * * * * *",  # every second
                                "LAKEFMT_COMPACTION_READ_MB_PER_S": "0.02"})  # about 2 s per group
    skipped = events.wait_for("schedule.skipped", timeout=30)
    fired = events.named("schedule.fired")
    assert skipped["kind"] == "compaction" and [f["job_id"] for f in fired] == [skipped["job_id"]]
    scheduled = [j for j in (*service.store.active(), *service.store.history(kind="compaction"))
                 if j.trigger == "schedule"]
    assert [j.job_id for j in scheduled] == [skipped["job_id"]]
    service.stop(grace=0)
    assert service.store.get(skipped["job_id"]).status in ("interrupted", "succeeded")
    assert len([j for j in service.store.history(kind="compaction") if j.trigger == "schedule"]) == 1


def test_dropping_the_service_tables_loses_history_only(warehouse, make_service):
    """SERVICE-24: with the jobs and instances tables dropped, the table reads, takes writes, deletes,
    compaction, expiry and checks as before; a new service starts with an empty history."""
    t = small_files_table(warehouse, "ops.events")
    service = make_service()
    assert wait(service, service.trigger("compaction", table="ops.events").job_id).status == "succeeded"
    service.stop(grace=0)
    assert stored_history(warehouse, table="ops.events")
    before = rows(t.refresh().scan().to_arrow())

    with warehouse.session() as s:
        s.con.execute(f"DROP TABLE {JOBS_TABLE}")
        s.con.execute(f"DROP TABLE {INSTANCES_TABLE}")
    assert stored_history(warehouse, table="ops.events") == []

    again = lakefmt.Catalog(warehouse.warehouse).load_table("ops.events")
    assert rows(again.scan().to_arrow()) == before
    extra = downlinks(300, seed=99)
    again.append(extra)
    again.append(downlinks(300, seed=100))
    again.delete("payload_id = 1")
    result = again.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    assert result.groups_committed >= 1, result.summary()
    again.maintenance.expire_snapshots(older_than=timedelta(0))
    report = again.check()
    assert report.ok, report.format()
    assert again.scan("payload_id = 1").count() == 0 and again.scan().count() > len(before)

    fresh = make_service()
    assert fresh.store.history() == []
    assert wait(fresh, fresh.trigger("manifests", table="ops.events").job_id).status == "succeeded"
    assert [j.kind for j in stored_history(warehouse, table="ops.events")] == ["manifests"]
