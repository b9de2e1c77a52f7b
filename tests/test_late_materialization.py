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


# -- residual filters, dictionary-read string keys, row masks (READ-13, EXPR-10) -------------------

def kinds_rows(start: int, n: int) -> pa.Table:
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "kind": pa.array([None if i % 11 == 0 else f"k{i % 6}" for i in range(start, start + n)], pa.string()),
        "x": pa.array([float("nan") if i % 13 == 0 else (i % 7) - 3.0 for i in range(start, start + n)]),
        "payload": pa.array([f"{i:06d}-" + "y" * 100 for i in range(start, start + n)]),
    })


@pytest.fixture
def files(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    """Three files with disjoint id ranges, nulls in the string key, NaN in the double; 100-row groups."""
    t = local_catalog.create_table("db.residual", kinds_rows(0, 1).schema,
                                   properties={"write.parquet.row-group-rows": "100"})
    for start in (0, 300, 600):
        t.append(kinds_rows(start, 300))
    assert len(t.plan_files()) == 3
    return t


def all_kind_rows() -> list[dict]:
    return pa.concat_tables([kinds_rows(s, 300) for s in (0, 300, 600)]).to_pylist()


@pytest.mark.parametrize("expr, predicate", [
    # id >= 300 holds for every row of two files and for no row of the third (READ-13).
    ("id >= 300 AND kind = 'k2'", lambda r: r["id"] >= 300 and r["kind"] == "k2"),
    ("id >= 300 OR kind = 'k2'", lambda r: r["id"] >= 300 or r["kind"] == "k2"),
    ("id < 900 AND kind IS NULL", lambda r: r["kind"] is None),
    ("kind <> 'k1' AND id < 650", lambda r: r["kind"] is not None and r["kind"] != "k1" and r["id"] < 650),
    ("kind NOT IN ('k0', 'k1') AND x < 0", lambda r: r["kind"] not in (None, "k0", "k1") and r["x"] < 0),
    ("kind IN ('k3') OR x > 2", lambda r: r["kind"] == "k3" or r["x"] > 2),
    ("NOT (kind = 'k4' OR x >= 0)", lambda r: r["kind"] is not None and r["kind"] != "k4" and not r["x"] >= 0),
    ("kind >= 'k4' AND id >= 0", lambda r: r["kind"] is not None and r["kind"] >= "k4"),
    ("starts_with(kind, 'k5') AND id <> 5", lambda r: (r["kind"] or "").startswith("k5") and r["id"] != 5),
])
@pytest.mark.parametrize("columns", [["payload"], ["id", "kind", "payload"], ["kind"]])
def test_residual_and_dictionary_keys_equal_filtering_every_row(files, expr, predicate, columns):
    out = files.scan(filter=expr, columns=columns).to_arrow()
    assert out.schema == pa.schema([kinds_rows(0, 1).schema.field(c) for c in columns])
    want = Counter(tuple(r[c] for c in columns) for r in all_kind_rows() if predicate(r))
    assert Counter(tuple(r[c] for c in columns) for r in out.to_pylist()) == want


def test_string_key_renamed_after_the_files_were_written(files):
    """The table's name is not in the file: the file is opened without dictionary keys, rows stay exact."""
    with files.update_schema() as u:
        u.rename_column("kind", "category")
    out = files.scan(filter="category = 'k2' AND id >= 300", columns=["id", "category"]).to_arrow()
    assert Counter(map(tuple, (r.values() for r in out.to_pylist()))) == Counter(
        (r["id"], r["kind"]) for r in all_kind_rows() if r["kind"] == "k2" and r["id"] >= 300)


def test_residual_drops_leaves_the_statistics_decide():
    import io

    from lakefmt.evaluators import MetricsEvaluator, residual
    from lakefmt.expressions import AlwaysFalse, AlwaysTrue
    from lakefmt.footer import data_file_from_footer
    from lakefmt.partitioning import UNPARTITIONED
    from lakefmt.schema import Schema

    rows = kinds_rows(300, 300)
    schema = Schema.from_arrow(rows.schema)
    buf = io.BytesIO()
    pq.write_table(rows, buf)
    f = data_file_from_footer("f.parquet", (), 1, pq.read_metadata(pa.BufferReader(buf.getvalue())), schema,
                              UNPARTITIONED, None)
    expr = MetricsEvaluator("id >= 300 AND kind = 'k2'", schema).expr
    assert str(residual(expr, f)) == "kind = 'k2'"
    assert isinstance(residual(MetricsEvaluator("id >= 300 OR kind = 'k2'", schema).expr, f), AlwaysTrue)
    assert isinstance(residual(MetricsEvaluator("id < 300 AND kind = 'k2'", schema).expr, f), AlwaysFalse)
    # NaN is not in a double's bounds: a leaf on x is never decided as TRUE for every row.
    assert "x" in str(residual(MetricsEvaluator("x > -100", schema).expr, f))


@pytest.mark.parametrize("dictionary", [False, True])
def test_row_mask_selects_what_the_arrow_expression_selects(dictionary):
    from lakefmt.evaluators import row_mask, to_arrow_expression
    from lakefmt.expressions import bind
    from lakefmt.schema import Schema

    rows = pa.concat_tables([kinds_rows(0, 250), kinds_rows(250, 250)])  # two chunks
    schema = Schema.from_arrow(rows.schema)
    data = rows
    if dictionary:
        data = rows.set_column(1, "kind", pa.chunked_array([c.dictionary_encode() for c in rows.column("kind").chunks]))
    names = {f.id: f.name for f in schema.fields}
    for text in ["kind = 'k2'", "kind <> 'k2' OR x IS NULL", "kind IS NULL", "kind IS NOT NULL AND x > 0",
                 "kind IN ('k1', 'k9') OR id = 3", "kind NOT IN ('k1')", "NOT (x < 0)", "x = 0 OR isnan(x)",
                 "starts_with(kind, 'k1') OR NOT starts_with(kind, 'k')", "kind > 'k3' AND kind <= 'k5'",
                 "id < 0", "id >= 0"]:
        bound = bind(text, schema)
        got = data.filter(row_mask(bound, data, names.get)).column("id").to_pylist()
        want = rows.filter(to_arrow_expression(bound, names.get)).column("id").to_pylist()
        assert got == want, text
