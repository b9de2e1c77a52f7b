"""Row-group skipping by footer statistics (READ-11): fewer row groups read, the same rows."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.expressions import bind, to_expression
from lakefmt.scan import matching_row_groups


def sorted_table(catalog: lakefmt.Catalog, rows_per_group: int = 100) -> lakefmt.Table:
    schema = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("x", pa.float64()), ("maybe", pa.int32())])
    t = catalog.create_table("db.rg", schema, properties={"write.parquet.row-group-rows": str(rows_per_group)})
    n = 1000
    t.append(pa.table({
        "id": pa.array(range(n), pa.int64()),
        "kind": pa.array([f"k{i // 250}" for i in range(n)]),
        "x": pa.array([math.nan if i % 97 == 0 else float(i) for i in range(n)]),
        "maybe": pa.array([None if i < 300 else i for i in range(n)], pa.int32()),
    }))
    return t


def groups_read(t: lakefmt.Table, expr: str) -> list[int]:
    (task,) = t.scan().plan().tasks
    with t.io.open_input(task.location) as f:
        return matching_row_groups(pq.ParquetFile(f), t.schema(), bind(to_expression(expr), t.schema()), None)


@pytest.mark.parametrize("expr, groups, keep", [
    ("id = 450", [4], lambda r: r["id"] == 450),
    ("id >= 950", [9], lambda r: r["id"] >= 950),
    ("id < 100 OR id > 899", [0, 9], lambda r: r["id"] < 100 or r["id"] > 899),
    ("id IN (5, 905)", [0, 9], lambda r: r["id"] in (5, 905)),
    ("kind = 'k1'", [2, 3, 4], lambda r: r["kind"] == "k1"),
    ("kind = 'k1' AND id < 300", [2], lambda r: r["kind"] == "k1" and r["id"] < 300),
    ("maybe IS NULL", [0, 1, 2], lambda r: r["maybe"] is None),
    ("maybe > 0", [3, 4, 5, 6, 7, 8, 9], lambda r: r["maybe"] is not None and r["maybe"] > 0),
    ("id = 5000", [], lambda r: False),
])
def test_only_matching_row_groups_are_read(local_catalog, expr, groups, keep):
    t = sorted_table(local_catalog)
    assert groups_read(t, expr) == groups
    every_row = t.scan().to_arrow().to_pylist()
    got = t.scan(filter=expr).to_arrow().to_pylist()
    want = [r for r in every_row if keep(r)]
    assert sorted(map(repr, got)) == sorted(map(repr, want))  # repr: NaN != NaN as a value


def test_nan_and_float_bounds_stay_conservative(local_catalog):
    t = sorted_table(local_catalog)
    # NaN rows (every 97th id) sit in every row group; a NaN comparison is never TRUE (READ-8).
    assert t.scan(filter="x > 990.5").to_arrow().column("id").to_pylist() == [991, 992, 993, 994, 995, 996,
                                                                              997, 998, 999]
    assert t.scan(filter="x != 5.0").count() == 1000 - 1 - 0  # NaN != 5.0 is TRUE


def test_a_widened_column_is_not_used_to_skip(local_catalog):
    schema = pa.schema([("n", pa.int32())])
    t = local_catalog.create_table("db.widen", schema, properties={"write.parquet.row-group-rows": "10"})
    t.append(pa.table({"n": pa.array(range(100), pa.int32())}))
    t.update_schema().widen_column("n", "long").commit()
    assert groups_read(t, "n = 42") is None  # stored as int, read as long: statistics unused, all read
    assert t.scan(filter="n = 42").to_arrow().column("n").to_pylist() == [42]


def test_single_row_group_files_and_no_filter_read_whole(local_catalog):
    t = sorted_table(local_catalog, rows_per_group=10_000)
    assert groups_read(t, "id = 5") is None
    t2 = sorted_table_named(local_catalog)
    assert groups_read(t2, "true") is None


def sorted_table_named(catalog: lakefmt.Catalog) -> lakefmt.Table:
    schema = pa.schema([("id", pa.int64())])
    t = catalog.create_table("db.rg2", schema, properties={"write.parquet.row-group-rows": "10"})
    t.append(pa.table({"id": pa.array(range(100), pa.int64())}))
    return t


def test_decoded_row_group_statistics_are_kept_per_file_and_footer(local_catalog):
    """The statistics a scan decoded are reused by the next scan of the file (lakefmt.footer.ROW_GROUP_STATS),
    and a file replaced behind the table's back with the same row count but other row groups is decoded anew."""
    from lakefmt.footer import ROW_GROUP_STATS

    ROW_GROUP_STATS.clear()
    t = sorted_table(local_catalog)
    assert t.scan(filter="id = 450").to_arrow().column("id").to_pylist() == [450]
    assert len(ROW_GROUP_STATS) == 1
    assert t.scan(filter="id = 450 AND id > 3").to_arrow().column("id").to_pylist() == [450]
    assert len(ROW_GROUP_STATS) == 1  # the same column: decoded once
    assert t.scan(filter="kind = 'k1'").count() == 250 and len(ROW_GROUP_STATS) == 2

    (task,) = t.scan().plan().tasks
    table = pq.read_table(task.location)
    reversed_ids = table.set_column(0, table.schema.field(0), pa.array(range(999, -1, -1), pa.int64()))
    pq.write_table(reversed_ids, task.location, row_group_size=250)
    got = t.scan(filter="id = 450").to_arrow().column("id").to_pylist()
    assert got == [450]  # found in the new file's row groups, not pruned by the old file's statistics
    assert len(ROW_GROUP_STATS) == 3
