"""Filtered reads through DuckDB return what lakefmt's own reader returns (READ-18).

Each case reads one table twice, through DuckDB (lakefmt.duckdb_reads) and through the pyarrow
reader (``duckdb_reads.ENABLED = False``), and compares the rows as multisets and the Arrow
schemas exactly, over filters that probe where SQL engines and EXPR-5 may part: nulls, NaN and
-0.0, IN and NOT IN, NOT, OR, prefixes holding LIKE's wildcards, unicode and byte order, zoned and
wall-clock timestamps, dates, times, booleans, decimals and binaries; over projections of some and
of all columns, and columns with quotes and spaces in their names. Which path read the rows is
asserted, so a case cannot pass by falling back. Other cases: a column renamed or added after the
files were written, deletion vectors, a string column holding bytes that are not UTF-8, a file
that is not the one its manifest entry describes, to_batches, threads, and the process's time zone.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import duckdb_reads, scan
from lakefmt.errors import CorruptDataFileError
from lakefmt.expressions import bind, col
from lakefmt.schema import Schema
from lakefmt.sql_filters import to_duckdb_sql

FILES = 5
ROWS = 60
UTC = dt.timezone.utc
STRINGS = ["a%b", "a_b", "ab", "é", "日本", "😀", "", "z", "A", "a\\b", "x'y", None]
BINARIES = [b"a%b", b"\xff\x00", b"", b"ab", b"\xff", b"\xff\xff\x01", b"\x00", None]
DOUBLES = [0.0, -0.0, math.nan, 1.5, -2.25, math.inf, -math.inf, 1e300, None, 5e-324]
FLOATS = [0.0, -0.0, math.nan, 0.1, 1.5, None, -7.0]
START = dt.datetime(2026, 1, 1, tzinfo=UTC)
WEIRD = 'we"ird col'
SPACE = "sp ace"


def file_rows(i: int) -> pa.Table:
    """File ``i``: every type the DuckDB path reads, each column with nulls, in rows that differ per file."""
    ns = range(i * ROWS, (i + 1) * ROWS)

    def pick(values, n, salt=0):
        return values[(n * 7 + salt) % len(values)]

    return pa.table({
        "i": pa.array([None if n % 11 == 0 else n % 9 - 3 for n in ns], pa.int32()),
        "l": pa.array([None if n % 13 == 0 else (n * 7919) % 1000 - 500 for n in ns], pa.int64()),
        "d": pa.array([pick(DOUBLES, n) for n in ns], pa.float64()),
        "f": pa.array([pick(FLOATS, n, 3) for n in ns], pa.float32()),
        "s": pa.array([pick(STRINGS, n) for n in ns], pa.string()),
        "b": pa.array([pick(BINARIES, n, 1) for n in ns], pa.binary()),
        "flag": pa.array([None if n % 5 == 0 else n % 2 == 0 for n in ns], pa.bool_()),
        "amount": pa.array([None if n % 6 == 0 else decimal.Decimal(n % 40 - 20) / 4 for n in ns],
                           pa.decimal128(9, 2)),
        "day": pa.array([None if n % 8 == 0 else dt.date(2026, 1, 1) + dt.timedelta(days=n % 10) for n in ns],
                        pa.date32()),
        "tm": pa.array([None if n % 9 == 0 else dt.time(n % 24, n % 60, 0, n % 7) for n in ns], pa.time64("us")),
        "ts": pa.array([None if n % 7 == 0 else dt.datetime(2026, 1, 1, 8) + dt.timedelta(hours=n % 6)
                        for n in ns], pa.timestamp("us")),
        "tz": pa.array([None if n % 10 == 0 else START + dt.timedelta(hours=n % 48, microseconds=n % 3)
                        for n in ns], pa.timestamp("us", tz="UTC")),
        WEIRD: pa.array([n % 4 for n in ns], pa.int64()),
        SPACE: pa.array([None if n % 3 == 0 else f"v{n % 5}" for n in ns], pa.string()),
    })


@pytest.fixture
def table(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    t = local_catalog.create_table("db.duck", file_rows(0).schema)
    for i in range(FILES):
        t.append(file_rows(i))
    assert len(t.plan_files()) == FILES >= duckdb_reads.MIN_FILES
    return t


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> lakefmt.Table:
    """The table of :func:`table`, made once for the cases that only read it."""
    cat = lakefmt.Catalog(str(tmp_path_factory.mktemp("duck") / "warehouse"), create=True)
    t = cat.create_table("db.duck", file_rows(0).schema)
    for i in range(FILES):
        t.append(file_rows(i))
    return t


@pytest.fixture(scope="module")
def shared_one(tmp_path_factory: pytest.TempPathFactory) -> lakefmt.Table:
    """The same rows in one file of row groups of ROWS rows: DuckDB plans a single file with its statistics."""
    cat = lakefmt.Catalog(str(tmp_path_factory.mktemp("duck1") / "warehouse"), create=True)
    t = cat.create_table("db.duck1", file_rows(0).schema, properties={"write.parquet.row-group-rows": str(ROWS)})
    t.append(pa.concat_tables([file_rows(i) for i in range(FILES)]))
    return t


@pytest.fixture
def paths_taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per call of read_matching, whether DuckDB read the files (True) or the caller had to (False)."""
    taken: list[bool] = []
    real = duckdb_reads.read_matching

    def spy(*args, **kwargs):
        got = real(*args, **kwargs)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(duckdb_reads, "read_matching", spy)
    return taken


def key(value):
    """A value as a hashable key that tells NaN, -0.0 and 0.0 apart as stored."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else repr(value)
    return value


def multiset(t: pa.Table) -> Counter:
    return Counter(tuple(key(v) for v in row.values()) for row in t.to_pylist())


def ordered(t: pa.Table) -> list[tuple]:
    return [tuple(key(v) for v in row.values()) for row in t.to_pylist()]


def read_both(t: lakefmt.Table, taken: list[bool], row_filter, columns=None, *, duckdb: bool = True
              ) -> tuple[pa.Table, pa.Table]:
    """The scan read through DuckDB and through pyarrow; asserts which path the first took."""
    del taken[:]
    through_duckdb = t.scan(row_filter, columns).to_arrow()
    planned = bool(t.scan(row_filter, columns).plan().tasks)  # no file planned: nothing to read either way
    assert taken == ([duckdb] if planned else []), f"{row_filter}: DuckDB path taken {taken}, expected {duckdb}"
    duckdb_reads.ENABLED = False
    try:
        through_pyarrow = t.scan(row_filter, columns).to_arrow()
    finally:
        duckdb_reads.ENABLED = True
    assert through_duckdb.schema.equals(through_pyarrow.schema, check_metadata=True), row_filter
    assert multiset(through_duckdb) == multiset(through_pyarrow), row_filter
    return through_duckdb, through_pyarrow


FILTERS = [
    "i = 3", "i != 3", "i < 0", "i >= 5", "i IN (1, 2, 3)", "i NOT IN (1, 2)", "i IS NULL", "i IS NOT NULL",
    "NOT i = 3", "NOT (i IN (1, 2))", "NOT i NOT IN (-3, 5)", "i BETWEEN -1 AND 2", "i NOT BETWEEN -1 AND 2",
    "l > 100 AND l <= 400", "l < -499 OR l > 498",
    # strings: byte order of UTF-8, wildcards of LIKE as plain characters, quotes
    "s = 'é'", "s > 'a'", "s < 'é'", "s >= '😀'", "s > '日'", "s <= ''", "s = ''", "s != 'ab'",
    "starts_with(s, 'a%')", "starts_with(s, 'a_')", "starts_with(s, 'a')", "starts_with(s, '')",
    "s LIKE 'a\\%%'", "s LIKE 'a\\_b'", "s NOT LIKE 'a%'", "not_starts_with(s, 'a')",
    "not_starts_with(s, '')", "s IN ('x', 'é', '日本', 'x''y')", "s NOT IN ('z', 'A')", "s = 'a\\b'",
    "s = 'x''y'", "starts_with(s, '日')",
    # binaries: strings are their UTF-8
    "b = 'ab'", "b > 'a'", "starts_with(b, 'a')", "not_starts_with(b, 'a')", "b IN ('ab', '')", "b IS NULL",
    # booleans, decimals, dates, times
    "flag = true", "flag != true", "NOT flag = false", "flag IS NULL", "flag = false OR flag IS NULL",
    "amount > 1.25", "amount = 0", "amount IN (1.25, -3.50)", "amount <= -4.75", "amount != 2",
    "day >= DATE '2026-01-03'", "day IN ('2026-01-01', '2026-01-05')", "day < '2026-01-02'",
    "tm < TIME '12:00:00'", "tm >= '13:05:00.000003'",
    # wall-clock and zoned timestamps (EXPR-4's table)
    "ts >= TIMESTAMP '2026-01-01 10:00:00'", "ts = DATE '2026-01-01'", "ts = '2026-01-01T09:00:00'",
    "ts < TIMESTAMPTZ '2026-01-01T12:00:00+02:00'", "tz >= TIMESTAMPTZ '2026-01-01T12:00:00+02:00'",
    "tz < '2026-01-02'", "tz = '2026-01-01T05:00:00.000002Z'", "tz > '2026-01-02T00:00:00-05:00'",
    # combinations, and filters nothing matches
    "i = 3 OR s IS NULL", "(l > 0 OR s = 'ab') AND NOT flag = true", "NOT (l > 0 AND i < 5)",
    "NOT (s > 'a' OR l != 0)", "l > 100000", "i = 3 AND i = 4", "FALSE", "i = 1 OR FALSE",
    # quoted names
    '"we""ird col" = 2', '"sp ace" > \'v2\'', '"sp ace" IS NULL AND "we""ird col" != 0',
]


# Filters on floats stay with pyarrow: DuckDB decides them from row-group bounds that leave NaN out.
FLOAT_FILTERS = [
    "d > 0", "d >= 0", "d < 0", "d <= 0", "d = 0", "d = -0.0", "d != 0", "d > -1e308", "d <= 1e400",
    "d IN (0.0, 1.5)", "d NOT IN (0.0, 1e300)", "is_nan(d)", "not_nan(d)", "NOT d > 0", "NOT d <= 1.5",
    "f > 0.1", "f = 0.1", "is_nan(f)", "NOT f < 1", "i = 3 AND d > 0", "s = 'ab' OR is_nan(d)",
]


@pytest.mark.parametrize("row_filter", FILTERS)
def test_duckdb_reads_what_pyarrow_reads(shared, paths_taken, row_filter):
    """READ-18: every filter, all columns projected."""
    read_both(shared, paths_taken, row_filter)


@pytest.mark.parametrize("row_filter", FILTERS)
def test_one_file_with_row_groups(shared_one, paths_taken, monkeypatch, row_filter):
    """READ-18: the same filters over one file of several row groups, which DuckDB prunes by their bounds."""
    monkeypatch.setattr(duckdb_reads, "MIN_ROWS", 0)
    read_both(shared_one, paths_taken, row_filter)


@pytest.mark.parametrize("row_filter", FLOAT_FILTERS)
def test_float_filters_are_read_by_pyarrow(shared, paths_taken, row_filter):
    """READ-18: a filter on a float or double column is not given to DuckDB."""
    read_both(shared, paths_taken, row_filter, duckdb=False)


def test_nan_outside_the_bounds(local_catalog, paths_taken, monkeypatch):
    """One file whose doubles are 11, 12, 13 and NaN: its row-group bounds are 11..13. DuckDB 2.0 finds
    no NaN there and keeps the NaN rows for ``d > 5 AND NOT isnan(d)``; lakefmt's reads find what
    EXPR-5 says, because such filters stay with pyarrow."""
    monkeypatch.setattr(duckdb_reads, "MIN_ROWS", 0)
    schema = pa.schema([pa.field("d", pa.float64()), pa.field("k", pa.int64())])
    t = local_catalog.create_table("db.nan", schema, properties={"write.parquet.row-group-rows": "1000"})
    t.append(pa.table({"d": [11.0, 12.0, math.nan, 13.0] * 1000, "k": list(range(4000))}, schema=schema))
    for row_filter, rows in [("is_nan(d)", 1000), ("d > 5", 3000), ("NOT d < 20", 1000), ("d != 12", 3000),
                             ("not_nan(d) AND k >= 0", 3000)]:
        got, _ = read_both(t, paths_taken, row_filter, duckdb=False)
        assert got.num_rows == rows, row_filter
    got, _ = read_both(t, paths_taken, "k < 8", ["d", "k"])  # floats projected, not filtered: DuckDB reads
    assert [key(v) for v in got.column("d").to_pylist()] == ["11.0", "12.0", "NaN", "13.0"] * 2


def test_constant_row_groups_with_nulls(local_catalog, paths_taken, monkeypatch):
    """Row groups whose bounds are one value, with and without nulls, and of nulls only, in a table of
    one file (DuckDB plans with its statistics) and of several: DuckDB may skip a row group or a filter
    from the statistics only where they decide it (READ-18)."""
    monkeypatch.setattr(duckdb_reads, "MIN_ROWS", 0)
    schema = pa.schema([pa.field("i", pa.int32()), pa.field("s", pa.string()), pa.field("ts", pa.timestamp("us"))])

    def part(value, nulls: int, n: int = 500) -> pa.Table:
        values = [value] * (n - nulls) + [None] * nulls
        return pa.table({"i": values, "s": [None if v is None else f"s{v}" for v in values],
                         "ts": [None if v is None else dt.datetime(2026, 1, 1 + v) for v in values]}, schema=schema)

    parts = [part(3, 0), part(3, 100), part(None, 500), part(4, 250)]
    one = local_catalog.create_table("db.const1", schema, properties={"write.parquet.row-group-rows": "500"})
    one.append(pa.concat_tables(parts))
    many = local_catalog.create_table("db.const4", schema, properties={"write.parquet.row-group-rows": "500"})
    for p in parts:
        many.append(p)
    for t in (one, many):
        for row_filter in ["i = 3", "i != 3", "NOT i = 3", "NOT i IN (3, 4)", "i IS NULL", "NOT i IS NULL",
                           "s = 's3'", "NOT s >= 's3'", "not_starts_with(s, 's3')", "ts != '2026-01-04'",
                           "NOT ts < '2026-01-05'", "i = 3 OR s IS NULL", "NOT (i = 3 OR s = 's4')"]:
            read_both(t, paths_taken, row_filter)


@pytest.mark.parametrize("columns", [["i"], ["s", "d"], [WEIRD, SPACE], ["tz", "amount", "b"], ["flag"]])
@pytest.mark.parametrize("row_filter", ["l > 0 OR i IS NULL", "s > 'a'", "tz < '2026-01-02'"])
def test_projections(shared, paths_taken, columns, row_filter):
    """READ-18: projections of some columns, filtered on columns read or not."""
    got, _ = read_both(shared, paths_taken, row_filter, columns)
    assert got.column_names == columns


def test_filters_built_in_python(table, paths_taken):
    """Binary prefixes of 0xff bytes and the empty prefix, which no filter text can spell (READ-18)."""
    for expr in [col("b").starts_with(b"\xff"), col("b").starts_with(b"\xff\xff"), col("b").starts_with(b""),
                 col("b").not_starts_with(b"\xff"), col("b").starts_with(b"\x00"), col("b") < b"\xff",
                 col("b").isin([b"\xff\x00", b"\x00"]), ~col("s").starts_with("a%"),
                 col("l").isin(list(range(-500, 0))), col("l").not_in(list(range(300))),
                 col("s").isin(["é", *(f"s{n}" for n in range(500))])]:
        read_both(table, paths_taken, expr)


def test_empty_results_keep_the_schema(table, paths_taken):
    got, _ = read_both(table, paths_taken, "l > 100000")
    assert got.num_rows == 0 and got.schema == table.arrow_schema()


def test_renamed_column_is_read_by_pyarrow(table, paths_taken):
    """Files written before a rename name the column otherwise: DuckDB, which selects by name, is not
    used (READ-6), and the rows are still found by field id."""
    table.update_schema().rename_column("s", "label").commit()
    table.append(file_rows(FILES).rename_columns(["label" if n == "s" else n for n in file_rows(0).column_names]))
    got, _ = read_both(table, paths_taken, "label = 'é'", ["label", "i"], duckdb=False)
    assert got.num_rows == sum(1 for i in range(FILES + 1) for v in file_rows(i).column("s").to_pylist()
                               if v == "é")


def test_added_column_is_read_by_pyarrow(table, paths_taken):
    """Files written before a column was added lack it; it reads as nulls there (READ-7)."""
    table.update_schema().add_column("extra", "long").commit()
    table.append(file_rows(FILES).append_column("extra", pa.array(range(ROWS), pa.int64())))
    got, _ = read_both(table, paths_taken, "extra IS NULL AND i = 3", duckdb=False)
    assert got.num_rows == sum(1 for i in range(FILES) for v in file_rows(i).column("i").to_pylist() if v == 3)
    read_both(table, paths_taken, "extra > 10", ["extra", "s"], duckdb=False)


def test_a_projection_untouched_by_evolution_stays_on_duckdb(table, paths_taken):
    """A rename of a column neither read nor filtered does not matter: the columns used still match."""
    table.update_schema().rename_column("l", "long_value").commit()
    read_both(table, paths_taken, "i = 3", ["i", "s"])


def test_deleted_rows_are_not_returned(table, paths_taken):
    """Rows deleted by deletion vectors are dropped by their position in their file (READ-14)."""
    table.delete("i = 2 OR s = 'é'")
    assert any(f.deletion_vector is not None for f in table.plan_files())
    for row_filter in ["i >= 1", "s > 'a'", "l > 0 OR i IS NULL"]:
        got, _ = read_both(table, paths_taken, row_filter)
        assert got.num_rows > 0
        assert not [r for r in got.to_pylist() if r["i"] == 2 or r["s"] == "é"], row_filter
    expected = sum(1 for i in range(FILES) for r in file_rows(i).to_pylist()
                   if r["i"] is not None and r["i"] >= 1 and r["i"] != 2 and r["s"] != "é")
    assert table.scan("i >= 1").count() == expected


def test_strings_that_are_not_utf8_are_read_by_pyarrow(local_catalog, paths_taken):
    """DuckDB refuses a string column holding bytes that are not UTF-8; pyarrow returns them as
    they are stored. The read falls back rather than fail or differ (READ-18)."""
    rows = pa.table({"k": pa.array(range(4), pa.int64()), "s": pa.array(["ok", "fine", "also", "x"])})
    t = local_catalog.create_table("db.bytes", rows.schema)
    for _ in range(FILES):
        t.append(rows)
    victim = t.plan_files()[0]
    path = f"{t.location}/{victim.path}"
    bad = pa.Array.from_buffers(pa.string(), 4, [None, pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0,
                                                                          6, 0, 0, 0, 8, 0, 0, 0])),
                                                 pa.py_buffer(b"ok\xff\xfeal\xc3x")])
    stored = pq.read_table(path)
    replaced = pa.Table.from_arrays([stored.column("k"), bad], schema=stored.schema)
    pq.write_table(replaced, path, store_schema=True)
    other = f"{t.location}/{t.plan_files()[1].path}"
    assert pq.read_metadata(path).schema.equals(pq.read_metadata(other).schema)  # only DuckDB can object
    duckdb_reads.ENABLED = False
    try:
        expected = t.scan("k >= 1").to_arrow()
    finally:
        duckdb_reads.ENABLED = True
    del paths_taken[:]
    got = t.scan("k >= 1").to_arrow()
    assert paths_taken == [False]
    as_bytes = [t.column("s").cast(pa.binary()).to_pylist() for t in (got, expected)]
    assert as_bytes[0] == as_bytes[1] and b"\xff\xfe" in as_bytes[0]


def test_a_file_that_is_not_the_manifests_still_fails(table, paths_taken):
    """A file holding another row count than its manifest entry fails the read as READ-12 says."""
    victim = table.plan_files()[1]
    path = Path(table.location) / victim.path
    pq.write_table(pq.read_table(path).slice(0, 10), path)
    with pytest.raises(CorruptDataFileError, match="READ-12"):
        table.scan("i >= 0").to_arrow()
    assert paths_taken == [False]


def test_glob_characters_in_paths_fall_back(tmp_path, paths_taken):
    """DuckDB would read a path holding ``[`` as a pattern: such reads are left to pyarrow."""
    cat = lakefmt.Catalog(str(tmp_path / "wh[1]"), create=True)
    t = cat.create_table("db.glob", file_rows(0).schema)
    for i in range(FILES):
        t.append(file_rows(i))
    read_both(t, paths_taken, "i = 3", duckdb=False)


def test_to_batches_reads_runs_of_files(table, paths_taken, monkeypatch):
    """A filtered to_batches reads runs of files through DuckDB, in plan order, one run at a time."""
    monkeypatch.setattr(scan, "STREAM_FILES", 2)
    monkeypatch.setattr(duckdb_reads, "MIN_FILES", 1)
    got = pa.Table.from_batches(list(table.scan("l > 0 OR s = 'ab'").to_batches()), schema=table.arrow_schema())
    assert paths_taken == [True, True, True]  # 5 files in runs of 2, 2 and 1
    assert ordered(got) == ordered(table.scan("l > 0 OR s = 'ab'").to_arrow())  # same order
    duckdb_reads.ENABLED = False
    try:
        expected = table.scan("l > 0 OR s = 'ab'").to_arrow()
    finally:
        duckdb_reads.ENABLED = True
    assert multiset(got) == multiset(expected)


def test_rows_come_in_plan_order(table, paths_taken):
    """File by file in plan order, each file's rows in stored order: as the pyarrow reader returns them."""
    got, expected = read_both(table, paths_taken, "i >= 0")
    assert ordered(got) == ordered(expected)


def test_small_reads_stay_on_pyarrow(local_catalog, paths_taken):
    """Fewer than MIN_FILES files and MIN_ROWS rows: DuckDB's setup costs more than it saves."""
    t = local_catalog.create_table("db.small", file_rows(0).schema)
    for i in range(duckdb_reads.MIN_FILES - 1):
        t.append(file_rows(i))
    read_both(t, paths_taken, "i = 3", duckdb=False)


def test_threads_share_the_database(table):
    """Scans on several threads at once each get their own cursor and their own rows."""
    filters = ["i = 3", "s > 'a'", "l > 0", "tz < '2026-01-02'"] * 3
    expected = {f: multiset(table.scan(f).to_arrow()) for f in set(filters)}
    results: dict[int, Counter] = {}

    def run(n: int) -> None:
        results[n] = multiset(table.scan(filters[n]).to_arrow())

    workers = [threading.Thread(target=run, args=(n,)) for n in range(len(filters))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert all(results[n] == expected[filters[n]] for n in range(len(filters)))


def test_results_do_not_depend_on_the_time_zone(table, local_catalog, tmp_path):
    """A process in another time zone finds the same rows of zoned and wall-clock timestamps."""
    script = tmp_path / "zone.py"
    script.write_text(
        "import sys, lakefmt\n"
        "from lakefmt import duckdb_reads\n"
        "t = lakefmt.Catalog(sys.argv[1]).load_table('db.duck')\n"
        "for f in sys.argv[2:]:\n"
        "    got = t.scan(f, ['tz', 'ts']).to_arrow()\n"
        "    print(f, got.schema.field('tz').type, sorted(map(str, got.to_pylist())))\n")
    filters = ["tz >= TIMESTAMPTZ '2026-01-01T12:00:00+02:00'", "ts < TIMESTAMPTZ '2026-01-01T12:00:00+02:00'",
               "tz < '2026-01-02'"]
    warehouse = local_catalog.warehouse
    outputs = []
    for zone in ["UTC", "America/New_York", "Asia/Kolkata"]:
        env = {**os.environ, "TZ": zone}
        done = subprocess.run([sys.executable, str(script), warehouse, *filters], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    assert "tz=UTC" in outputs[0]


def test_untranslatable_filters_give_none():
    """A type without an exact DuckDB rule gives no SQL; the caller reads with pyarrow (READ-18)."""
    wide = Schema.from_arrow(pa.schema([pa.field("x", pa.decimal256(40, 2))]))
    assert to_duckdb_sql(bind("x > 1", wide), {1: "x"}.get) is None


def test_literals_never_become_sql():
    """String literals travel as parameters, so no text of a filter reaches the query."""
    schema = Schema.from_arrow(pa.schema([pa.field("s", pa.string()), pa.field("t", pa.timestamp("us", "UTC"))]))
    hostile = "x' OR 1=1; DROP TABLE t; --"
    sql, params = to_duckdb_sql(bind(col("s") == hostile, schema), {1: "s", 2: "t"}.get)
    assert hostile not in sql and params == [hostile]
    sql, params = to_duckdb_sql(bind("t >= '2026-01-01T12:00:00+02:00'", schema), {1: "s", 2: "t"}.get)
    assert "TIMESTAMPTZ '2026-01-01 10:00:00.000000+00'" in sql and params == []


def test_a_table_in_a_copied_folder(tmp_path, local_catalog, paths_taken):
    """Footers are cached by location and size: a second table with the same files elsewhere is checked anew."""
    t = local_catalog.create_table("db.copy", file_rows(0).schema)
    for i in range(FILES):
        t.append(file_rows(i))
    read_both(t, paths_taken, "i = 3")
    shutil.copytree(local_catalog.warehouse, tmp_path / "copy")
    other = lakefmt.Catalog(str(tmp_path / "copy")).load_table("db.copy")
    read_both(other, paths_taken, "i = 3")


def test_required_columns_keep_their_nullability(local_catalog, paths_taken):
    """A required field comes back not nullable, as the pyarrow reader returns it (READ-7)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    t = local_catalog.create_table("db.required", schema)
    for i in range(FILES):
        t.append(pa.table({"id": range(i * 10, i * 10 + 10), "v": list(range(10))}, schema=schema))
    got, _ = read_both(t, paths_taken, "v > 4")
    assert not got.schema.field("id").nullable and got.num_rows == FILES * 5


def test_columns_named_like_duckdbs_positions(local_catalog, paths_taken):
    """A column named ``file_row_number`` would hide DuckDB's position of a row: with deletion vectors
    such a read is left to pyarrow; without, the column is read as it is."""
    schema = pa.schema([pa.field("file_row_number", pa.int64()), pa.field("file_index", pa.string())])
    t = local_catalog.create_table("db.positions", schema)
    for i in range(FILES):
        t.append(pa.table({"file_row_number": [7] * 10, "file_index": [f"f{i}-{n}" for n in range(10)]},
                          schema=schema))
    got, _ = read_both(t, paths_taken, "file_row_number = 7")
    assert got.column("file_row_number").to_pylist() == [7] * FILES * 10
    t.delete("file_index = 'f1-3'")
    got, _ = read_both(t, paths_taken, "file_row_number = 7", duckdb=False)
    assert "f1-3" not in got.column("file_index").to_pylist() and got.num_rows == FILES * 10 - 1


# -- reads without a filter (READ-18: from MIN_FULL_FILES files on) ----------------------------------

@pytest.fixture
def many(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    t = local_catalog.create_table("db.many", file_rows(0).schema)
    for i in range(duckdb_reads.MIN_FULL_FILES):
        t.append(file_rows(i))
    assert len(t.plan_files()) == duckdb_reads.MIN_FULL_FILES
    return t


def test_unfiltered_scan_of_many_files(many, paths_taken):
    """Every row, in plan order, with the table's Arrow schema; NaN, -0.0 and nulls as stored."""
    got, expected = read_both(many, paths_taken, None)
    assert got.num_rows == duckdb_reads.MIN_FULL_FILES * ROWS
    assert ordered(got) == ordered(expected)
    got, _ = read_both(many, paths_taken, None, ["tz", WEIRD, "d"])
    assert got.column_names == ["tz", WEIRD, "d"]


def test_unfiltered_scan_drops_deleted_rows(many, paths_taken):
    many.delete("i = 2")
    got, _ = read_both(many, paths_taken, None)
    assert got.num_rows == sum(1 for i in range(duckdb_reads.MIN_FULL_FILES)
                               for r in file_rows(i).to_pylist() if r["i"] != 2)


def test_unfiltered_scan_after_a_rename_is_read_by_pyarrow(many, paths_taken):
    many.update_schema().rename_column("s", "text").commit()
    got, _ = read_both(many, paths_taken, None, duckdb=False)
    assert "text" in got.column_names


def test_unfiltered_scan_of_few_files_stays_on_pyarrow(table, paths_taken):
    assert len(table.plan_files()) < duckdb_reads.MIN_FULL_FILES
    read_both(table, paths_taken, None, duckdb=False)


def test_few_clustered_files_are_left_to_pyarrow(local_catalog, paths_taken, monkeypatch):
    """Fewer than MIN_FILES files: DuckDB reads them only when MIN_ROWS rows are left after row-group
    pruning. A file sorted on the filter's column keeps one row group of ten: lakefmt's reader
    reads it (and of it only the matching pages); a filter its statistics cannot prune goes to DuckDB."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    t = local_catalog.create_table("db.sorted", schema, properties={"write.parquet.row-group-rows": "100"})
    t.append(pa.table({"k": pa.array(range(1000), pa.int64()), "v": [f"v{n % 7}" for n in range(1000)]}))
    assert len(t.plan_files()) == 1
    monkeypatch.setattr(duckdb_reads, "MIN_ROWS", 500)
    got, _ = read_both(t, paths_taken, "k >= 250 AND k < 300", duckdb=False)  # 100 rows left of 1,000
    assert sorted(got.column("k").to_pylist()) == list(range(250, 300))
    got, _ = read_both(t, paths_taken, "v = 'v3'")  # every row group might match
    assert got.num_rows == len([n for n in range(1000) if n % 7 == 3])
