"""Spark jobs' write leases are held and renewed on the driver for the whole job (SPARK-13, CAT-10).

No SparkSession is needed: :mod:`lakefmt.spark.job_leases` is the driver-side part, and
these tests drive it as the data source does (lease at job start, check before the
commit, end after it). Renewal is observed in the catalog, not timed.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.leases import Leases


def job_lease(t: lakefmt.Table, token: str) -> float | None:
    rows = [lease for lease in Leases(t.catalog).live(t.metadata.table_uuid, "write") if lease.key == token]
    return rows[0].expires_at if rows else None


@pytest.fixture
def job_leases():
    pytest.importorskip("pyspark", minversion="4.0")
    from lakefmt.spark import job_leases

    return job_leases


def test_a_job_lease_is_renewed_until_the_job_ends(local_catalog, job_leases):
    t = local_catalog.create_table("db.jobs", pa.schema([("id", pa.int64())]))
    token = job_leases.lease_job(t, ttl=2)
    first = job_lease(t, token)
    assert first is not None
    renewed = threading.Event()

    def watch() -> None:
        while not renewed.is_set():
            current = job_lease(t, token)
            if current is not None and current > first:
                renewed.set()
            renewed.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert renewed.wait(60), "the driver never renewed the job's lease"
    job_leases.check_job_lease(token)  # live and ours
    job_leases.end_job_leases([token])
    Leases(t.catalog).release(t.metadata.table_uuid, "write", [token], owner=token)
    assert job_lease(t, token) is None


def test_a_job_whose_lease_was_taken_over_cannot_commit(local_catalog, job_leases):
    t = local_catalog.create_table("db.jobs", pa.schema([("id", pa.int64())]))
    token = job_leases.lease_job(t, ttl=3600)
    with t.catalog.session() as s:  # another owner takes the key over, as after an expiry
        s.con.execute("UPDATE leases SET owner = 'someone-else' WHERE lease_key = ?", [token])
    with pytest.raises(lakefmt.WriteLeaseLostError, match="expired or was taken over while the job ran"):
        job_leases.check_job_lease(token)
    job_leases.end_job_leases([token])
