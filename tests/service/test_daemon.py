"""The service in-process, without HTTP: jobs, schedules, concurrency, stop and cancel (spec/service.md)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

import lakefmt
from lakefmt.compaction.leasing import LEASE_KIND
from lakefmt.errors import NoSuchTableError, ValidationError
from lakefmt.leases import Leases
from lakefmt.service import daemon as daemon_module
from lakefmt.service.config import load_config
from lakefmt.service.daemon import CompactionService, ServiceStoppingError
from tests.conftest import rows
from tests.service.conftest import small_files_table

QUIET = {"LAKEFMT_COMPACTION_ENABLED": "false", "LAKEFMT_SERVICE_GAUGE_REFRESH_SECONDS": "0",
         "LAKEFMT_SERVICE_HEARTBEAT_SECONDS": "0.2"}


@pytest.fixture
def warehouse(tmp_path):
    return lakefmt.Catalog(str(tmp_path / "wh"), create=True)


@pytest.fixture
def make_service(warehouse):
    services = []

    def make(env=None, **overrides):
        config = load_config(environ={**QUIET, **(env or {})}, warehouse=warehouse.warehouse, **overrides)
        service = CompactionService(config, catalog=warehouse)
        service.start("inproc")
        services.append(service)
        return service

    yield make
    for s in services:
        s.stop(grace=0)


def wait(service, job_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = service.job(job_id)
        if record.status not in ("queued", "running"):
            return record
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {record.status}")


def test_trigger_compacts_one_table_and_records_it(warehouse, make_service):
    """SERVICE-15/16/20: a triggered job compacts with the table's policy and is persisted. SERVICE-6: the
    compaction table job reports every group; SERVICE-21: the job ends succeeded with its table outcome;
    SERVICE-22: the stored row is the finished job."""
    t = small_files_table(warehouse, "ops.events")
    before = rows(t.scan().to_arrow())
    service = make_service()
    job = wait(service, service.trigger("compaction", table="ops.events").job_id)
    assert job.status == "succeeded" and job.trigger == "api" and job.scope == "ops.events"
    assert (job.files_rewritten, job.files_written, job.groups_committed) == (18, 3, 3)
    [outcome] = job.tables
    assert outcome["status"] == "succeeded" and outcome["summary"]["strategy"] == "binpack"
    assert {g["status"] for g in outcome["groups"]} == {"committed"}
    assert rows(t.refresh().scan().to_arrow()) == before
    assert service.store.get(job.job_id) == job
    assert service.metrics.value("lakefmt_compaction_files_rewritten_total", table="ops.events") == 18
    assert service.metrics.value("lakefmt_table_data_files", table="ops.events") == 3
    again = wait(service, service.trigger("compaction").job_id)  # every table: nothing left to do
    assert again.status == "succeeded" and again.files_rewritten == 0 and again.tables_total == 1


def test_every_kind_runs(warehouse, make_service):
    """SERVICE-6: manifest rewrite, expiry and orphan removal jobs run and succeed; SERVICE-13: the
    per-kind totals sum bytes_freed."""
    small_files_table(warehouse, "ops.events")
    service = make_service(env={"LAKEFMT_EXPIRE_OLDER_THAN": "0s", "LAKEFMT_ORPHANS_OLDER_THAN": "0s"})
    for kind in ("compaction", "manifests", "expire", "orphans"):
        job = wait(service, service.trigger(kind, table="ops.events").job_id)
        assert job.status == "succeeded", job
    assert service.store.totals("expire")["bytes_freed"] > 0  # compaction's inputs, expired
    assert warehouse.load_table("ops.events").check().ok


def test_bad_triggers_are_refused(warehouse, make_service):
    service = make_service()
    with pytest.raises(NoSuchTableError):
        service.trigger("compaction", table="no.such")
    with pytest.raises(ValidationError):
        service.trigger("defragment")
    service.stop(grace=0)
    with pytest.raises(ServiceStoppingError):
        service.trigger("compaction")


def test_short_cron_fires_for_included_tables_only(warehouse, make_service):
    """SERVICE-3/4: the schedule fires; only tables matching include (and not exclude) are compacted."""
    small_files_table(warehouse, "sched.events")
    small_files_table(warehouse, "other.events")
    service = make_service(env={"LAKEFMT_COMPACTION_ENABLED": "true",
                                "LAKEFMT_COMPACTION_SCHEDULE": "* * * * * *", "LAKEFMT_SERVICE_INCLUDE": "sched.*"})
    deadline = time.monotonic() + 20
    while not service.store.history(kind="compaction") and time.monotonic() < deadline:
        time.sleep(0.1)
    job = service.store.history(kind="compaction")[-1]
    assert job.trigger == "schedule" and job.scope is None
    assert [t["table"] for t in job.tables] == ["sched.events"] and job.groups_committed == 3
    assert service.scheduler.next_run("compaction") is not None
    assert warehouse.load_table("other.events").current_snapshot().operation == "append"


def test_at_most_n_table_jobs_at_once(warehouse, make_service, monkeypatch):
    """SERVICE-4: max_concurrent_jobs bounds table jobs across jobs and tables."""
    for i in range(4):
        small_files_table(warehouse, f"ops.t{i}", appends=2, rows=60)
    running, peak, lock = [0], [0], threading.Lock()
    real = daemon_module.run_table_job

    def tracked(*args, **kw):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        try:
            return real(*args, **kw)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(daemon_module, "run_table_job", tracked)
    service = make_service(max_concurrent_jobs=2)
    jobs = [service.trigger("compaction"), service.trigger("manifests")]
    for j in jobs:
        assert wait(service, j.job_id).status == "succeeded"
    assert peak[0] == 2


def rewrites_started(monkeypatch) -> threading.Event:
    """Set once a compaction group's rewrite has started in this process (the service runs in it).

    A partition's lease is no signal: a run takes its first leases while it plans (COMPACT-39)."""
    from lakefmt.compaction import runner

    started = threading.Event()
    rewrite = runner.rewrite_group

    def marked(*args, **kwargs):
        started.set()
        return rewrite(*args, **kwargs)

    monkeypatch.setattr(runner, "rewrite_group", marked)
    return started


def test_stop_mid_job_leaves_the_table_intact(warehouse, make_service, monkeypatch):
    """SERVICE-8: stop aborts running groups cleanly, releases leases and records the job interrupted
    (SERVICE-21: final status interrupted, table outcome stopped)."""
    t = small_files_table(warehouse, "ops.events", properties={"compaction.max-concurrent-groups": "1"})
    before = rows(t.scan().to_arrow())
    service = make_service(env={"LAKEFMT_COMPACTION_READ_MB_PER_S": "0.02"})  # ~2 s per group
    started = rewrites_started(monkeypatch)
    job = service.trigger("compaction", table="ops.events")
    assert started.wait(60)  # a group is being rewritten
    service.stop(grace=0)
    record = service.store.get(job.job_id)
    assert record.status == "interrupted" and record.error
    assert record.tables[0]["status"] == "stopped"
    assert Leases(warehouse).live(t.metadata.table_uuid, LEASE_KIND) == []
    t.refresh()
    assert rows(t.scan().to_arrow()) == before and t.check().ok
    assert t.maintenance.remove_orphan_files(older_than=timedelta(0)).orphan_files == ()


def test_stop_with_grace_lets_the_running_group_commit(warehouse, make_service, monkeypatch):
    """SERVICE-8, COMPACT-31, SERVICE-6: within the grace period the running group commits; no other
    partition starts."""
    t = small_files_table(warehouse, "ops.events", properties={"compaction.max-concurrent-groups": "1"})
    before = rows(t.scan().to_arrow())
    service = make_service(env={"LAKEFMT_COMPACTION_READ_MB_PER_S": "0.05"})  # about 1 s per group
    started = rewrites_started(monkeypatch)
    job = service.trigger("compaction", table="ops.events")
    assert started.wait(60)  # a group is being rewritten
    service.stop(grace=30)
    record = service.store.get(job.job_id)
    assert record.status == "interrupted" and record.groups_committed == 1
    assert sorted(g["status"] for g in record.tables[0]["groups"]) == ["committed", "stopped", "stopped"]
    t.refresh()
    assert rows(t.scan().to_arrow()) == before and t.check().ok
    assert Leases(warehouse).live(t.metadata.table_uuid, LEASE_KIND) == []


def test_cancel_skips_queued_tables(warehouse, make_service):
    """SERVICE-17, SERVICE-21: a cancelled job skips its queued table jobs and ends cancelled; a finished
    job cannot be cancelled (None here, 409 over HTTP)."""
    for i in range(3):
        small_files_table(warehouse, f"ops.t{i}", appends=2, rows=60)
    service = make_service(max_concurrent_jobs=1, env={"LAKEFMT_COMPACTION_READ_MB_PER_S": "0.05"})
    job = service.trigger("compaction")
    assert service.cancel(job.job_id) is not None
    record = wait(service, job.job_id)
    assert record.status == "cancelled"
    assert {t["status"] for t in record.tables} <= {"cancelled", "stopped", "succeeded"}
    assert service.cancel(job.job_id) is None


def test_quiet_windows_and_table_policies(warehouse, tmp_path):
    """SERVICE-2, SERVICE-6: quiet windows are honoured unless the trigger says otherwise; [table] sections apply."""
    now = datetime.now(timezone.utc)
    window = f"{now:%H}:00-{(now + timedelta(hours=1)):%H}:00"
    quiet = small_files_table(warehouse, "ops.quiet", properties={"compaction.quiet-windows": window})
    small_files_table(warehouse, "ops.zordered")
    small_files_table(warehouse, "ops.off")
    path = tmp_path / "lakefmt.toml"
    with open(path, "w") as f:
        f.write('[table."ops.zordered"]\nstrategy = "zorder"\ncolumns = ["payload_id", "sensor_kind"]\n'
                '[table."ops.off"]\nenabled = false\n')
    config = load_config(path, environ=QUIET, warehouse=warehouse.warehouse)
    service = CompactionService(config, catalog=warehouse)
    service.start("inproc")
    try:
        job = wait(service, service.trigger("compaction").job_id)
        outcomes = {t["table"]: t for t in job.tables}
        assert set(outcomes) == {"ops.quiet", "ops.zordered"}  # ops.off is not compacted by "every table"
        assert outcomes["ops.quiet"]["summary"]["runs"][0]["status"] == "quiet-window"
        assert outcomes["ops.quiet"]["files_rewritten"] == 0
        assert outcomes["ops.zordered"]["summary"]["strategy"] == "zorder"
        assert outcomes["ops.zordered"]["groups_committed"] == 3
        forced = wait(service, service.trigger("compaction", table="ops.quiet", respect_windows=False).job_id)
        assert forced.groups_committed == 3 and quiet.refresh().current_snapshot().operation == "replace"
        explicit = wait(service, service.trigger("compaction", table="ops.off").job_id)  # named: runs anyway
        assert explicit.groups_committed == 3
    finally:
        service.stop(grace=0)


def test_transient_errors_are_retried_and_counted(warehouse, make_service, monkeypatch):
    """SERVICE-16: a table job that hits a transient error is planned and run again. SERVICE-21: a
    table job that fails makes the job failed, its error naming the failure."""
    from lakefmt.compaction import Compaction
    from lakefmt.errors import CatalogLockTimeoutError

    small_files_table(warehouse, "ops.events")
    real, calls = Compaction.run, []

    def flaky(self, *args, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise CatalogLockTimeoutError("catalog stayed locked")
        return real(self, *args, **kw)

    monkeypatch.setattr(Compaction, "run", flaky)
    service = make_service()
    job = wait(service, service.trigger("compaction", table="ops.events").job_id)
    assert job.status == "succeeded" and job.tables[0]["attempts"] == 2 and job.groups_committed == 3
    assert service.metrics.value("lakefmt_service_retries_total", kind="compaction", table="ops.events") == 1
    monkeypatch.setattr(Compaction, "run", lambda self, *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    failed = wait(service, service.trigger("compaction", table="ops.events").job_id)
    assert failed.status == "failed" and "OSError: disk gone" in failed.error
    assert service.metrics.value("lakefmt_service_errors_total", kind="compaction") == 1
