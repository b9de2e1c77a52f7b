"""Reading lakefmt tables through Spark: types, pinned snapshots, pruning, exact filters (SPARK-2..SPARK-7)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from lakefmt.spark.commit import JOB_ID
from lakefmt.spark.reader import partition_files
from lakefmt.spark.source import LakefmtDataSource
from tests.compaction.conftest import ALL_TYPES, all_types_rows
from tests.conftest import DOWNLINKS_SCHEMA, downlinks
from tests.spark.conftest import read, sorted_rows, writer

pytestmark = pytest.mark.spark

DAY_US = 86_400_000_000
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def downlinks_table(catalog: lakefmt.Catalog, *, days: int = 4, rows: int = 400) -> lakefmt.Table:
    """One append per day; each writes one file per mission, so ts bounds and partitions both prune."""
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"],
                             sort_by=["payload_id"])
    for day in range(days):
        t.append(downlinks(rows, seed=day, start_us=START_US + day * DAY_US, step_us=DAY_US // rows))
    return t


def test_every_type_round_trips_through_spark(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-3, SPARK-8: read every type through Spark, write it back, get the same rows."""
    src = catalog.create_table("types.src", schema=ALL_TYPES, partition_by=["p"])
    src.append(all_types_rows(300, seed=1))
    df = read(spark, catalog, "types.src")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("p", "int"), ("b", "boolean"), ("i", "int"), ("l", "bigint"), ("f", "float"), ("d", "double"),
        ("dec", "decimal(10,2)"), ("wide", "string"), ("day", "date"), ("t", "bigint"), ("ts", "timestamp_ntz"),
        ("tstz", "timestamp"), ("s", "string"), ("bin", "binary")]

    expected = src.scan().to_arrow()
    got = df.toArrow()
    for name in expected.column_names:
        want = expected.column(name)
        if name == "t":
            want = want.cast(pa.int64())  # time as microseconds since midnight
        elif name == "wide":
            want = want.cast(pa.string())  # decimal(40,4) as its text
        elif name == "tstz":
            got = got.set_column(got.column_names.index(name), name, got.column(name).cast(want.type))
        assert sorted_rows(pa.table({"v": want}), ["v"]) == sorted_rows(pa.table({"v": got.column(name)}), ["v"]), name

    dst = catalog.create_table("types.dst", schema=ALL_TYPES, partition_by=["p"])
    writer(df, catalog).mode("append").save("types.dst")
    assert sorted_rows(dst.refresh().scan().to_arrow()) == sorted_rows(expected)


def test_filters_prune_files_and_match_a_pyarrow_scan(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-5, READ-5, READ-8: pushed filters prune files; every filter gives pyarrow's rows."""
    t = downlinks_table(catalog)
    everything = t.scan().to_arrow()
    total_files = len(t.plan_files())
    day2 = dt.datetime(2026, 1, 3, tzinfo=dt.timezone.utc)
    cases = [
        # (Spark SQL, the same filter for pyarrow, the lakefmt filter Spark's pushed part amounts to)
        ("mission_id = 1", pc.field("mission_id") == 1, "mission_id = 1"),
        ("ts >= timestamp'2026-01-03 00:00:00Z'", pc.field("ts") >= pa.scalar(day2), "ts >= '2026-01-03T00:00:00Z'"),
        ("payload_id IN (2, 5) AND sensor_kind LIKE 'th%' AND NOT mission_id = 2",
         pc.field("payload_id").isin([2, 5]) & pc.starts_with(pc.field("sensor_kind"), "th")
         & (pc.field("mission_id") != 2),
         "payload_id IN (2, 5) AND sensor_kind LIKE 'th%' AND mission_id != 2"),
        ("value > 50 AND mission_id <= 1", (pc.field("value") > 50) & (pc.field("mission_id") <= 1),
         "mission_id <= 1"),  # float comparisons stay with Spark
        ("sensor_kind LIKE '%a%' OR payload_id = 3",
         pc.match_substring(pc.field("sensor_kind"), "a") | (pc.field("payload_id") == 3), None),
    ]
    for sql, arrow_filter, pushed in cases:
        df = read(spark, catalog, "artemis.downlinks", split_size="1").filter(sql)  # one partition per file
        assert sorted_rows(df.toArrow().cast(DOWNLINKS_SCHEMA)) == sorted_rows(everything.filter(arrow_filter)), sql
        planned = len(t.plan_files(pushed)) if pushed else total_files
        assert df.rdd.getNumPartitions() == planned, sql
    assert len(t.plan_files("mission_id = 1")) < total_files
    assert len(t.plan_files("ts >= '2026-01-03T00:00:00Z'")) < total_files


def test_push_filters_keeps_only_what_lakefmt_applies_exactly(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-5: handled filters are planned; the rest are handed back, by reference."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, Not, StringContains, StringStartsWith

    t = downlinks_table(catalog, days=2)
    source = LakefmtDataSource({"catalog": catalog.warehouse, "path": "artemis.downlinks"})
    reader: Any = source.reader(source.schema())
    filters = [EqualTo(("mission_id",), 1), GreaterThan(("value",), 5.0), StringContains(("sensor_kind",), "a"),
               In(("payload_id",), [1, None]), Not(EqualTo(("payload_id",), 3)),
               StringStartsWith(("sensor_kind",), "th"), EqualTo(("mission_id",), 10**12)]
    rest = list(reader.pushFilters(filters))
    assert [id(f) for f in rest] == [id(filters[i]) for i in (1, 2, 3, 6)]
    expected = t.plan_files("mission_id = 1 AND payload_id != 3 AND sensor_kind LIKE 'th%'")
    assert sorted(loc for loc, _ in reader.plan_files()) == sorted(f"{t.location}/{f.path}" for f in expected)


def test_a_dataframe_reads_the_snapshot_it_was_created_on(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-2: the snapshot is pinned when the DataFrame is created; snapshot-id and as-of travel."""
    t = downlinks_table(catalog, days=2, rows=100)
    first = t.snapshots()[0]
    df = read(spark, catalog, "artemis.downlinks")
    assert df.count() == 200
    t.append(downlinks(50, seed=9))
    assert df.count() == 200
    assert read(spark, catalog, "artemis.downlinks").count() == 250
    assert read(spark, catalog, "artemis.downlinks", snapshot_id=str(first.snapshot_id)).count() == 100
    first_current_at = t.history()[0].made_current_at
    assert read(spark, catalog, "artemis.downlinks", as_of=first_current_at.isoformat()).count() == 100
    millis = str(int(first_current_at.timestamp() * 1000))
    assert read(spark, catalog, "artemis.downlinks", as_of=millis).count() == 100


def test_an_empty_table_reads_as_no_rows(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-2: a table without a snapshot has a schema and no rows."""
    catalog.create_table("artemis.empty", schema=DOWNLINKS_SCHEMA)
    df = read(spark, catalog, "artemis.empty")
    assert df.columns == DOWNLINKS_SCHEMA.names and df.filter("mission_id = 1").count() == 0


def test_projection_by_option_or_schema_and_older_files_without_new_columns(
        spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-6, READ-6: ``columns`` and a user schema narrow the read; columns added later read as nulls."""
    t = downlinks_table(catalog, days=1, rows=100)
    with t.update_schema() as update:
        update.add_column("quality", pa.float32())
    t.append(downlinks(10, seed=3).append_column("quality", pa.array([0.5] * 10, pa.float32())))
    df = read(spark, catalog, "artemis.downlinks", columns="payload_id,quality")
    assert df.columns == ["payload_id", "quality"]
    assert df.filter("quality IS NULL").count() == 100 and df.filter("quality = 0.5").count() == 10
    typed = (spark.read.format("lakefmt").schema("value double, ts timestamp")
             .option("catalog", catalog.warehouse).load("artemis.downlinks"))
    assert typed.columns == ["value", "ts"] and typed.count() == 110


def test_small_files_share_input_partitions(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-4: never one task per small file."""
    t = catalog.create_table("artemis.tiny", schema=DOWNLINKS_SCHEMA)
    for i in range(30):
        t.append(downlinks(20, seed=i))
    assert len(t.plan_files()) == 30
    assert read(spark, catalog, "artemis.tiny", min_partitions="1").rdd.getNumPartitions() == 1
    df = read(spark, catalog, "artemis.tiny", min_partitions="3")  # 10 files of ~4 MiB (the open cost) each
    assert df.rdd.getNumPartitions() == 3 and df.count() == 600
    assert partition_files([("a", 100), ("b", 60), ("c", 50), ("d", 10)], 1000, 0, 2) == [
        [("a", 100), ("d", 10)], [("b", 60), ("c", 50)]]  # 110 and 110
    # 10 files of weight 40 (30 + open cost 10) = 400 on 2 cores at most 120 each: 2 rounds, 4 partitions
    bins = partition_files([(str(i), 30) for i in range(10)], 120, 10, 2)
    assert sorted(len(b) for b in bins) == [2, 2, 3, 3]
    assert partition_files([("a", 5)], 120, 10, 4) == [[("a", 5)]]  # never more partitions than files


def test_sql_temporary_view(spark: Any, catalog: lakefmt.Catalog) -> None:
    """docs/spark.md: ``CREATE TEMPORARY VIEW ... USING lakefmt OPTIONS (...)``, read and ``INSERT INTO``."""
    t = downlinks_table(catalog, days=1, rows=100)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW downlinks USING lakefmt "
              f"OPTIONS (catalog '{catalog.warehouse}', path 'artemis.downlinks')")
    total = spark.sql("SELECT count(*) AS n FROM downlinks").collect()[0].n
    ones = spark.sql("SELECT count(*) AS n FROM downlinks WHERE mission_id = 1").collect()[0].n
    assert total == 100 and 0 < ones < 100
    spark.sql("INSERT INTO downlinks SELECT * FROM downlinks WHERE mission_id = 1")
    assert t.refresh().scan().count() == 100 + ones and JOB_ID in t.current_snapshot().summary  # type: ignore[union-attr]
