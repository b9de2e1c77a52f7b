"""A filtered scan of many files evaluates its filter over a batch of files at once (READ-16).

Every case compares the scan with the same filter applied in Python to every live row, as
multisets, with batches small enough that the files span several of them and files with
different residual filters (READ-13) and different layouts (READ-6) share a batch: files with
no matching row, files where every row matches, nulls and NaN in the keys, a string key renamed
and a column added after some files were written, and rows deleted by deletion vectors (READ-14).
Each scan is also compared with reading each file alone (``FileReader.read``).
"""

from __future__ import annotations

import math
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import duckdb_reads, file_batches
from lakefmt.file_batches import _split, read_batched

FILES = 12
ROWS = 200


def file_rows(i: int) -> pa.Table:
    """File ``i``: ids ``i*ROWS ..``; a string key with nulls; a double with NaN and nulls; a wide column."""
    ids = range(i * ROWS, (i + 1) * ROWS)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "kind": pa.array([None if n % 17 == 0 else f"k{(n // 3) % 5}" for n in ids], pa.string()),
        "x": pa.array([None if n % 23 == 0 else math.nan if n % 19 == 0 else float(n % 9) - 4 for n in ids]),
        "grp": pa.array([i % 3] * ROWS, pa.int32()),  # constant per file: its statistics decide it
        "payload": pa.array([f"{n:06d}" + "p" * 120 for n in ids]),
    })


@pytest.fixture
def many(local_catalog: lakefmt.Catalog, monkeypatch: pytest.MonkeyPatch) -> lakefmt.Table:
    """FILES files of ROWS rows in batches of 5 files; 50-row groups; read by pyarrow, not DuckDB (READ-18)."""
    monkeypatch.setattr(file_batches, "BATCH_FILES", 5)
    monkeypatch.setattr(duckdb_reads, "ENABLED", False)
    t = local_catalog.create_table("db.batches", file_rows(0).schema,
                                   properties={"write.parquet.row-group-rows": "50"})
    for i in range(FILES):
        t.append(file_rows(i))
    assert len(t.plan_files()) == FILES
    return t


def live_rows(t: lakefmt.Table) -> list[dict]:
    """Every live row of the table, read without a filter, with the table's current column names."""
    return t.scan().to_arrow().to_pylist()


def nan_safe(v):
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def as_counter(rows: list[dict], columns: list[str]) -> Counter:
    return Counter(tuple(nan_safe(r[c]) for c in columns) for r in rows)


def lt(v, bound) -> bool:
    return v is not None and not math.isnan(v) and v < bound


CASES = [
    ("kind = 'k2' AND id < 1500", lambda r: r["kind"] == "k2" and r["id"] < 1500),
    ("kind IS NULL OR x < -3", lambda r: r["kind"] is None or lt(r["x"], -3)),
    ("grp = 1 AND kind = 'k0'", lambda r: r["grp"] == 1 and r["kind"] == "k0"),  # residual differs per file
    ("grp = 2 OR id = 5", lambda r: r["grp"] == 2 or r["id"] == 5),  # whole files match, one file one row
    ("x <> 0", lambda r: r["x"] is not None and (math.isnan(r["x"]) or r["x"] != 0)),  # NaN <> 0 is TRUE
    ("NOT (x >= 2)", lambda r: r["x"] is not None and (math.isnan(r["x"]) or r["x"] < 2)),
    ("kind NOT IN ('k1', 'k3') AND x IS NOT NULL", lambda r: r["kind"] not in (None, "k1", "k3")
     and r["x"] is not None),
    ("id = 123456", lambda r: False),  # no file matches
    ("payload >= '001000' AND kind >= 'k3'", lambda r: r["payload"] >= "001000" and (r["kind"] or "") >= "k3"),
]


@pytest.mark.parametrize("expr, predicate", CASES)
@pytest.mark.parametrize("columns", [["id", "payload"], ["kind", "x", "grp"], ["payload"]])
def test_batched_scan_equals_filtering_every_row(many, expr, predicate, columns):
    out = many.scan(filter=expr, columns=columns).to_arrow()
    assert out.column_names == columns
    want = [r for r in live_rows(many) if predicate(r)]
    assert as_counter(out.to_pylist(), columns) == as_counter(want, columns)


@pytest.mark.parametrize("expr, _", CASES)
def test_batched_read_equals_reading_each_file_alone(many, expr, _):
    scan = many.scan(filter=expr)
    tasks = scan.plan().tasks
    reader = scan._make_reader()
    alone = [reader.read(t.location, expected_rows=t.data_file.record_count, data_file=t.data_file)
             for t in tasks]
    batched = read_batched(reader, [(t.location, t.data_file) for t in tasks], threads=3)
    assert len(batched) == len(alone) == len(tasks)
    for a, b in zip(alone, batched):  # file by file: the same rows, in the same order
        assert b.schema == a.schema
        assert [tuple(map(nan_safe, r.values())) for r in b.to_pylist()] == [
            tuple(map(nan_safe, r.values())) for r in a.to_pylist()]


def test_deletion_vectors_in_a_batch(many):
    many.set_property("write.delete.mode", "merge-on-read")
    many.delete("kind = 'k2' AND id >= 600")
    many.delete("grp = 0 AND x < 0")
    assert any(f.deletion_vector is not None for f in many.plan_files())
    for expr, predicate in CASES:
        out = many.scan(filter=expr, columns=["id", "kind", "x"]).to_arrow()
        want = [r for r in live_rows(many) if predicate(r)]
        assert as_counter(out.to_pylist(), ["id", "kind", "x"]) == as_counter(want, ["id", "kind", "x"]), expr
    gone = many.scan(filter="kind = 'k2'", columns=["id"]).to_arrow().column("id").to_pylist()
    assert gone and max(gone) < 600


def test_renamed_key_and_added_column_in_one_batch(many):
    """Files written before a rename and an added column share batches with files written after:
    their keys are read another way (no dictionary; nulls for the new column), rows stay exact."""
    with many.update_schema() as u:
        u.rename_column("kind", "category").add_column("extra", pa.int64())
    for i in range(FILES, FILES + 4):
        rows = file_rows(i).rename_columns(["id", "category", "x", "grp", "payload"])
        many.append(rows.append_column("extra", pa.array([n % 4 for n in range(ROWS)], pa.int64())))
    every = live_rows(many)
    assert len(every) == (FILES + 4) * ROWS
    for expr, predicate in [
        ("category = 'k1' AND id >= 1000", lambda r: r["category"] == "k1" and r["id"] >= 1000),
        ("extra IS NULL AND category = 'k4'", lambda r: r["extra"] is None and r["category"] == "k4"),
        ("extra = 2 OR category IS NULL", lambda r: r["extra"] == 2 or r["category"] is None),
    ]:
        out = many.scan(filter=expr, columns=["id", "category", "extra"]).to_arrow()
        want = [r for r in every if predicate(r)]
        assert as_counter(out.to_pylist(), ["id", "category", "extra"]) == as_counter(
            want, ["id", "category", "extra"]), expr


def test_a_batch_closes_at_its_row_limit(many, monkeypatch):
    monkeypatch.setattr(file_batches, "BATCH_FILES", 1000)
    monkeypatch.setattr(file_batches, "BATCH_ROWS", 3 * ROWS)
    sizes = []
    real = file_batches._read_batch

    def counting(reader, files, threads):
        sizes.append(len(files))
        return real(reader, files, threads)

    monkeypatch.setattr(file_batches, "_read_batch", counting)
    out = many.scan(filter="x < 0", columns=["id"]).to_arrow()
    assert sizes == [3, 3, 3, 3]
    assert sorted(out.column("id").to_pylist()) == sorted(r["id"] for r in live_rows(many) if lt(r["x"], 0))


def test_a_replaced_file_in_a_batch_is_refused(many):
    """READ-12 holds in a batch: a file whose footer disagrees with its manifest entry is named."""
    f = many.plan_files()[4]
    path = f"{many.location}/{f.path}"
    pq.write_table(file_rows(4).slice(0, 10), path)
    with pytest.raises(lakefmt.CorruptDataFileError, match="READ-12"):
        many.scan(filter="kind = 'k1'").to_arrow()


def test_split_positions_over_files():
    positions = pa.array([0, 4, 5, 9, 12, 13], pa.uint64())
    parts = _split(positions, [5, 0, 5, 2, 3])
    assert [p.to_pylist() for p in parts] == [[0, 4], [], [0, 4], [], [0, 1]]
    assert _split(pa.array([], pa.uint64()), [3, 4])[1].to_pylist() == []


def test_files_alike_are_evaluated_together(many, monkeypatch):
    """Files with the same residual and key layout: one evaluation per batch, over all their keys."""
    calls = []
    real = file_batches.matching_positions

    def counting(expr, data, column_name, **kw):
        calls.append(data.num_rows)
        return real(expr, data, column_name, **kw)

    monkeypatch.setattr(file_batches, "matching_positions", counting)
    out = many.scan(filter="kind = 'k3'", columns=["id"]).to_arrow()
    assert calls == [5 * ROWS, 5 * ROWS, 2 * ROWS]  # batches of 5, 5 and 2 files
    assert sorted(out.column("id").to_pylist()) == sorted(r["id"] for r in live_rows(many) if r["kind"] == "k3")


def test_batches_on_every_storage(catalog, monkeypatch):
    """Local files and object-store files (fewer open at once: REMOTE_BATCH_FILES) give the same rows."""
    monkeypatch.setattr(file_batches, "REMOTE_BATCH_FILES", 3)
    monkeypatch.setattr(file_batches, "BATCH_FILES", 3)
    t = catalog.create_table("db.storage", file_rows(0).schema)
    for i in range(7):
        t.append(file_rows(i))
    every = live_rows(t)
    for expr, predicate in CASES[:4]:
        out = t.scan(filter=expr, columns=["id", "kind", "x"]).to_arrow()
        assert as_counter(out.to_pylist(), ["id", "kind", "x"]) == as_counter(
            [r for r in every if predicate(r)], ["id", "kind", "x"]), expr


def test_split_many_positions():
    """Past 65,536 positions the split bisects the Arrow array itself: the same parts."""
    values = range(0, 300_000, 3)
    parts = _split(pa.array(values, pa.uint64()), [100_000, 50_000, 150_000])
    assert [p.to_pylist() for p in parts] == [
        [v for v in values if v < 100_000],
        [v - 100_000 for v in values if 100_000 <= v < 150_000],
        [v - 150_000 for v in values if v >= 150_000]]


@pytest.mark.parametrize("expr, _", CASES[:4])
def test_large_files_are_read_alone_and_the_order_is_kept(many, monkeypatch, expr, _):
    """read_filtered: files above SMALL_FILE_ROWS are read alone, the small ones in batches, and the tables
    come back in plan order, each equal to that file's own read."""
    from lakefmt import file_batches

    for i in (FILES, FILES + 2):  # two files twice the size of the others
        many.append(pa.concat_tables([file_rows(i), file_rows(i + 1)]))
    monkeypatch.setattr(file_batches, "SMALL_FILE_ROWS", ROWS)
    scan = many.scan(filter=expr)
    tasks = scan.plan().tasks
    batched: list[int] = []
    read_batched = file_batches.read_batched
    monkeypatch.setattr(file_batches, "read_batched",
                        lambda reader, files, threads: batched.append(len(files)) or read_batched(reader, files, threads))
    reader = scan._make_reader()
    alone = [reader.read(t.location, expected_rows=t.data_file.record_count, data_file=t.data_file) for t in tasks]
    mixed = file_batches.read_filtered(reader, [(t.location, t.data_file) for t in tasks], threads=3)
    small = sum(1 for t in tasks if t.data_file.record_count <= file_batches.SMALL_FILE_ROWS)
    assert batched == [small] and small > 1  # the large files (if planned) were not in the batch
    assert len(mixed) == len(alone)
    for a, b in zip(alone, mixed):
        assert b.schema == a.schema
        assert [tuple(map(nan_safe, r.values())) for r in b.to_pylist()] == [
            tuple(map(nan_safe, r.values())) for r in a.to_pylist()]
