"""Native reads: lakefmt plans, Spark's own Parquet reader reads (SPARK-23..SPARK-26, READ-6, READ-8, READ-14)."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from lakefmt.errors import SchemaError
from lakefmt.spark import read_native
from tests.compaction.conftest import ALL_TYPES, all_types_rows
from tests.conftest import DOWNLINKS_SCHEMA, downlinks
from tests.spark.conftest import read

pytestmark = pytest.mark.spark

DAY_US = 86_400_000_000
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def multiset(table: pa.Table, names: list[str] | None = None) -> list[tuple]:
    """Rows as a sorted list of tuples; NaN becomes a marker so that equal rows compare equal."""
    names = names or table.column_names
    def cell(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v
    return sorted((tuple(cell(r[n]) for n in names) for r in table.select(names).to_pylist()), key=repr)


def same(df: Any, expected: pa.Table) -> None:
    got = df.toArrow()
    assert got.column_names == expected.column_names
    assert multiset(got) == multiset(expected)


def test_native_read_follows_field_ids_deletes_and_time_travel(spark: Any, catalog: lakefmt.Catalog) -> None:
    """READ-6 through Spark's reader: a renamed column, an added one, two widened ones, and a new column that
    reuses the renamed column's old name (read under a private name, SPARK-23, so Spark's name-based Parquet
    filter pushdown cannot use the old column's statistics); READ-14: vectors applied, time travel sees
    the vectors of its snapshot."""
    schema = pa.schema([("k", pa.int32()), ("f", pa.float32()), ("old", pa.int64()), ("s", pa.string())])
    t = catalog.create_table("ns.evolving", schema=schema, properties={"write.parquet.row-group-rows": "50"})
    t.append(pa.table({"k": pa.array(range(300), pa.int32()),
                       "f": pa.array([float("nan") if i % 7 == 0 else i / 4 for i in range(300)], pa.float32()),
                       "old": list(range(1000, 1300)), "s": [f"s{i % 5}" for i in range(300)]}, schema=schema))
    first = t.current_snapshot().snapshot_id
    with t.update_schema() as u:
        u.rename_column("old", "renamed").widen_column("k", "long").widen_column("f", "double")
    with t.update_schema() as u:
        u.add_column("old", "long").add_column("extra", "string")
    t.append(pa.table({"k": [2**40, 5], "f": [0.5, float("nan")], "renamed": [7, 8], "s": ["s1", "s9"],
                       "old": [70, 80], "extra": ["x", "y"]}))
    before_delete = t.current_snapshot().snapshot_id
    t.delete("k >= 100 AND k < 160")  # the third row group of 50 rows and part of the fourth
    t.delete("s = 's3'")
    assert any(f.deletion_vector is not None for f in t.plan_files())

    same(read_native(spark, t), t.scan().to_arrow())
    same(read_native(spark, "ns.evolving", catalog=catalog), t.scan().to_arrow())  # by name, loaded afresh
    for snapshot in (first, before_delete):
        same(read_native(spark, t, snapshot_id=snapshot), t.scan(snapshot_id=snapshot).to_arrow())
    assert read_native(spark, t, snapshot_id=first).columns == ["k", "f", "old", "s"]  # that snapshot's schema

    filters = ["old IS NULL", "old = 70 OR renamed = 1005", f"k > {2**32}", "f > 10 AND f <= 20",
               "NOT (f < 50)", "f != 0.5", "s IN ('s1', 's9') AND k < 120", "extra IS NOT NULL OR k = 149"]
    for text in filters:
        same(read_native(spark, t, filter=text, columns=["k", "renamed", "old", "f"]),
             t.scan(text, columns=["k", "renamed", "old", "f"]).to_arrow())
    assert read_native(spark, t, filter="old IS NULL").count() == t.scan("old IS NULL").count() > 0


def test_a_filter_prunes_files_and_returns_exact_rows(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-23/SPARK-24: only the planned files are read (Spark's input files), and the rows are exactly
    lakefmt's, also for a filter over deleted rows and a time-travel read of the same filter."""
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    for day in range(4):
        t.append(downlinks(300, seed=day, start_us=START_US + day * 86_400_000_000, step_us=DAY_US // 300))
    before = t.current_snapshot().snapshot_id
    t.delete("payload_id = 3 AND sensor_kind = 'imu'")
    text = "mission_id = 1 AND ts >= '2026-01-02T00:00:00Z' AND ts < '2026-01-03T00:00:00Z' AND payload_id IN (3, 4)"
    planned = t.plan_files(text)
    assert 0 < len(planned) < len(t.plan_files())
    df = read_native(spark, t, filter=text)
    assert len(df.inputFiles()) == len(planned) == 1
    assert {p.rsplit("/", 1)[-1] for p in df.inputFiles()} == {f.path.rsplit("/", 1)[-1] for f in planned}
    same(df, t.scan(text).to_arrow())
    assert df.count() == t.scan(text).count() > 0
    old = read_native(spark, t, filter=text, snapshot_id=before)
    same(old, t.scan(text, snapshot_id=before).to_arrow())
    assert old.count() > df.count()
    assert read_native(spark, t, filter="mission_id = 7").count() == 0  # nothing planned: an empty frame
    assert read_native(spark, t, filter="mission_id = 7").columns == DOWNLINKS_SCHEMA.names


def test_native_read_types_and_refusals(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-3 through Spark's reader (time as microseconds, timestamps unshifted in a New York session) and
    filters on every type; a decimal wider than 38 digits and the ``native`` option are refused clearly."""
    t = catalog.create_table("types.src", schema=ALL_TYPES, partition_by=["p"])
    t.append(all_types_rows(300, seed=1))
    columns = [n for n in ALL_TYPES.names if n != "wide"]
    df = read_native(spark, t, columns=columns)
    assert [f.dataType.simpleString() for f in df.schema] == [
        "int", "boolean", "int", "bigint", "float", "double", "decimal(10,2)", "date", "bigint", "timestamp_ntz",
        "timestamp", "string", "binary"]
    expected = t.scan(columns=columns).to_arrow()
    expected = expected.set_column(columns.index("t"), "t", expected.column("t").cast(pa.int64()))
    same(df, expected)
    for text in ["ts >= '2026-01-05T00:00:00' AND tstz < '2026-01-09T00:00:00Z'", "day < '1990-01-01' OR b = true",
                 "dec > 100.5 AND s LIKE 'payload-1%'", "t < '06:00:00' AND f = 2.25", "bin IS NULL OR i = 7"]:
        want = t.scan(text, columns=["i", "s"]).to_arrow()
        same(read_native(spark, t, filter=text, columns=["i", "s"]), want)
    with pytest.raises(SchemaError, match="'wide' is decimal.*38 digits"):
        read_native(spark, t)
    with pytest.raises(Exception, match="read_native"):
        read(spark, catalog, "types.src", native="true").count()
