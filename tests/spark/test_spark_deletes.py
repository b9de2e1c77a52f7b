"""Spark and deletion vectors: reads drop deleted rows, Spark compaction applies them (READ-14, COMPACT-32)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from tests.compaction.conftest import small_files_table
from tests.spark.conftest import no_garbage, read, sorted_rows

pytestmark = pytest.mark.spark


def test_spark_reads_only_live_rows_and_time_travels_before_the_delete(spark: Any, catalog: lakefmt.Catalog) -> None:
    """READ-14, SPARK-22 through Spark: a scan, a pushed filter and a count return the live rows; the snapshot
    before the deletes returns every row; the snapshot between them has the first delete's vectors."""
    t = small_files_table(catalog, appends=3, rows=400)
    all_rows = t.scan().to_arrow()
    before = t.current_snapshot().snapshot_id
    t.delete("payload_id = 3")
    middle = t.current_snapshot().snapshot_id
    t.delete("sensor_kind = 'imu' AND mission_id = 1")
    assert all(f.deletion_vector is not None for f in t.plan_files())
    live = t.scan().to_arrow()
    names = live.column_names

    df = read(spark, catalog, "artemis.downlinks")
    assert sorted_rows(df.toArrow(), names) == sorted_rows(live, names)
    assert df.count() == live.num_rows < all_rows.num_rows
    filtered = df.filter("payload_id = 3 OR (mission_id = 1 AND sensor_kind = 'imu')")
    assert filtered.count() == 0
    assert read(spark, catalog, "artemis.downlinks", filter="payload_id = 4").count() == \
        t.scan("payload_id = 4").count() > 0
    old = read(spark, catalog, "artemis.downlinks", snapshot_id=str(before))
    assert sorted_rows(old.toArrow(), names) == sorted_rows(all_rows, names)
    between = read(spark, catalog, "artemis.downlinks", snapshot_id=str(middle)).toArrow()
    assert sorted_rows(between, names) == sorted_rows(t.scan(snapshot_id=middle).to_arrow(), names)
    assert between.num_rows > live.num_rows


@pytest.mark.parametrize("strategy, options", [("binpack", {}), ("sort", {"sort_by": ["value"]})])
def test_spark_compaction_drops_deleted_rows(spark: Any, catalog: lakefmt.Catalog, strategy: str,
                                             options: dict[str, Any]) -> None:
    """COMPACT-32, SPARK-22 on the ``spark`` engine: each task gets the inputs with their vectors; the outputs
    hold exactly the live rows and carry no vector."""
    t = small_files_table(catalog, appends=5, rows=300)
    t.delete("payload_id IN (1, 6)")
    expected = t.scan().to_arrow()
    deleted = sum(f.deleted_record_count for f in t.plan_files())
    result = t.compaction.run(strategy, engine="spark", spark=spark, min_age_seconds=0, **options)
    assert result.groups_committed == result.groups_planned == 3, result.summary()
    assert result.deleted_rows_dropped == deleted > 0
    t.refresh()
    files = t.plan_files()
    assert all(f.deletion_vector is None for f in files)
    stored = pa.concat_tables([pq.read_table(f"{t.location}/{f.path}").select(expected.column_names)
                               for f in files])
    assert sorted_rows(stored) == sorted_rows(expected) == sorted_rows(t.scan().to_arrow())
    assert t.check().ok and no_garbage(t)
