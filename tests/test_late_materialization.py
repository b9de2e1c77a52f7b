"""Filtered reads fetch the filter's columns first and the rest only where rows matched (READ-8, READ-11).

Every case compares lakefmt's scan with the same filter applied to every row in Python:
the rows must be equal as multisets whatever the filter selects (nothing, one row group,
a few rows spread over several groups, everything), whichever columns are projected,
and when the filter names a column added after the file was written or one whose type
was widened.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt

N = 1200


def rows() -> pa.Table:
    return pa.table({
        "id": pa.array(range(N), pa.int64()),
        "key": pa.array([(i * 7919) % 50 for i in range(N)], pa.int32()),
        "kind": pa.array([f"k{i % 6}" for i in range(N)]),
        "payload": pa.array([f"{i:06d}-" + "x" * 150 for i in range(N)]),
    })


@pytest.fixture
def table(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    t = local_catalog.create_table("db.late", rows().schema,
                                   properties={"write.parquet.row-group-rows": "100"})
    t.append(rows())
    (f,) = t.plan_files()
    assert pq.ParquetFile(f"{t.location}/{f.path}").metadata.num_row_groups == N // 100
    return t


def expected(predicate, columns: list[str]) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in rows().to_pylist() if predicate(r))


def got(t: lakefmt.Table, expr: str, columns: list[str]) -> Counter:
    out = t.scan(filter=expr, columns=columns).to_arrow()
    assert out.column_names == columns
    return Counter(tuple(r[c] for c in columns) for r in out.to_pylist())


@pytest.mark.parametrize("expr, predicate", [
    ("id = 450", lambda r: r["id"] == 450),
    ("key = 3", lambda r: r["key"] == 3),
    ("key = 3 AND kind = 'k2'", lambda r: r["key"] == 3 and r["kind"] == "k2"),
    ("id >= 1150 OR key = 49", lambda r: r["id"] >= 1150 or r["key"] == 49),
    ("id < 0", lambda r: False),
    ("id >= 0", lambda r: True),
    ("kind IN ('k0', 'k5') AND id < 300", lambda r: r["kind"] in ("k0", "k5") and r["id"] < 300),
])
@pytest.mark.parametrize("columns", [["payload"], ["id", "payload"], ["payload", "kind", "id", "key"], ["key"]])
def test_filtered_scan_equals_filtering_every_row(table, expr, predicate, columns):
    assert got(table, expr, columns) == expected(predicate, columns)


def test_filter_on_a_column_added_later_and_a_widened_column(table):
    with table.update_schema() as u:
        u.add_column("extra", pa.int64()).widen_column("key", pa.int64())
    assert got(table, "extra IS NULL AND key = 4", ["payload", "key"]) == expected(
        lambda r: r["key"] == 4, ["payload", "key"])
    assert got(table, "extra = 1", ["payload"]) == Counter()
    out = table.scan(filter="key = 4", columns=["key", "extra"]).to_arrow()
    assert out.schema.field("key").type == pa.int64() and out.column("extra").null_count == out.num_rows > 0
