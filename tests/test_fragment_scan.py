"""Unfiltered scans of many local files through Arrow's scanner (lakefmt.fragment_scan): the same
result as reading file by file, schema included; files that need more than a read of their
columns (added or widened columns, deletion vectors, READ-12 failures) go file by file."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset  # loaded, so a scan of MIN_FILES files takes the scanner (use_scanner)
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import duckdb_reads, fragment_scan
from lakefmt.errors import CorruptDataFileError

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("kind", pa.string()),
    pa.field("small", pa.int32()),
    pa.field("x", pa.float64()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
])


@pytest.fixture(autouse=True)
def arrow_scanner_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These cases test lakefmt's own reader of many files: DuckDB's (READ-18) is tested in test_duckdb_reads.py."""
    monkeypatch.setattr(duckdb_reads, "ENABLED", False)


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


class Paths:
    """How a scan read its planned files: the sizes of Arrow scans, the files read by themselves."""

    def __init__(self) -> None:
        self.scans: list[int] = []
        self.alone: list[str] = []

    def clear(self) -> None:
        self.scans.clear()
        self.alone.clear()


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> Paths:
    seen = Paths()
    scan, read_each = fragment_scan._scan, fragment_scan._read_each

    def scan_spy(reader, layout, fragments):  # type: ignore[no-untyped-def]
        seen.scans.append(len(fragments))
        return scan(reader, layout, fragments)

    def read_each_spy(reader, tasks, threads):  # type: ignore[no-untyped-def]
        seen.alone += [task.location for task in tasks]
        return read_each(reader, tasks, threads)

    monkeypatch.setattr(fragment_scan, "_scan", scan_spy)
    monkeypatch.setattr(fragment_scan, "_read_each", read_each_spy)
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


def test_plain_table_equals_file_by_file(catalog: lakefmt.Catalog, paths, monkeypatch):
    t = catalog.create_table("db.plain", SCHEMA)
    fill(t, 12)
    got = assert_same(t.scan(), monkeypatch)
    assert got.num_rows == 480 and sorted(got.column("id").to_pylist()) == list(range(480))
    assert got.schema == lakefmt.scan.plain_arrow_schema(t.schema()) and not got.schema.field("id").nullable
    local = not t.location.startswith("s3://")
    assert paths.scans == ([12] if local else []) and paths.alone == []  # an object store: no fragment scan
    for columns in (["x", "id"], ["ts"], ["kind", "small", "x", "ts", "id"]):
        assert_same(t.scan(columns=columns), monkeypatch)


def test_partitioned_table(local_catalog: lakefmt.Catalog, paths, monkeypatch):
    t = local_catalog.create_table("db.parts", SCHEMA, partition_by=["kind", "day(ts)"])
    fill(t, 6)
    assert len(t.plan_files()) > 12
    got = assert_same(t.scan(), monkeypatch)
    assert sorted(got.column("id").to_pylist()) == list(range(240)) and paths.alone == []
    assert paths.scans == [len(t.plan_files())]  # one scan, every footer read by the scanner
    assert_same(t.scan(columns=["kind", "id"]), monkeypatch)


def test_files_written_before_schema_changes(local_catalog: lakefmt.Catalog, paths, monkeypatch):
    t = local_catalog.create_table("db.evolving", SCHEMA)
    fill(t, 9)
    with t.update_schema() as u:
        u.rename_column("x", "ratio")
    fill(t, 9, start=10_000)
    assert_same(t.scan(), monkeypatch)
    assert paths.alone == []  # a renamed column is read by field id under its old name (READ-6)
    paths.clear()
    with t.update_schema() as u:
        u.add_column("extra", pa.int64())
    for i in range(9):
        t.append(rows(30_000 + 40 * i).rename_columns(t.schema().names[:5])
                 .append_column("extra", pa.array([i] * 40, pa.int64())))
    got = assert_same(t.scan(), monkeypatch)
    assert len(set(paths.alone)) == 18  # files without ``extra`` read it as nulls, file by file
    assert got.column("extra").null_count == 18 * 40
    paths.clear()
    with t.update_schema() as u:
        u.widen_column("small", pa.int64())
    got = assert_same(t.scan(columns=["small", "ratio"]), monkeypatch)
    assert got.schema.field("small").type == pa.int64() and len(set(paths.alone)) == 27


def test_deletion_vectors_are_applied(local_catalog: lakefmt.Catalog, paths, monkeypatch):
    t = local_catalog.create_table("db.dv", SCHEMA, properties={"write.delete.mode": "merge-on-read"})
    fill(t, 15)
    t.delete(f"id IN ({', '.join(str(i) for i in range(0, 200, 5))})")
    with_vectors = sum(f.deletion_vector is not None for f in t.plan_files())
    assert with_vectors == 5
    got = assert_same(t.scan(), monkeypatch)
    assert sorted(got.column("id").to_pylist()) == [i for i in range(600) if not (i % 5 == 0 and i < 200)]
    assert len(paths.alone) == with_vectors and sum(paths.scans) == 10


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


@pytest.mark.parametrize("index", [0, 5, 11])  # first (its layout is not used), middle, last
def test_foreign_file_without_field_ids_is_refused(local_catalog: lakefmt.Catalog, index: int):
    t = local_catalog.create_table("db.foreign", SCHEMA)
    fill(t, 12)
    path = f"{t.location}/{t.plan_files()[index].path}"
    pq.write_table(rows(200), path)  # same names and row count, no field ids (WRITE-1, READ-12)
    with pytest.raises(CorruptDataFileError, match="has no column with a field id") as info:
        t.scan().to_arrow()
    assert path in str(info.value)


def test_files_of_another_schema_among_alike_ones_are_read_by_their_own_layout(
        local_catalog: lakefmt.Catalog, paths, monkeypatch):
    """READ-17: a file whose footer differs from the layout the scanner read it with has its rows read
    again by field id with its own layout; the others keep theirs. Row counts and field ids are kept."""
    t = local_catalog.create_table("db.mixed", SCHEMA)
    fill(t, 20)
    files = [f"{t.location}/{f.path}" for f in t.plan_files()]
    before = t.scan().to_arrow()
    extra = pq.read_table(files[7])  # a column the table does not have, with a field id of its own
    pq.write_table(extra.append_column(pa.field("other", pa.int64(), metadata={"PARQUET:field_id": "99"}),
                                       pa.array(range(40), pa.int64())), files[7])
    reordered = pq.read_table(files[12])  # the same columns in another order: read by field id (READ-6)
    pq.write_table(reordered.select(["ts", "x", "small", "kind", "id"]), files[12])
    for columns in (None, ["x", "id"], ["kind"]):
        paths.clear()
        got = assert_same(t.scan(columns=columns), monkeypatch)
        assert sorted(got.to_pylist(), key=repr) == sorted(before.select(got.column_names).to_pylist(), key=repr)
        assert paths.scans[0] == 20 and set(paths.alone) == {files[7], files[12]}


def test_unreadable_first_file_raises_its_own_error(local_catalog: lakefmt.Catalog, paths):
    t = local_catalog.create_table("db.first", SCHEMA)
    fill(t, 12)
    first = f"{t.location}/{t.plan_files()[0].path}"
    Path(first).write_bytes(b"not parquet")
    with pytest.raises(CorruptDataFileError, match="is not a readable Parquet file") as info:
        t.scan().to_arrow()
    assert first in str(info.value)


def test_file_with_same_columns_but_other_field_ids_is_read_by_its_own_layout(
        local_catalog: lakefmt.Catalog, paths, monkeypatch):
    """READ-17: a file whose columns have the layout's names and types but another field id is not
    read as that layout; read by field id (READ-6), its column of an unknown field id is not the field's."""
    t = local_catalog.create_table("db.ids", SCHEMA)
    fill(t, 12)
    files = [f"{t.location}/{f.path}" for f in t.plan_files()]
    changed = pq.read_table(files[9])
    at = changed.schema.get_field_index("kind")
    schema = changed.schema.set(at, changed.schema.field(at).with_metadata({"PARQUET:field_id": "99"}))
    pq.write_table(changed.cast(schema), files[9])
    got = assert_same(t.scan(), monkeypatch)
    assert paths.scans[0] == 12 and paths.alone == [files[9]]
    ids = set(changed.column("id").to_pylist())
    assert [r["kind"] for r in got.to_pylist() if r["id"] in ids] == [None] * 40
    assert got.num_rows == 12 * 40 and got.column("kind").null_count > 40


def test_same_parquet_schema_with_another_arrow_schema_is_read_by_its_own_layout(
        local_catalog: lakefmt.Catalog, paths, monkeypatch):
    """READ-17: the Parquet schema (field ids included) alone does not decide the Arrow schema: a file
    whose ``ARROW:schema`` metadata makes a column ``large_string`` is read by itself, while a file
    rewritten with the metadata but the same Arrow schema is still read by the scanner."""
    t = local_catalog.create_table("db.arrow_meta", SCHEMA)
    fill(t, 12)
    files = [f"{t.location}/{f.path}" for f in t.plan_files()]
    before = t.scan().to_arrow()
    assert pq.read_metadata(files[4]).metadata is None  # lakefmt's files carry no key-value metadata
    large = pq.read_table(files[4])
    at = large.schema.get_field_index("kind")
    schema = large.schema.set(at, large.schema.field(at).with_type(pa.large_string()))
    pq.write_table(large.cast(schema), files[4])  # same Parquet schema and field ids; ARROW:schema differs
    assert pq.read_metadata(files[4]).schema.equals(pq.read_metadata(files[5]).schema)
    pq.write_table(pq.read_table(files[8]), files[8])  # ARROW:schema added, the same Arrow schema
    got = assert_same(t.scan(), monkeypatch)
    assert paths.scans[0] == 12 and paths.alone == [files[4]]
    assert got.schema.field("kind").type == pa.string()
    assert sorted(got.to_pylist(), key=repr) == sorted(before.to_pylist(), key=repr)


def test_fs_path_of_a_normal_local_path_is_what_normalizing_gives(tmp_path: Path):
    """The fast path of FileIO.fs_path for already normal local paths returns normalize_location's answer."""
    from lakefmt.io import FileIO, normalize_location

    io = FileIO(str(tmp_path))
    for location in ("/a/b.parquet", "/a/b/", "/a//b", "//a", "/a/./b", "/a/../b", "/a/.hidden/c", "/a/b/.",
                     "/a/b/..", "/", "/~x/y", "/a b/c", f"{tmp_path}/data/x.parquet", "relative/x", "~/x"):
        assert io.fs_path(location) == normalize_location(location), location
