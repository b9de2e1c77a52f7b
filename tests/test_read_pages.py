"""Reading only the pages that hold matching rows (READ-15), and the per-file fast paths of scans.

A selective read hands pyarrow a copy of the file in which the pages of wide columns that hold
no matching row are pages of nulls. Every case here compares the rows a scan returns with the
same filter applied to every row in Python, as multisets, and checks that pages were in fact
replaced where the case is meant to replace them; page layouts, codecs, page versions, nulls,
dictionaries, deletion vectors and schema changes are varied.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import duckdb_reads, parquet_pages

N = 48_000
WIDE = 180


@pytest.fixture(autouse=True)
def lakefmt_reader_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These cases count the pages lakefmt's own reader decodes: DuckDB's reads (READ-18) are tested in
    test_duckdb_reads.py."""
    monkeypatch.setattr(duckdb_reads, "ENABLED", False)


@lru_cache(maxsize=8)
def rows(start: int = 0, n: int = N) -> pa.Table:
    ids = range(start, start + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "key": pa.array([(i * 7919) % 1000 for i in ids], pa.int32()),
        "kind": pa.array([f"k{i % 7}" for i in ids]),
        "payload": pa.array([None if i % 97 == 0 else f"{i:08d}" + "abcdef0123"[i % 10] * WIDE for i in ids], pa.string()),
        "x": pa.array([float(i % 13) for i in ids]),
    })


def expected(table: pa.Table, predicate, columns: list[str]) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in table.to_pylist() if predicate(r))


def got(t: lakefmt.Table, expr: str, columns: list[str]) -> Counter:
    out = t.scan(filter=expr, columns=columns).to_arrow()
    assert out.column_names == columns
    return Counter(tuple(r[c] for c in columns) for r in out.to_pylist())


@pytest.fixture
def wide(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    """One file of two row groups whose ``payload`` chunks hold several 1 MiB pages each."""
    t = local_catalog.create_table("db.pages", rows(0, 1).schema,
                                   properties={"write.parquet.row-group-rows": str(N // 2)})
    t.append(rows())
    (f,) = t.plan_files()
    footer = pq.ParquetFile(f"{t.location}/{f.path}").metadata
    assert footer.num_row_groups == 2
    assert footer.row_group(0).column(3).total_uncompressed_size > 3 * parquet_pages.PAGE_BYTES
    return t


@pytest.mark.parametrize("expr, predicate", [
    ("id = 12345", lambda r: r["id"] == 12345),
    ("id IN (0, 1, 23999, 24000, 47999)", lambda r: r["id"] in (0, 1, 23999, 24000, 47999)),
    ("key = 17 AND kind = 'k3'", lambda r: r["key"] == 17 and r["kind"] == "k3"),
    ("id = 97", lambda r: r["id"] == 97),  # a null payload
    ("key = 3", lambda r: r["key"] == 3),  # 48 rows: more rows than pages in a chunk, nothing replaced
])
@pytest.mark.parametrize("columns", [["payload"], ["id", "payload", "x"], ["kind", "payload", "key"]])
def test_selective_scan_replaces_pages_and_returns_the_matching_rows(wide, replaced, expr, predicate, columns):
    # spec: READ-15
    assert got(wide, expr, columns) == expected(rows(), predicate, columns)
    if expr.startswith("id = 12345"):
        assert replaced[0] > 0


def test_clustered_matches_replace_pages_however_many(wide, replaced):
    """Matching rows next to each other (a sorted file's) outnumber the chunk's pages but fill one or two
    of them: the others are still replaced (READ-15)."""
    # spec: READ-15
    expr = "id >= 1000 AND id < 1100"
    assert got(wide, expr, ["id", "payload"]) == expected(rows(), lambda r: 1000 <= r["id"] < 1100, ["id", "payload"])
    (f,) = wide.plan_files()
    footer = pq.ParquetFile(f"{wide.location}/{f.path}").metadata
    assert replaced[0] > 0 and 100 > -(-footer.row_group(0).column(3).total_uncompressed_size // parquet_pages.PAGE_BYTES)


def test_spread_matches_read_whole_chunks(wide, replaced):
    """As many pages touched as the chunk has: nothing to skip, the chunk is read whole (READ-15)."""
    # spec: READ-15
    wanted = list(range(0, N // 2, 500))  # one row in every page of the first row group
    expr = "id IN (" + ", ".join(map(str, wanted)) + ")"
    assert got(wide, expr, ["id", "payload"]) == expected(rows(), lambda r: r["id"] in wanted, ["id", "payload"])
    assert replaced[0] == 0


def test_pages_at_every_boundary_of_a_chunk(wide):
    """The first and last row of each page of a chunk (READ-15: a page's value count is its row count)."""
    (f,) = wide.plan_files()
    path = f"{wide.location}/{f.path}"
    footer = pq.ParquetFile(path).metadata
    chunk = footer.row_group(1).column(3)
    start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o)
    with pa.OSFile(path) as source:
        pages = parquet_pages._pages(source, start, start + chunk.total_compressed_size, footer.row_group(1).num_rows)
    assert pages is not None and len(pages) > 3
    edges, first = [], N // 2
    for _, _, kind, count in pages:
        if count:
            edges += [first, first + count - 1]
            first += count
    expr = "id IN (" + ", ".join(map(str, edges)) + ")"
    assert got(wide, expr, ["id", "payload"]) == expected(rows(), lambda r: r["id"] in edges, ["id", "payload"])


def test_sparse_copy_reads_like_the_file(tmp_path):
    """Page versions, codecs, dictionary pages, nulls and a required column: the rows wanted read as stored."""
    table = rows(0, 20_000)
    schema = table.schema.set(0, pa.field("id", pa.int64(), nullable=False))
    table = table.cast(schema)
    for version in ("1.0", "2.0"):
        for codec in ("zstd", "snappy", "none"):
            path = str(tmp_path / f"p-{version}-{codec}.parquet")
            pq.write_table(table, path, row_group_size=8_000, data_page_size=20_000, data_page_version=version,
                           compression=codec)
            footer = pq.ParquetFile(path).metadata
            wanted = {0: [0, 7_999], 1: [], 2: [3, 4, 3_000]}
            columns = list(range(footer.num_columns))
            walk = {(g, c) for g in wanted for c in columns if c in parquet_pages.skippable_columns(footer)}
            assert 0 not in parquet_pages.skippable_columns(footer)  # required: never replaced
            with pa.OSFile(path) as source:
                copy = parquet_pages.sparse_copy(source, footer, source.size(), [0, 1, 2], columns, wanted, walk)
            out = pq.ParquetFile(pa.BufferReader(copy), metadata=footer, pre_buffer=False).read_row_groups(
                [0, 1, 2], use_threads=False)
            at = [g * 8_000 + r for g, rs in wanted.items() for r in rs]
            assert out.take(at).equals(table.take(at)), (version, codec)
            assert out.column("payload").null_count > table.column("payload").null_count  # pages were replaced


def test_headers_not_understood_mean_whole_chunks(tmp_path):
    path = str(tmp_path / "p.parquet")
    pq.write_table(rows(0, 5_000), path, data_page_size=10_000)
    footer = pq.ParquetFile(path).metadata
    chunk = footer.row_group(0).column(3)
    start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o)
    end = start + chunk.total_compressed_size
    with pa.OSFile(path) as source:
        assert parquet_pages._pages(source, start, end, 5_000) is not None
        assert parquet_pages._pages(source, start, end, 4_999) is None  # rows do not add up
        assert parquet_pages._pages(source, start + 1, end, 5_000) is None  # not a header
    assert parquet_pages._null_page(10, 5) is None  # a slot too small for a page of nulls


def test_deleted_rows_and_replaced_pages(wide, replaced):
    """READ-14 with READ-15: a deleted matching row is not returned, the others are, from real pages."""
    wide.set_property("write.delete.mode", "merge-on-read")
    wide.delete("id IN (5, 12345)")
    want = [r for r in rows().to_pylist() if r["id"] in (5, 6, 12345, 12346, 20000)]
    out = wide.scan(filter="id IN (5, 6, 12345, 12346, 20000)", columns=["id", "payload"]).to_arrow()
    assert Counter((r["id"], r["payload"]) for r in out.to_pylist()) == Counter(
        (r["id"], r["payload"]) for r in want if r["id"] not in (5, 12345))
    assert replaced[0] > 0


def test_schema_changes_with_replaced_pages(wide, replaced):
    """A renamed wide column is found by its id, a column added later reads as nulls (READ-6)."""
    with wide.update_schema() as u:
        u.rename_column("payload", "body").add_column("extra", pa.string()).widen_column("key", pa.int64())
    out = wide.scan(filter="id = 12345", columns=["body", "extra", "key"]).to_arrow()
    (row,) = [r for r in rows().to_pylist() if r["id"] == 12345]
    assert out.to_pylist() == [{"body": row["payload"], "extra": None, "key": row["key"]}]
    assert out.schema.field("key").type == pa.int64()
    assert replaced[0] > 0


# -- per-file fast paths: small files read whole, one layout per file schema -----------------------

def test_many_small_files_scan_equals_their_rows(local_catalog):
    """Small files are read with one request each; a file written before a schema change has another layout."""
    t = local_catalog.create_table("db.small", rows(0, 1).schema)
    for start in range(0, 2_000, 100):
        t.append(rows(start, 100))
    with t.update_schema() as u:
        u.add_column("extra", pa.int64()).widen_column("key", pa.int64())
    t.append(rows(2_000, 100).append_column("extra", pa.array(range(100), pa.int64())).set_column(
        1, pa.field("key", pa.int64()), rows(2_000, 100).column("key").cast(pa.int64())))
    out = t.scan().to_arrow()
    assert out.num_rows == 2_100
    assert out.schema.field("key").type == pa.int64()
    assert Counter(out.column("id").to_pylist()) == Counter(range(2_100))
    assert out.column("extra").null_count == 2_000
    sel = t.scan(filter="extra >= 50 OR id = 7", columns=["id", "extra"]).to_arrow()
    assert sorted(sel.column("id").to_pylist()) == [7] + list(range(2_050, 2_100))


# -- evaluating an AND one term at a time (EXPR-10) -------------------------------------------------

@pytest.mark.parametrize("expr", [
    "key = 3 AND kind = 'k2'",
    "kind = 'k2' AND key < 500 AND x <> 4",
    "x > 2 AND key IN (1, 2, 3, 4, 5) AND kind IS NOT NULL",
    "key = 1001 AND kind = 'k1'",
    "kind IN ('k1', 'k6') AND (x >= 12 OR key = 7) AND id <> 3",
    "NOT (key >= 10 OR kind = 'k0') AND x < 5",
    "id >= 0",
])
def test_matching_positions_equal_the_row_mask(expr):
    """A term evaluated on the rows still selected selects what the whole mask does: NULL, NaN, dictionaries."""
    from lakefmt.evaluators import matching_positions, row_mask
    from lakefmt.expressions import bind, to_expression
    from lakefmt.schema import Schema

    n = 5_000
    data = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "key": pa.array([None if i % 17 == 0 else (i * 31) % 1000 for i in range(n)], pa.int32()),
        "kind": pa.array([None if i % 11 == 0 else f"k{i % 7}" for i in range(n)]).dictionary_encode(),
        "payload": pa.array(["p"] * n),
        "x": pa.array([float("nan") if i % 13 == 0 else float(i % 14) for i in range(n)]),
    })
    schema = Schema.from_arrow(rows(0, 1).schema)
    bound = bind(to_expression(expr), schema)
    names = {f.id: f.name for f in schema.fields}.get
    want = pc.indices_nonzero(row_mask(bound, data, names)).to_pylist()
    assert matching_positions(bound, data, names).to_pylist() == want


def test_without_page_skipping_reads_whole_chunks(wide, replaced, monkeypatch):
    # spec: READ-15 (a MAY: a pyarrow this module is not tested on reads whole column chunks)
    monkeypatch.setattr(parquet_pages, "ENABLED", False)
    columns = ["id", "payload", "x"]
    assert got(wide, "id = 12345", columns) == expected(rows(), lambda r: r["id"] == 12345, columns)
    assert replaced[0] == 0
