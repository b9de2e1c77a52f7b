"""Data pages of the files lakefmt writes (WRITE-10) and what selective reads skip of them (READ-15),
and the footers a reader keeps between scans (READ-12).

Page sizes are read back from the files' page headers; every scan is compared, as a multiset of
rows, with the same filter applied to every row in Python.
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import duckdb_reads, file_reader, parquet_pages
from lakefmt.errors import CorruptDataFileError, ValidationError

PAGE = "write.parquet.page-size-bytes"
N = 20_000
WIDE = 200


@pytest.fixture(autouse=True)
def lakefmt_reader_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These cases count the pages lakefmt's own reader decodes: DuckDB's reads (READ-18) are tested in
    test_duckdb_reads.py."""
    monkeypatch.setattr(duckdb_reads, "ENABLED", False)


def rows(start: int = 0, n: int = N) -> pa.Table:
    ids = range(start, start + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "key": pa.array([(i * 7919) % 500 for i in ids], pa.int32()),
        "payload": pa.array([f"{i:08d}" + "0123456789abcdef"[i % 16] * WIDE for i in ids], pa.string()),
        "x": pa.array([i * 1.5 + 0.25 for i in ids], pa.float64()),  # all distinct: plain 8-byte values
    })


def page_rows(path: str, column: str) -> list[list[int]]:
    """Rows of each data page of ``column``, per row group, from the page headers."""
    footer = pq.ParquetFile(path).metadata
    index = footer.schema.names.index(column)
    out = []
    with pa.OSFile(path) as source:
        for g in range(footer.num_row_groups):
            chunk = footer.row_group(g).column(index)
            start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o)
            pages = parquet_pages._pages(source, start, start + chunk.total_compressed_size,
                                         footer.row_group(g).num_rows)
            assert pages is not None
            out.append([count for _, _, kind, count in pages if kind != 2])  # data pages only
    return out


def file_paths(t: lakefmt.Table) -> list[str]:
    return [f"{t.location}/{f.path}" for f in t.plan_files()]


def scanned(t: lakefmt.Table, expr: str, columns: list[str]) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in t.scan(filter=expr, columns=columns).to_arrow().to_pylist())


def expected(table: pa.Table, predicate, columns: list[str]) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in table.to_pylist() if predicate(r))


def test_default_pages_of_a_wide_column_hold_1536_rows(local_catalog):
    # spec: WRITE-10
    t = local_catalog.create_table("db.pages", rows(0, 1).schema)
    t.append(rows())
    (path,) = file_paths(t)
    (wide,) = page_rows(path, "payload")
    assert sum(wide) == N
    assert set(wide[:-1]) == {1536}, wide  # 256 KiB passed at the third size check, every 512 rows
    (narrow,) = page_rows(path, "x")
    assert narrow == [20_000]  # 8-byte values: pyarrow's 20,000-row limit comes first


@pytest.mark.parametrize("size, wide_rows, narrow", [
    (128 * 1024, 768, [16_384, N - 16_384]),  # checked every 256 rows
    (64 * 1024, 384, [8_192, 8_192, N - 16_384]),  # every 128 rows
    (1 << 20, 5120, [20_000]),  # 209-byte strings: 1 MiB passed at 5,120 rows (checked every 1,024)
])
def test_page_size_property_sets_the_pages(local_catalog, size, wide_rows, narrow):
    # spec: WRITE-10, META-12
    t = local_catalog.create_table("db.sized_pages", rows(0, 1).schema, properties={PAGE: str(size)})
    t.append(rows())
    (path,) = file_paths(t)
    (wide,) = page_rows(path, "payload")
    assert sum(wide) == N and set(wide[:-1]) == {wide_rows}, wide
    assert page_rows(path, "x") == [narrow]


def test_compaction_outputs_use_the_page_size(local_catalog):
    # spec: WRITE-10 (compaction writes through the same writer)
    t = local_catalog.create_table("db.compacted", rows(0, 1).schema)
    for i in range(4):
        t.append(rows(i * 5_000, 5_000))
    t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    (path,) = file_paths(t)
    assert os.path.basename(path).startswith("compact-")
    pages = [n for group in page_rows(path, "payload") for n in group]
    assert sum(pages) == N and max(pages) == 1536
    assert scanned(t, "key = 17", ["id", "payload"]) == expected(rows(), lambda r: r["key"] == 17, ["id", "payload"])


@pytest.mark.parametrize("strategy, layout", [("sort", {"sort_by": ["key"]}), ("zorder", {"columns": ["key", "id"]})])
@pytest.mark.parametrize("option, page_rows_max", [
    ({}, 384),  # the default 64 KiB, passed at the third check, every 128 rows
    ({"sorted_page_size_bytes": 1 << 20}, 5120),
])
def test_sorted_outputs_use_small_pages(local_catalog, strategy, layout, option, page_rows_max):
    # spec: COMPACT-16, WRITE-10 (compaction.sorted-page-size-bytes)
    t = local_catalog.create_table(f"db.{strategy}ed", rows(0, 1).schema)
    for i in range(4):
        t.append(rows(i * 5_000, 5_000))
    t.compaction.run(strategy, min_age_seconds=0, min_input_files=2, **layout, **option)
    (path,) = file_paths(t)
    pages = [n for group in page_rows(path, "payload") for n in group]
    assert sum(pages) == N and max(pages) == page_rows_max
    assert scanned(t, "key = 17", ["id", "payload"]) == expected(rows(), lambda r: r["key"] == 17, ["id", "payload"])


def test_sorted_page_size_option_is_checked(local_catalog):
    # spec: COMPACT-1, META-12
    t = local_catalog.create_table("db.bad_sorted_pages", rows(0, 1).schema)
    with pytest.raises(ValidationError, match=">= 1024") as info:
        t.compaction.options(sorted_page_size_bytes=512)
    assert "compaction.sorted-page-size-bytes" in str(info.value)


@pytest.mark.parametrize("value, message", [
    ("0", ">= 1024"),
    ("512", ">= 1024"),
    ("abc", "must be a number"),
    ("131072.5", "must be an integer"),
])
def test_page_size_property_is_checked(local_catalog, value, message):
    # spec: META-12
    with pytest.raises(ValidationError, match=message) as info:
        local_catalog.create_table("db.bad_pages", rows(0, 1).schema, properties={PAGE: value})
    assert PAGE in str(info.value)


def test_smaller_pages_leave_more_undecoded(local_catalog, replaced):
    # spec: READ-15, WRITE-10
    wanted = [3, 9_000, 19_999]
    expr = "id IN (3, 9000, 19999)"
    want = expected(rows(), lambda r: r["id"] in wanted, ["id", "payload"])
    skipped = {}
    for name, props in (("small", {}), ("large", {PAGE: str(1 << 20)})):
        t = local_catalog.create_table(f"db.{name}", rows(0, 1).schema, properties=props)
        t.append(rows())
        replaced[0] = 0
        assert scanned(t, expr, ["id", "payload"]) == want
        skipped[name] = replaced[0]
    for name, size in (("small", 1536), ("large", 5120)):  # rows per page (WRITE-10)
        (pages,) = page_rows(file_paths(local_catalog.load_table(f"db.{name}"))[0], "payload")
        assert set(pages[:-1]) == {size}
        holding = {w // size for w in wanted}
        assert skipped[name] == N - sum(pages[p] for p in holding)  # every row of a page without a wanted row
    assert skipped["small"] > 3 * skipped["large"]


def test_footer_kept_between_scans(local_catalog):
    # spec: READ-12 (a kept footer; the checks still run on every read)
    t = local_catalog.create_table("db.footers", rows(0, 1).schema)
    t.append(rows(0, 10_000))
    t.append(rows(10_000, 10_000))
    want = expected(rows(), lambda r: r["key"] == 17, ["id", "payload"])
    file_reader.FOOTERS.clear()
    assert scanned(t, "key = 17", ["id", "payload"]) == want
    assert len(file_reader.FOOTERS) == 2
    assert scanned(t, "key = 17", ["id", "payload"]) == want  # from the kept footers
    assert len(file_reader.FOOTERS) == 2


def test_file_replaced_after_its_footer_was_kept_fails_the_checks(local_catalog):
    # spec: READ-12, LAYOUT-4: a file replaced by one of another size is parsed anew and refused
    t = local_catalog.create_table("db.replaced", rows(0, 1).schema)
    t.append(rows(0, 10_000))
    t.append(rows(10_000, 10_000))
    file_reader.FOOTERS.clear()
    assert scanned(t, "key = 17", ["id"]) == expected(rows(), lambda r: r["key"] == 17, ["id"])
    path = file_paths(t)[0]
    os.remove(path)
    pq.write_table(rows(0, 9_000), path)  # another writer's file: other size, no field ids, 9,000 rows
    with pytest.raises(CorruptDataFileError, match="READ-12"):
        t.scan(filter="key = 17", columns=["id"]).to_arrow()


def test_pages_of_a_chunk_kept_between_scans(local_catalog, replaced, monkeypatch):
    # spec: READ-15 (the pages found in a chunk kept for the next read of the file; LAYOUT-4)
    t = local_catalog.create_table("db.walked", rows(0, 1).schema)
    t.append(rows())
    walks = [0]
    pages = parquet_pages._pages

    def counting(*args):
        walks[0] += 1
        return pages(*args)

    monkeypatch.setattr(parquet_pages, "_pages", counting)
    parquet_pages.PAGES.clear()
    want = expected(rows(), lambda r: r["id"] in (5, 15_000), ["id", "payload"])
    assert scanned(t, "id IN (5, 15000)", ["id", "payload"]) == want
    first, walked = replaced[0], walks[0]
    assert walked >= 1 and first > 0
    assert scanned(t, "id IN (5, 15000)", ["id", "payload"]) == want
    assert walks[0] == walked  # no chunk walked again
    assert replaced[0] == 2 * first  # the same pages left undecoded again
