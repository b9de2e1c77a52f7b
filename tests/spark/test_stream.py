"""The streaming sink: a snapshot per micro-batch, exactly once across restarts (SPARK-14..SPARK-17)."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from lakefmt.idempotency import last_batch_in_history
from lakefmt.spark.commit import BATCH_ID, WRITER_ID
from tests.conftest import DOWNLINKS_SCHEMA, data_files_on_disk, downlinks, live_paths
from tests.spark.conftest import no_garbage, sorted_rows

pytestmark = pytest.mark.spark

START_US = 1_767_225_600_000_000


def source_files(folder: Path, count: int, rows: int) -> pa.Table:
    """``count`` Parquet files of distinct rows for a file stream; returns all their rows."""
    folder.mkdir(parents=True)
    tables = []
    for i in range(count):
        table = downlinks(rows, seed=i, start_us=START_US + i * rows * 60_000_000)
        pq.write_table(table, folder / f"part-{i:03d}.parquet")
        tables.append(table)
    return pa.concat_tables(tables)


def start_stream(spark: Any, catalog: lakefmt.Catalog, source: Path, checkpoint: Path, **options: str) -> Any:
    """One file per micro-batch, every available file, then stop (``availableNow``)."""
    stream = spark.readStream.schema(spark.read.parquet(str(source)).schema).option("maxFilesPerTrigger", 1)
    query = (stream.parquet(str(source)).writeStream.format("lakefmt").option("catalog", catalog.warehouse)
             .option("checkpointLocation", str(checkpoint)))
    for key, value in options.items():
        query = query.option(key, value)
    return query.trigger(availableNow=True).start("artemis.downlinks")


def test_batch_replayed_after_a_crash_between_commit_and_checkpoint_commits_nothing(
        spark: Any, catalog: lakefmt.Catalog, tmp_path: Path) -> None:
    """SPARK-14, SPARK-15, SPARK-16: every row exactly once, one snapshot per batch, no garbage."""
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    rows = source_files(tmp_path / "source", 4, 120)
    checkpoint = tmp_path / "checkpoint"
    crash = {"lakefmt.test.crash-after-commit-batch": "2", "lakefmt.test.marker": str(tmp_path / "crashed")}
    query = start_stream(spark, catalog, tmp_path / "source", checkpoint, **crash)
    with pytest.raises(Exception, match="crash-after-commit-batch"):
        query.awaitTermination()
    # Batch 2 is in the table and in Spark's offset log, but not in its commit log: Spark will replay it.
    assert [s.summary[BATCH_ID] for s in t.refresh().snapshots()] == ["0", "1", "2"]
    assert "2" in os.listdir(checkpoint / "offsets") and "2" not in os.listdir(checkpoint / "commits")

    start_stream(spark, catalog, tmp_path / "source", checkpoint, **crash).awaitTermination()
    t.refresh()
    assert [s.summary[BATCH_ID] for s in t.snapshots()] == ["0", "1", "2", "3"]
    assert len({s.summary[WRITER_ID] for s in t.snapshots()}) == 1  # the query id survives the restart
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(rows)
    assert data_files_on_disk(t) == live_paths(t)  # the replay's files were deleted
    assert t.check().ok


def test_batch_replayed_after_its_snapshot_was_expired_commits_nothing(
        spark: Any, catalog: lakefmt.Catalog, tmp_path: Path) -> None:
    """SPARK-15, PROGRESS-1/3: the replay check reads the catalog's writer progress, which expiry keeps.

    The driver dies after lakefmt committed batch 0 and before Spark's checkpoint recorded
    it; another writer appends; expiry removes the stream's snapshot; the query restarts.
    """
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    stream_rows = source_files(tmp_path / "source", 1, 6_000)
    checkpoint = tmp_path / "checkpoint"
    start_stream(spark, catalog, tmp_path / "source", checkpoint).awaitTermination()
    (stream_snapshot,) = t.refresh().snapshots()
    assert stream_snapshot.summary[BATCH_ID] == "0"
    # A driver killed between the two leaves batch 0 in the offset log and not in the commit log:
    # Spark writes commits/<id> (and its .crc) only after the sink's commit returned, and
    # nothing else in the checkpoint depends on it.
    for name in os.listdir(checkpoint / "commits"):
        if name in ("0", ".0.crc"):
            os.remove(checkpoint / "commits" / name)
    assert "0" in os.listdir(checkpoint / "offsets") and not os.listdir(checkpoint / "commits")

    other_rows = downlinks(1_000, seed=99, start_us=START_US - 10**12)
    catalog.load_table("artemis.downlinks").append(other_rows)
    t.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=1)
    assert not t.refresh().metadata.has_snapshot(stream_snapshot.snapshot_id)
    assert last_batch_in_history(t.metadata, stream_snapshot.summary[WRITER_ID]) is None  # history alone forgot it

    start_stream(spark, catalog, tmp_path / "source", checkpoint).awaitTermination()
    assert "0" in os.listdir(checkpoint / "commits")  # Spark ran batch 0 again, and recorded it this time
    t.refresh()
    assert len(t.snapshots()) == 1  # the replay committed nothing
    assert t.scan().count() == 7_000
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(pa.concat_tables([stream_rows, other_rows]))
    assert t.last_committed_batch(stream_snapshot.summary[WRITER_ID]) == 0
    assert data_files_on_disk(t) == live_paths(t)  # the replay's files were deleted
    assert t.check().ok


def test_stream_and_spark_compaction_together_keep_every_row_once(
        spark: Any, catalog: lakefmt.Catalog, tmp_path: Path) -> None:
    """The seed scenario: a stream commits small files while compaction on Spark rewrites them."""
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"],
                             sort_by=["payload_id"])
    rows = source_files(tmp_path / "source", 8, 150)
    query = start_stream(spark, catalog, tmp_path / "source", tmp_path / "checkpoint")
    committed_groups = 0
    while query.isActive:
        result = t.compaction.run(strategy="sort", engine="spark", spark=spark, min_age_seconds=0,
                                  min_input_files=2)
        committed_groups += result.groups_committed
        time.sleep(0.2)
    query.awaitTermination()
    committed_groups += t.compaction.run(strategy="sort", engine="spark", spark=spark, min_age_seconds=0,
                                         min_input_files=2).groups_committed
    t.refresh()
    assert committed_groups > 0
    assert sum(1 for s in t.snapshots() if s.operation == "append") == 8
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(rows)
    assert len(t.plan_files()) < 8 * 3
    assert t.check().ok and no_garbage(t)
