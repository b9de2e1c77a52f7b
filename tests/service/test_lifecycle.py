"""SIGTERM mid-job, restart, and two services on one warehouse, as real processes (spec/service.md)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

import lakefmt
from lakefmt.compaction.leasing import LEASE_KIND
from lakefmt.leases import Leases
from tests.conftest import rows
from tests.service.conftest import TOKEN, small_files_table

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

SLOW = {"LAKEFMT_COMPACTION_ENABLED": "false", "LAKEFMT_SERVICE_SHUTDOWN_GRACE_SECONDS": "0",
        "LAKEFMT_COMPACTION_READ_MB_PER_S": "0.02"}  # about 2 s per group of six small files


def assert_intact(t: lakefmt.Table, before: list[tuple]) -> None:
    t.refresh()
    assert rows(t.scan().to_arrow()) == before
    report = t.check()
    assert report.ok, report.format()
    assert Leases(t.catalog).live(t.metadata.table_uuid, LEASE_KIND) == []
    assert t.maintenance.remove_orphan_files(older_than=timedelta(0)).orphan_files == ()


def test_sigterm_mid_job_leaves_the_table_intact_and_a_restart_keeps_history(tmp_path, start_service):
    """SERVICE-8, SERVICE-22: SIGTERM exits 0 with the table intact; the next process sees the interrupted
    job (SERVICE-21) and counts it in its totals (SERVICE-13)."""
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = small_files_table(catalog, "ops.events", properties={"compaction.max-concurrent-groups": "1"})
    before = rows(t.scan().to_arrow())
    proc = start_service(tmp_path / "wh", env=SLOW)
    status, job = proc.http.post("/api/v1/trigger", {"table": "ops.events"})
    assert status == 202
    deadline = time.monotonic() + 15
    while not Leases(catalog).live(t.metadata.table_uuid, LEASE_KIND):  # a group is being rewritten
        assert time.monotonic() < deadline, proc.log_text()
        time.sleep(0.02)
    started = time.monotonic()
    assert proc.terminate(timeout=20) == 0
    assert time.monotonic() - started < 10
    assert_intact(t, before)
    assert [e["event"] for e in proc.events() if e["event"].startswith("service.")][-2:] == [
        "service.stopping", "service.stopped"]
    assert TOKEN not in proc.log_text()

    again = start_service(tmp_path / "wh", env={"LAKEFMT_COMPACTION_ENABLED": "false"})
    status, history = again.http.get("/api/v1/history?table=ops.events")
    assert status == 200 and [j["job_id"] for j in history["jobs"]] == [job["job_id"]]
    interrupted = history["jobs"][0]
    assert interrupted["status"] == "interrupted" and interrupted["tables"][0]["status"] == "stopped"
    assert again.http.get("/api/v1/jobs")[1]["jobs"] == []
    status, job2 = again.http.post("/api/v1/trigger", {"table": "ops.events"})
    assert again.http.wait_job(job2["job_id"])["status"] == "succeeded"
    t.refresh()
    assert t.current_snapshot().summary["total-data-files"] == "3"
    assert_intact(t, before)
    totals = again.http.get("/api/v1/status")[1]["stats"]
    assert totals["interrupted_jobs"] == 1 and totals["succeeded_jobs"] == 1
    assert again.terminate() == 0


def test_two_services_never_rewrite_the_same_partition(tmp_path, start_service):
    """SERVICE-7, COMPACT-22..24: two services on one warehouse split the partitions between them."""
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = small_files_table(catalog, "ops.events", missions=6, rows=900,
                          properties={"compaction.max-concurrent-groups": "1"})
    # Each partition's input is two thirds of the target file size, so no compactor takes the leases of
    # the partitions after its own ahead (COMPACT-37): they are split one by one between the services.
    per_partition = Counter()
    for f in t.plan_files():
        per_partition[f.partition] += f.file_size_bytes
    t.set_property("compaction.target-file-size-bytes", str(max(per_partition.values()) * 3 // 2))
    before = rows(t.scan().to_arrow())
    env = {"LAKEFMT_COMPACTION_ENABLED": "false", "LAKEFMT_COMPACTION_READ_MB_PER_S": "0.1"}
    services = [start_service(tmp_path / "wh", env=env) for _ in range(2)]
    jobs: dict[int, dict] = {}

    def trigger(i: int) -> None:
        jobs[i] = services[i].http.post("/api/v1/trigger", {"table": "ops.events"})[1]

    threads = [threading.Thread(target=trigger, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done = [services[i].http.wait_job(jobs[i]["job_id"], timeout=90) for i in range(2)]
    assert all(j["status"] == "succeeded" for j in done), done
    rewritten = [e["partition"] for s in services for e in s.events("compaction.group") if e["rewritten"]]
    committed = [e["partition"] for s in services for e in s.events("compaction.group") if e["status"] == "committed"]
    assert sorted(rewritten) == sorted(committed) == [f"mission_id={m}" for m in range(6)], Counter(rewritten)
    assert all(d["groups_committed"] > 0 for d in done), "both services should have done some of the work"
    replaces = [c for c in catalog.commit_log("ops.events") if c.operation == "replace"]
    groups = [g for c in replaces for g in c.summary["lakefmt.compaction.group"].split(",")]
    assert len(groups) == 6 and 1 <= len(replaces) <= 6  # groups finishing together share a commit (COMPACT-18)
    t.refresh()
    assert t.current_snapshot().summary["total-data-files"] == "6"
    assert_intact(t, before)
    for s in services:
        assert s.terminate() == 0
