"""Unfiltered scans of many local files through Arrow's scanner (lakefmt.fragment_scan): the same
result as reading file by file, schema included; files that need more than a read of their
columns (added or widened columns, deletion vectors, READ-12 failures) go file by file."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import fragment_scan
from lakefmt.errors import CorruptDataFileError

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("kind", pa.string()),
    pa.field("small", pa.int32()),
    pa.field("x", pa.float64()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
])


def rows(start: int, n: int = 40) -> pa.Table:
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "kind": pa.array([None if i % 7 == 0 else f"k{i % 3}" for i in range(start, start + n)]),
        "small": pa.array([i % 100 for i in range(start, start + n)], pa.int32()),
        "x": pa.array([i / 3 for i in range(start, start + n)]),
        "ts": pa.array([1_767_225_600_000_000 + i * 3_600_000_000 for i in range(start, start + n)],
                       pa.timestamp("us", tz="UTC")),
    }, schema=SCHEMA)


def fill(t: lakefmt.Table, files: int, start: int = 0) -> None:
    for i in range(files):
        t.append(rows(start + 40 * i).rename_columns(t.schema().names))


@pytest.fixture
def fast_files(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per planned file the fast path saw: True when it took it."""
    seen: list[bool] = []
    original = fragment_scan._fast

    def spy(reader, task, fs):  # type: ignore[no-untyped-def]
        found = original(reader, task, fs)
        seen.append(found[0] is not None)
        return found

    monkeypatch.setattr(fragment_scan, "_fast", spy)
    return seen


def file_by_file(scan: lakefmt.DataScan, monkeypatch: pytest.MonkeyPatch) -> pa.Table:
    with monkeypatch.context() as m:
        m.setattr(fragment_scan, "MIN_FILES", 10**9)
        return scan.to_arrow()


def assert_same(scan: lakefmt.DataScan, monkeypatch: pytest.MonkeyPatch) -> pa.Table:
    expected = file_by_file(scan, monkeypatch)
    got = scan.to_arrow()
    assert got.schema.equals(expected.schema, check_metadata=True)
    assert got.equals(expected)  # same rows in the same order: files in plan order (READ-7)
    return got


def test_plain_table_equals_file_by_file(catalog: lakefmt.Catalog, fast_files, monkeypatch):
    t = catalog.create_table("db.plain", SCHEMA)
    fill(t, 12)
    got = assert_same(t.scan(), monkeypatch)
    assert got.num_rows == 480 and sorted(got.column("id").to_pylist()) == list(range(480))
    assert got.schema == lakefmt.scan.plain_arrow_schema(t.schema()) and not got.schema.field("id").nullable
    local = not t.location.startswith("s3://")
    assert fast_files == ([True] * 12 if local else [])  # an object store reads file by file
    for columns in (["x", "id"], ["ts"], ["kind", "small", "x", "ts", "id"]):
        assert_same(t.scan(columns=columns), monkeypatch)


def test_partitioned_table(local_catalog: lakefmt.Catalog, fast_files, monkeypatch):
    t = local_catalog.create_table("db.parts", SCHEMA, partition_by=["kind", "day(ts)"])
    fill(t, 6)
    assert len(t.plan_files()) > 12
    got = assert_same(t.scan(), monkeypatch)
    assert sorted(got.column("id").to_pylist()) == list(range(240)) and all(fast_files)
    assert_same(t.scan(columns=["kind", "id"]), monkeypatch)


def test_files_written_before_schema_changes(local_catalog: lakefmt.Catalog, fast_files, monkeypatch):
    t = local_catalog.create_table("db.evolving", SCHEMA)
    fill(t, 9)
    with t.update_schema() as u:
        u.rename_column("x", "ratio")
    fill(t, 9, start=10_000)
    assert_same(t.scan(), monkeypatch)
    assert all(fast_files)  # a renamed column is read by field id under its old name (READ-6)
    fast_files.clear()
    with t.update_schema() as u:
        u.add_column("extra", pa.int64())
    for i in range(9):
        t.append(rows(30_000 + 40 * i).rename_columns(t.schema().names[:5])
                 .append_column("extra", pa.array([i] * 40, pa.int64())))
    got = assert_same(t.scan(), monkeypatch)
    assert (fast_files.count(False), fast_files.count(True)) == (18, 9)  # files without ``extra`` read it as nulls, file by file
    assert got.column("extra").null_count == 18 * 40
    fast_files.clear()
    with t.update_schema() as u:
        u.widen_column("small", pa.int64())
    got = assert_same(t.scan(columns=["small", "ratio"]), monkeypatch)
    assert got.schema.field("small").type == pa.int64() and not any(fast_files)


def test_deletion_vectors_are_applied(local_catalog: lakefmt.Catalog, fast_files, monkeypatch):
    t = local_catalog.create_table("db.dv", SCHEMA, properties={"write.delete.mode": "merge-on-read"})
    fill(t, 15)
    t.delete(f"id IN ({', '.join(str(i) for i in range(0, 200, 5))})")
    with_vectors = sum(f.deletion_vector is not None for f in t.plan_files())
    assert with_vectors == 5
    got = assert_same(t.scan(), monkeypatch)
    assert sorted(got.column("id").to_pylist()) == [i for i in range(600) if not (i % 5 == 0 and i < 200)]
    assert fast_files.count(False) == with_vectors and fast_files.count(True) == 10


def test_replaced_truncated_or_missing_file_raises_as_before(local_catalog: lakefmt.Catalog, monkeypatch):
    t = local_catalog.create_table("db.damaged", SCHEMA)
    fill(t, 12)
    paths = [f"{t.location}/{f.path}" for f in t.plan_files()]
    # READ-12: fewer rows than the manifest entry records, field ids kept
    pq.write_table(pq.read_table(paths[3]).slice(0, 2), paths[3])
    with pytest.raises(CorruptDataFileError, match="holds 2 rows but its manifest entry records 40") as info:
        t.scan().to_arrow()
    assert paths[3] in str(info.value)
    os.remove(paths[3])
    with pytest.raises(CorruptDataFileError, match="referenced by the table but missing") as info:
        t.scan().to_arrow()
    assert paths[3] in str(info.value) and isinstance(info.value.__cause__, FileNotFoundError)
    data = Path(paths[8]).read_bytes()
    Path(paths[3]).write_bytes(data)  # restored for the next case: a copy of another file is the same size
    Path(paths[8]).write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptDataFileError, match="is not a readable Parquet file") as info:
        t.scan().to_arrow()
    assert paths[8] in str(info.value) and isinstance(info.value.__cause__, (pa.ArrowInvalid, OSError))


def test_foreign_file_without_field_ids_is_refused(local_catalog: lakefmt.Catalog):
    t = local_catalog.create_table("db.foreign", SCHEMA)
    fill(t, 12)
    path = f"{t.location}/{t.plan_files()[5].path}"
    pq.write_table(rows(200), path)  # same names and row count, no field ids (WRITE-1, READ-12)
    with pytest.raises(CorruptDataFileError, match="has no column with a field id") as info:
        t.scan().to_arrow()
    assert path in str(info.value)
