"""Parquet footers compared as bytes before a one-pass read (spec/compaction.md COMPACT-38).

Real files written by pyarrow and DuckDB: a footer with the first file's version and schema
yields its row count; any difference in the schema, a file that is not Parquet, and a
footer larger than the first read of the file's tail are each handled.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.compaction.footer_bytes import TAIL_BYTES, footer_prefix, read_footer, rows_after_prefix


def _write(path: Path, table: pa.Table) -> str:
    pq.write_table(table, path, compression="zstd")
    return str(path)


def _with_ids(names: list[str], ids: list[int], rows: int) -> pa.Table:
    fields = [pa.field(n, pa.int64(), metadata={b"PARQUET:field_id": str(i).encode()}) for n, i in zip(names, ids)]
    return pa.Table.from_arrays([pa.array(range(rows), pa.int64())] * len(fields), schema=pa.schema(fields))


def test_same_schema_yields_each_files_row_count(tmp_path):
    # spec: COMPACT-38
    first = _write(tmp_path / "a.parquet", _with_ids(["a", "b"], [1, 2], 10))
    other = _write(tmp_path / "b.parquet", _with_ids(["a", "b"], [1, 2], 1234))
    prefix = footer_prefix(read_footer(first))
    assert prefix is not None
    assert rows_after_prefix(read_footer(first), prefix) == 10
    assert rows_after_prefix(read_footer(other), prefix) == 1234 == pq.read_metadata(other).num_rows


def test_any_schema_difference_does_not_match(tmp_path):
    # spec: COMPACT-38
    prefix = footer_prefix(read_footer(_write(tmp_path / "a.parquet", _with_ids(["a", "b"], [1, 2], 10))))
    renamed = _write(tmp_path / "renamed.parquet", _with_ids(["a", "c"], [1, 2], 10))
    other_ids = _write(tmp_path / "ids.parquet", _with_ids(["a", "b"], [1, 3], 10))
    swapped = _write(tmp_path / "swapped.parquet", _with_ids(["b", "a"], [2, 1], 10))
    wider = _write(tmp_path / "wider.parquet", _with_ids(["a", "b", "c"], [1, 2, 3], 10))
    typed = _write(tmp_path / "typed.parquet", pa.table({"a": pa.array(range(10), pa.int32()),
                                                         "b": pa.array(range(10), pa.int64())}))
    for path in (renamed, other_ids, swapped, wider, typed):
        assert rows_after_prefix(read_footer(path), prefix) is None, path


def test_duckdb_written_file_parses(tmp_path):
    """Another writer's footer has the same leading fields."""
    # spec: COMPACT-38
    path = str(tmp_path / "d.parquet")
    duckdb.sql(f"COPY (SELECT range AS a, 'x' || range AS b FROM range(777)) TO '{path}' (FORMAT parquet)")
    footer = read_footer(path)
    prefix = footer_prefix(footer)
    assert prefix is not None and rows_after_prefix(footer, prefix) == 777


def test_not_parquet_and_truncated_files_have_no_footer(tmp_path):
    # spec: COMPACT-38
    text = tmp_path / "t.parquet"
    text.write_bytes(b"not a parquet file at all")
    tiny = tmp_path / "tiny.parquet"
    tiny.write_bytes(b"PAR1")
    whole = Path(_write(tmp_path / "w.parquet", _with_ids(["a"], [1], 5))).read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole[:-1])
    lying = tmp_path / "lying.parquet"
    lying.write_bytes(whole[:4] + (10**6).to_bytes(4, "little") + b"PAR1")  # footer longer than the file
    for path in (text, tiny, cut, lying):
        assert read_footer(str(path)) is None, path
    assert footer_prefix(b"\x00\x01") is None


def test_footer_larger_than_the_first_read(tmp_path):
    """A footer over TAIL_BYTES (many columns) is read whole with a second read."""
    # spec: COMPACT-38
    names = [f"column_with_a_long_name_{i:05d}" for i in range(2500)]
    table = _with_ids(names, list(range(1, len(names) + 1)), 3)
    path = _write(tmp_path / "wide.parquet", table)
    footer = read_footer(path)
    assert footer is not None and len(footer) > TAIL_BYTES
    prefix = footer_prefix(footer)
    assert prefix is not None and rows_after_prefix(footer, prefix) == 3
