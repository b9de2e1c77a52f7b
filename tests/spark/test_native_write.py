"""Native-speed writes: Spark's Parquet writer writes, the driver commits one snapshot (SPARK-27..SPARK-30)."""

from __future__ import annotations

import re
import threading
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.1")  # before importing lakefmt.spark (arrow_udf is 4.1+)
import lakefmt.spark
from lakefmt.conversions import to_physical
from lakefmt.errors import SchemaMismatchError, WriteLeaseLostError
from lakefmt.leases import Leases
from lakefmt.spark.commit import JOB_ID
from lakefmt.spark.types import spark_schema
from tests.conftest import DOWNLINKS_SCHEMA, downlinks, live_paths
from tests.spark.conftest import no_garbage, sorted_rows, writer

pytestmark = pytest.mark.spark

TOKEN_NAME = re.compile(r"^part-([0-9a-f]{16})-[0-9a-f]{16}-\d{5}-\d{5}\.parquet$")  # LAYOUT-6 with a token


def files_on_disk(t: lakefmt.Table) -> list[str]:
    """Every file under the table's data folder (staging folders and Spark's hidden files included)."""
    root = Path(t.location) / "data"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def no_write_leases(catalog: lakefmt.Catalog, t: lakefmt.Table) -> bool:
    t.release_write_token()
    return not Leases(catalog).live(t.metadata.table_uuid, "write")


def test_partitioned_write_commits_one_tagged_snapshot_of_exactly_the_rows(spark: Any,
                                                                           catalog: lakefmt.Catalog) -> None:
    """SPARK-27, SPARK-29, SPARK-10: day(ts) + identity; rows, names, field ids, job id, leases, no leftovers."""
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["day(ts)", "mission_id"],
                             sort_by=["payload_id"])
    first = downlinks(500, seed=0)
    t.append(first)
    before = live_paths(t)
    batch = downlinks(3000, seed=1, step_us=600_000_000)  # about 21 days
    df = spark.createDataFrame(batch).repartition(3)
    snapshot = lakefmt.spark.write_native(df, "artemis.downlinks", catalog=catalog)
    t.refresh()
    assert snapshot is not None and t.current_snapshot() == snapshot and len(t.snapshots()) == 2
    assert snapshot.operation == "append" and re.fullmatch(r"[0-9a-f]{32}", snapshot.summary[JOB_ID])
    assert snapshot.summary["added-records"] == "3000"
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(pa.concat_tables([first, batch]))

    added = [f for f in t.plan_files() if f.path not in before]
    names = [TOKEN_NAME.match(f.path.rsplit("/", 1)[-1]) for f in added]
    assert sum(f.record_count for f in added) == 3000 and all(names)
    assert len({m.group(1) for m in names if m}) == 1  # one writer token: the job's (SPARK-13)
    schema, spec = t.schema(), t.spec()
    for f in added:  # each file in its partition's folder (PART-7), holding only that partition's rows
        assert f.path.rsplit("/", 1)[0] == "data/" + spec.partition_path(f.partition, schema)
        rows = pq.read_table(f"{t.location}/{f.path}")
        assert {spec_values(r, spec, schema) for r in spec.compute(rows, schema).to_pylist()} == {f.partition}
        assert rows["payload_id"].to_pylist() == sorted(rows["payload_id"].to_pylist())  # the sort order (WRITE-4)
    arrow = pq.read_schema(f"{t.location}/{added[0].path}")  # WRITE-1: every column carries its field id
    assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in arrow} == {f.name: f.id for f in schema.fields}
    assert t.check().ok and no_write_leases(catalog, t) and no_garbage(t)
    assert not [p for p in files_on_disk(t) if "_staging" in p or p.rsplit("/", 1)[-1].startswith(".")]


def test_partition_values_are_lakefmts_transforms_exactly(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-28, PART-2..PART-5, PART-7: Spark expressions and the bucket UDF agree with lakefmt, edge values too.

    The session's time zone is not UTC: wall-clock timestamps and instants must not shift.
    """
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC")),
                        pa.field("wall", pa.timestamp("us")), pa.field("d", pa.date32()), pa.field("n", pa.int32()),
                        pa.field("kind", pa.string()), pa.field("raw", pa.binary()),
                        pa.field("amount", pa.decimal128(9, 2)), pa.field("ratio", pa.float64())])
    t = catalog.create_table("lab.edges", schema=schema, partition_by=[
        "hour(wall)", "year(ts)", "month(d)", "bucket(4, id)", "bucket(3, kind)", "truncate(10, n)",
        "truncate(2, kind)", "truncate(1, raw)", "truncate(100, amount)", "ratio"])
    utc = timezone.utc
    instants = [datetime(1969, 12, 31, 23, 59, 59, 999999, utc), datetime(2026, 3, 8, 7, 30, tzinfo=utc),
                datetime(1, 1, 1, tzinfo=utc), datetime(9999, 12, 31, 23, 59, 59, 999999, utc), None]
    rows = []
    for i in range(40):
        instant = instants[i % len(instants)]
        rows.append({"id": i * 7919 - 100_000, "ts": instant, "wall": None if instant is None else instant.replace(
            tzinfo=None), "d": None if instant is None else instant.date(), "n": None if i % 9 == 0 else i * 37 - 700,
            "kind": ["", "é日本", "imu", None, "a/b=c%d"][i % 5], "raw": [b"", b"\x00\xff", None, b"A"][i % 4],
            "amount": None if i % 6 == 0 else Decimal(i * 1234 - 20000).scaleb(-2), "ratio": [-0.0, 1.5, None, -2.25][i % 4]})
    data = pa.Table.from_pylist(rows, schema=schema)
    df = spark.createDataFrame(data, schema=spark_schema(t.schema()))
    assert lakefmt.spark.write_native(df.repartition(2), t, distribution="none") is not None
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(data)
    spec, lake_schema = t.spec(), t.schema()
    for f in t.plan_files():
        assert f.path.rsplit("/", 1)[0] == "data/" + spec.partition_path(f.partition, lake_schema)
        written = pq.read_table(f"{t.location}/{f.path}")
        expected = spec.compute(written, lake_schema)
        assert {spec_values(r, spec, lake_schema) for r in expected.to_pylist()} == {tuple(f.partition)}

    lakefmt.spark.write_native(df.filter("id > 0"), t, mode="overwrite")  # SPARK-11
    assert t.current_snapshot().operation == "overwrite"  # type: ignore[union-attr]
    assert sorted_rows(t.scan().to_arrow()) == sorted_rows(data.filter(pa.compute.greater(data["id"], 0)))
    assert t.check().ok and no_garbage(t)


def spec_values(row: dict[str, Any], spec: Any, schema: Any) -> tuple[Any, ...]:
    """A computed partition row in the physical form of DataFile.partition (dates as day numbers)."""
    return tuple(to_physical(t, row[name]) for name, t in spec.partition_type(schema))


@pytest.mark.parametrize("failure", ["null in a required column", "a task raising", "lease lost"])
def test_a_failed_job_commits_nothing_and_leaves_no_file(spark: Any, catalog: lakefmt.Catalog, tmp_path: Path,
                                                          failure: str) -> None:
    """SPARK-12, SPARK-13, SPARK-30: whether Spark's job fails or the commit is refused after Spark wrote every
    file (the job's lease was taken away meanwhile), nothing is committed, no file stays, the leases end."""
    from pyspark.sql import functions as F

    schema = pa.schema([pa.field(f.name, f.type, nullable=f.name != "mission_id") for f in DOWNLINKS_SCHEMA])
    t = catalog.create_table("artemis.strict", schema=schema, partition_by=["mission_id"])
    t.release_write_token()
    df = spark.createDataFrame(downlinks(2000, seed=3)).repartition(4)
    last = F.spark_partition_id() == 3  # only the last task fails: the others write their files first
    if failure == "null in a required column":
        df = df.withColumn("mission_id", F.when(last & (F.col("payload_id") == 5), None).otherwise(F.col("mission_id")))
        expected: tuple[type[BaseException], str] = (SchemaMismatchError, "required column 'mission_id' has null")
    elif failure == "a task raising":
        boom = F.udf(lambda fail, v: 1 // 0 if fail and v == 5 else v, "long")
        df = df.withColumn("payload_id", boom(last, "payload_id"))
        expected = (Exception, "ZeroDivisionError")
    else:
        go = str(tmp_path / "go")  # tasks wait for this file: the test takes the lease away first
        df = df.withColumn("payload_id", F.udf(lambda v: wait_for(go) or v, "long")("payload_id"))
        expected = (WriteLeaseLostError, "expired or was taken over")
    job = threading.Thread(target=lambda: outcome.append(run(lambda: lakefmt.spark.write_native(
        df, t, distribution="none"))))
    outcome: list[BaseException | None] = []
    job.start()
    if failure == "lease lost":
        leases = Leases(catalog)
        while not (live := leases.live(t.metadata.table_uuid, "write")) and job.is_alive():
            job.join(0.05)  # the job takes its lease before Spark starts (SPARK-13)
        leases.release(t.metadata.table_uuid, "write", [live[0].key], owner=live[0].owner)
        Path(go).touch()
    job.join()
    assert isinstance(outcome[0], expected[0]) and re.search(expected[1], str(outcome[0])), outcome
    t.refresh()
    assert t.current_snapshot() is None and files_on_disk(t) == [] and no_write_leases(catalog, t)


def run(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None


def wait_for(path: str) -> None:
    """In a Spark task: block until ``path`` exists (an event the test sets)."""
    import os
    import time

    while not os.path.exists(path):
        time.sleep(0.02)


def test_a_dataframe_the_table_cannot_store_is_refused_like_the_python_path(spark: Any,
                                                                             catalog: lakefmt.Catalog) -> None:
    """SPARK-9: the same SchemaMismatchError as format("lakefmt"), before any lease or file."""
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    df = spark.createDataFrame(downlinks(20, seed=0))
    for bad, message in [(df.selectExpr("*", "1 AS extra"), "the table does not have: \\['extra'\\]"),
                         (df.selectExpr("ts", "CAST(payload_id AS STRING) AS payload_id"),
                          "column 'payload_id' has Spark type string")]:
        with pytest.raises(SchemaMismatchError, match=message):
            lakefmt.spark.write_native(bad, "artemis.downlinks", catalog=catalog)
        with pytest.raises(Exception, match=message):
            writer(bad, catalog).mode("append").save("artemis.downlinks")
    t.refresh()
    assert t.current_snapshot() is None and files_on_disk(t) == [] and no_write_leases(catalog, t)
