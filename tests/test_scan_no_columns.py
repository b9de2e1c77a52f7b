"""Scans that ask for no column (``columns=[]``): a row count, as ``SELECT count(*)`` would give.

The result has no column and as many rows as the scan with every column returns (READ-6,
READ-8, READ-14), whichever path reads the files: one file or many, with or without a
filter, with rows deleted, through ``to_arrow`` or ``to_batches``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakefmt


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"a": pa.array(range(start, start + n), pa.int64()),
                     "b": pa.array([f"v{i % 7}" for i in range(start, start + n)], pa.string())})


@pytest.fixture(params=[1, 24], ids=["one-file", "many-files"])
def table(local_catalog: lakefmt.Catalog, request: pytest.FixtureRequest) -> lakefmt.Table:
    t = local_catalog.create_table("db.counted", rows(0, 1).schema)
    files = request.param
    for i in range(files):
        t.append(rows(i * 1_000, 1_000 if files > 1 else 24_000))
    return t


@pytest.mark.parametrize("expr", [None, "a > 10", "a = 5", "b = 'v3' AND a < 20000", "a < 0"])
def test_no_columns_counts_the_rows(table, expr):
    # spec: READ-6, READ-8
    want = table.scan(filter=expr).to_arrow().num_rows
    got = table.scan(filter=expr, columns=[]).to_arrow()
    assert got.num_columns == 0 and got.num_rows == want
    assert sum(b.num_rows for b in table.scan(filter=expr, columns=[]).to_batches()) == want


def test_no_columns_leaves_deleted_rows_out(table):
    # spec: READ-14
    table.delete("b = 'v1'")
    assert any(f.deletion_vector is not None for f in table.plan_files())
    for expr in (None, "a >= 100"):
        want = table.scan(filter=expr).to_arrow().num_rows
        assert want == sum(1 for r in range(24_000) if f"v{r % 7}" != "v1" and (expr is None or r >= 100))
        assert table.scan(filter=expr, columns=[]).to_arrow().num_rows == want
