"""Jobs and instances persisted in the catalog (spec/service.md SERVICE-20..SERVICE-25)."""

from __future__ import annotations

import dataclasses

import lakefmt
from lakefmt.service.jobs import JOBS_TABLE, JobStore, now_us, stored_history


def test_jobs_survive_a_new_store_and_a_new_catalog_handle(tmp_path):
    """SERVICE-20, SERVICE-22: jobs live in the catalog, so a restarted service sees them. SERVICE-13:
    totals count jobs by status and sum their columns."""
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    store = JobStore(catalog)
    job = store.create("compaction", trigger="api", scope="a.b", instance_id="i1", tables_total=1)
    assert job.status == "queued" and len(job.job_id) == 32
    running = dataclasses.replace(job, status="running", started_us=now_us())
    store.save(running)
    done = dataclasses.replace(running, status="succeeded", finished_us=now_us(), tables_done=1, files_rewritten=8,
                               files_written=1, bytes_rewritten=800, bytes_written=300, groups_committed=1,
                               tables=({"table": "a.b", "status": "succeeded"},))
    store.save(done)
    again = JobStore(lakefmt.Catalog(str(tmp_path / "wh")))
    loaded = again.get(job.job_id)
    assert loaded == done
    assert [j.job_id for j in again.history(table="a.b")] == [job.job_id]
    assert again.history(table="c.d") == [] and again.history(kind="expire") == []
    assert again.active() == []
    totals = again.totals("compaction")
    assert totals["total_jobs"] == 1 and totals["succeeded_jobs"] == 1 and totals["files_rewritten"] == 8
    assert again.last("compaction").job_id == job.job_id
    d = loaded.to_dict()
    assert d["created_at"].endswith("+00:00") and d["tables"] == [{"table": "a.b", "status": "succeeded"}]
    assert stored_history(catalog, table="a.b")[0].job_id == job.job_id


def test_history_is_newest_first_and_pages(tmp_path):
    """SERVICE-18: history is most recently finished first, pages with limit and offset, and filters
    by status and table."""
    store = JobStore(lakefmt.Catalog(str(tmp_path / "wh"), create=True))
    ids = []
    for i in range(5):
        job = store.create("expire", trigger="schedule", scope=None, instance_id="i1")
        store.save(dataclasses.replace(job, status="failed" if i == 2 else "succeeded", started_us=now_us(),
                                       finished_us=now_us() + i))
        ids.append(job.job_id)
    assert [j.job_id for j in store.history(limit=2)] == ids[::-1][:2]
    assert [j.job_id for j in store.history(limit=2, offset=2)] == ids[::-1][2:4]
    assert [j.job_id for j in store.history(status="failed")] == [ids[2]]
    assert store.history(table="any.table") == []  # scope NULL, but no outcome for that table


def test_jobs_of_a_silent_instance_are_abandoned(tmp_path):
    """SERVICE-23: a job whose service stopped heartbeating is marked abandoned by the next one."""
    store = JobStore(lakefmt.Catalog(str(tmp_path / "wh"), create=True))
    store.register("dead", host="h", pid=1, address=None)
    store.register("alive", host="h", pid=2, address=None)
    dead = store.create("compaction", trigger="api", scope=None, instance_id="dead")
    alive = store.create("compaction", trigger="api", scope=None, instance_id="alive")
    orphan = store.create("compaction", trigger="api", scope=None, instance_id="never-registered")
    with store.catalog.session() as s:
        s.con.execute("UPDATE lakefmt_service_instances SET heartbeat_us = heartbeat_us - 60000000 "
                      "WHERE instance_id = 'dead'")
    assert sorted(store.mark_abandoned(stale_after_us=10_000_000)) == sorted([dead.job_id, orphan.job_id])
    assert store.get(dead.job_id).status == "abandoned" and store.get(dead.job_id).error
    assert store.get(alive.job_id).status == "queued"
    store.unregister("alive")
    assert store.mark_abandoned(stale_after_us=10_000_000) == [alive.job_id]
    assert [i.instance_id for i in store.instances(live_within_us=10_000_000)] == []


def test_report_history_reads_nothing_when_no_service_ran(tmp_path):
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    assert stored_history(catalog, table="a.b") == []
    with catalog.session() as s:
        assert s.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                             [JOBS_TABLE]).fetchone()[0] == 0
