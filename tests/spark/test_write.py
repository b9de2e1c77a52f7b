"""Batch writes through Spark: one snapshot per job, retries, failures, aborts (SPARK-8..SPARK-13)."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from lakefmt.leases import Leases
from lakefmt.spark.commit import JOB_ID
from lakefmt.spark.source import LakefmtDataSource
from tests.conftest import DOWNLINKS_SCHEMA, data_files_on_disk, downlinks, live_paths
from tests.spark.conftest import sorted_rows, writer

pytestmark = pytest.mark.spark


def new_table(catalog: lakefmt.Catalog, name: str = "artemis.downlinks") -> lakefmt.Table:
    return catalog.create_table(name, schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"], sort_by=["payload_id"])


def frame(spark: Any, rows: pa.Table, partitions: int = 4) -> Any:
    return spark.createDataFrame(rows).repartition(partitions)


def no_write_leases(catalog: lakefmt.Catalog, table: lakefmt.Table) -> bool:
    """No Spark job left a write lease behind (the test's own handle releases its token first)."""
    table.release_write_token()
    return not Leases(catalog).live(table.metadata.table_uuid, "write")


def test_append_and_overwrite_each_commit_one_snapshot(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-10, SPARK-11: one snapshot per job, tagged with the job id; leases released."""
    t = new_table(catalog)
    t.append(downlinks(100, seed=0))
    batch = downlinks(1000, seed=1)
    writer(frame(spark, batch), catalog).mode("append").save("artemis.downlinks")
    t.refresh()
    assert len(t.snapshots()) == 2
    snap = t.current_snapshot()
    assert snap is not None and snap.operation == "append" and len(snap.summary[JOB_ID]) == 32
    assert snap.summary["added-records"] == "1000"
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(pa.concat_tables([downlinks(100, seed=0), batch]))
    assert all(p.rsplit("/", 1)[-1].startswith("part-") for p in live_paths(t))
    assert no_write_leases(catalog, t)

    writer(frame(spark, downlinks(50, seed=2), 2), catalog).mode("overwrite").save("artemis.downlinks")
    t.refresh()
    assert t.current_snapshot().operation == "overwrite"  # type: ignore[union-attr]
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(downlinks(50, seed=2))
    assert t.check().ok and no_write_leases(catalog, t)


def test_incompatible_dataframe_is_refused_before_any_file(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-9, WRITE-3: a clear error, no file, no snapshot."""
    t = new_table(catalog)
    df = frame(spark, downlinks(20, seed=0), 1)
    with pytest.raises(Exception, match="the table does not have: \\['extra'\\]"):
        writer(df.selectExpr("*", "1 AS extra"), catalog).mode("append").save("artemis.downlinks")
    with pytest.raises(Exception, match="column 'payload_id' has Spark type string"):
        writer(df.selectExpr("ts", "CAST(payload_id AS STRING) AS payload_id"), catalog).mode("append").save(
            "artemis.downlinks")
    t.refresh()
    assert t.current_snapshot() is None and not data_files_on_disk(t) and no_write_leases(catalog, t)


@pytest.mark.parametrize("failure", ["raise", "crash"])
def test_task_failing_its_first_attempt_leaves_one_copy_of_its_rows(spark: Any, catalog: lakefmt.Catalog,
                                                                    failure: str) -> None:
    """SPARK-8, SPARK-13: Spark retries the task; only the retry's files are committed.

    ``raise`` fails after writing (the task deletes its files); ``crash`` kills the Python
    worker, leaving files named with the job's token for orphan removal once the lease ends.
    """
    t = new_table(catalog)
    batch = downlinks(800, seed=4)
    writer(frame(spark, batch), catalog, **{"lakefmt.test.fail-first-attempt": failure}).mode("append").save(
        "artemis.downlinks")
    t.refresh()
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(batch)
    leftovers = data_files_on_disk(t) - live_paths(t)
    assert bool(leftovers) == (failure == "crash")
    assert no_write_leases(catalog, t)
    t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert data_files_on_disk(t) == live_paths(t) and t.check().ok


def test_failed_job_leaves_no_snapshot_and_no_files(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-12: every attempt of one task fails; abort deletes what the other tasks wrote."""
    t = new_table(catalog)
    t.append(downlinks(10, seed=0))
    before = t.current_snapshot()
    with pytest.raises(Exception, match="fail-always"):
        writer(frame(spark, downlinks(400, seed=5)), catalog, **{"lakefmt.test.fail-always": "1"}).mode(
            "append").save("artemis.downlinks")
    t.refresh()
    assert t.current_snapshot() == before and len(t.snapshots()) == 1
    assert data_files_on_disk(t) == live_paths(t) and no_write_leases(catalog, t)


def test_abort_after_commit_keeps_the_files(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-12: abort checks whether the job committed before deleting anything; commit is idempotent."""
    t = new_table(catalog)
    source = LakefmtDataSource({"catalog": catalog.warehouse, "path": "artemis.downlinks"})
    schema = frame(spark, downlinks(1, seed=0), 1).schema
    committed: Any = source.writer(schema, False)
    message = committed.write(iter(downlinks(30, seed=1).to_batches()))
    crossed = pickle.loads(pickle.dumps(message))  # what a task sends the driver (SPARK-8)
    assert [vars(f) for f in crossed.files] == [vars(f) for f in message.files] and message.files
    committed.commit([message])
    committed.commit([message])  # a second commit of the same job adds nothing
    committed.abort([message])
    abandoned: Any = source.writer(schema, False)
    lost = abandoned.write(iter(downlinks(30, seed=2).to_batches()))
    abandoned.abort([lost, None])
    t.refresh()
    assert len(t.snapshots()) == 1 and t.scan().count() == 30
    assert data_files_on_disk(t) == live_paths(t) and no_write_leases(catalog, t)
