"""Types, physical values and bound bytes (spec/types.md TYPE-*), checked on the files lakefmt writes and on
data files another writer could have written."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

import lakefmt
from lakefmt import col
from lakefmt.commit import FileChange
from lakefmt.footer import data_file_from_footer
from tests.conftest import rows
from tests.spec_ids.table_files import field_ids, live_entries, parquet

UTC = dt.timezone.utc
MINUS_8 = dt.timezone(dt.timedelta(hours=-8))

# The test vectors of TYPE-6 (spec/types.md): Arrow type, value, bound bytes.
VECTORS = [
    (pa.bool_(), True, "01"),
    (pa.bool_(), False, "00"),
    (pa.int32(), 1, "01000000"),
    (pa.int32(), -1, "ffffffff"),
    (pa.int64(), 1, "0100000000000000"),
    (pa.int64(), -2, "feffffffffffffff"),
    (pa.float32(), 1.0, "0000803f"),
    (pa.float32(), math.inf, "0000807f"),
    (pa.float64(), 1.0, "000000000000f03f"),
    (pa.date32(), dt.date(2017, 11, 16), "4e440000"),
    (pa.date32(), dt.date(1969, 12, 31), "ffffffff"),
    (pa.time64("us"), dt.time(22, 31, 8), "008307e012000000"),
    (pa.timestamp("us"), dt.datetime(2017, 11, 16, 22, 31, 8), "00c3262d215e0500"),
    (pa.timestamp("us", tz="-08:00"), dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=MINUS_8), "00c3262d215e0500"),
    (pa.string(), "iceberg", "69636562657267"),
    (pa.binary(), bytes.fromhex("00010203"), "00010203"),
    (pa.decimal128(4, 2), Decimal("14.20"), "058c"),
    (pa.decimal128(3, 2), Decimal("-1.00"), "9c"),
    (pa.decimal128(5, 2), Decimal("1.28"), "0080"),
    (pa.decimal128(5, 2), Decimal("-1.28"), "80"),
    (pa.decimal128(5, 2), Decimal("-1.29"), "ff7f"),
    (pa.decimal128(5, 2), Decimal("0.00"), "00"),
]


def one_column_table(catalog: lakefmt.Catalog, name: str, arrow_type: pa.DataType) -> lakefmt.Table:
    return catalog.create_table(f"types.{name}", schema=pa.schema([pa.field("v", arrow_type)]))


def bounds(t: lakefmt.Table) -> list[tuple[bytes | None, bytes | None]]:
    """(lower, upper) bound bytes of column 1 in each live entry, in file order of appends."""
    out = []
    for e in sorted(live_entries(t), key=lambda e: e["file_path"]):
        lower, upper = dict(e["lower_bounds"] or []), dict(e["upper_bounds"] or [])
        out.append((lower.get(1), upper.get(1)))
    return out


def test_writers_produce_the_bound_bytes_of_the_test_vectors(local_catalog):
    """TYPE-6: each value, written alone in a file, has exactly the vector's bytes as lower and upper bound."""
    by_type: dict[str, list[tuple[object, str]]] = {}
    types = {}
    for arrow_type, value, hex_bytes in VECTORS:
        by_type.setdefault(str(arrow_type), []).append((value, hex_bytes))
        types[str(arrow_type)] = arrow_type
    for i, (key, cases) in enumerate(by_type.items()):
        t = one_column_table(local_catalog, f"t{i}", types[key])
        for value, _ in cases:
            t.append(pa.table({"v": pa.array([value], types[key])}))
        assert all(lo == hi for lo, hi in bounds(t)), key  # one value per file: lower = upper
        assert sorted(lo.hex() for lo, _ in bounds(t)) == sorted(h for _, h in cases), key
        assert sorted(hi.hex() for _, hi in bounds(t)) == sorted(h for _, h in cases), key


def test_bounds_follow_the_order_of_physical_values(local_catalog):
    """TYPE-5: strings by code point (not UTF-16), binary by unsigned bytes, decimals, dates and booleans
    numerically; the bounds of a file are its least and greatest values in that order (MAN-7)."""
    schema = pa.schema([("s", pa.string()), ("b", pa.binary()), ("d", pa.decimal128(5, 2)), ("day", pa.date32()),
                        ("flag", pa.bool_()), ("x", pa.float64())])
    t = local_catalog.create_table("types.order", schema=schema)
    t.append(pa.table({
        "s": ["Z", "\uff5e", "a", "\U0001f600", "é"],  # U+1F600 sorts before U+FF5E in UTF-16, after it by code point
        "b": [b"\x7f", b"\x80", b"\x00\xff", b"\x80\x00", b"\x01"],
        "d": [Decimal("-1.29"), Decimal("1.28"), Decimal("0.00"), Decimal("-0.01"), Decimal("1.00")],
        "day": [dt.date(1969, 12, 31), dt.date(1970, 1, 2), dt.date(1, 1, 1), dt.date(9999, 12, 31),
                dt.date(2026, 1, 1)],
        "flag": [True, True, False, True, True],
        "x": [-2.5, 3.0, -10.0, 0.5, 2.0],
    }, schema=schema))
    (e,) = live_entries(t)
    lower, upper = dict(e["lower_bounds"]), dict(e["upper_bounds"])
    ids = {f.name: f.id for f in t.schema().fields}
    assert (lower[ids["s"]], upper[ids["s"]]) == (b"Z", "\U0001f600".encode())
    assert (lower[ids["b"]], upper[ids["b"]]) == (b"\x00\xff", b"\x80\x00")
    assert (lower[ids["d"]], upper[ids["d"]]) == (bytes.fromhex("ff7f"), bytes.fromhex("0080"))
    assert (lower[ids["day"]], upper[ids["day"]]) == ((-719162).to_bytes(4, "little", signed=True),
                                                      (2932896).to_bytes(4, "little", signed=True))
    assert (lower[ids["flag"]], upper[ids["flag"]]) == (b"\x00", b"\x01")
    assert (lower[ids["x"]], upper[ids["x"]]) == (bytes.fromhex("00000000000024c0"), bytes.fromhex("0000000000000840"))
    # Planning by those bounds agrees with the order: a value beyond the upper bound prunes the file.
    assert len(t.plan_files("s > '\uff5e'")) == 1 and len(t.plan_files("s > '\U0001f600'")) == 0


def test_time_values_are_stored_in_microseconds(local_catalog):
    """TYPE-2: time, timestamp and timestamptz columns use the MICROS unit whatever unit the input had."""
    schema = pa.schema([("t", pa.time64("ns")), ("ts", pa.timestamp("ns")), ("tz", pa.timestamp("s", tz="UTC"))])
    t = local_catalog.create_table("types.micros", schema=schema)
    data = pa.table({"t": pa.array([81_068_000_001_000], pa.time64("ns")),
                     "ts": pa.array([1_510_871_468_000_002_000], pa.timestamp("ns")),
                     "tz": pa.array([1_510_871_468], pa.timestamp("s", tz="UTC"))}, schema=schema)
    t.append(data)
    (e,) = live_entries(t)
    pf = parquet(t, e["file_path"])
    units = {pf.schema.column(i).name: str(pf.schema.column(i).logical_type) for i in range(3)}
    assert all("microseconds" in u for u in units.values()), units
    got = t.scan().to_arrow()
    assert [got.schema.field(n).type for n in ("t", "ts", "tz")] == [
        pa.time64("us"), pa.timestamp("us"), pa.timestamp("us", tz="UTC")]
    assert got.column("t")[0].as_py() == dt.time(22, 31, 8, 1)
    assert got.column("ts")[0].as_py() == dt.datetime(2017, 11, 16, 22, 31, 8, 2)
    lower = dict(e["lower_bounds"])
    assert int.from_bytes(lower[1], "little", signed=True) == 81_068_000_001  # physical: microseconds
    assert int.from_bytes(lower[3], "little", signed=True) == 1_510_871_468_000_000


def test_nan_is_never_a_bound_and_never_pruned_away(local_catalog):
    """TYPE-8: float/double bounds exclude NaN; a column of only NaN and null has none; a filter NaN
    satisfies still finds the file whose bounds do not cover NaN."""
    schema = pa.schema([("f", pa.float32()), ("d", pa.float64()), ("k", pa.int32())])
    t = local_catalog.create_table("types.nan", schema=schema)
    t.append(pa.table({"f": pa.array([math.nan, 1.0, 3.0], pa.float32()), "d": [math.nan, 1.0, 3.0],
                       "k": pa.array([1, 1, 1], pa.int32())}, schema=schema))
    t.append(pa.table({"f": pa.array([math.nan, None], pa.float32()), "d": [None, math.nan],
                       "k": pa.array([2, 2], pa.int32())}, schema=schema))
    by_k = {}
    for e in live_entries(t):
        k = int.from_bytes(dict(e["lower_bounds"])[3], "little")
        by_k[k] = (dict(e["lower_bounds"]), dict(e["upper_bounds"]))
    lower, upper = by_k[1]
    assert (lower[1], upper[1]) == (bytes.fromhex("0000803f"), bytes.fromhex("00004040"))  # 1.0f, 3.0f
    assert (lower[2], upper[2]) == (bytes.fromhex("000000000000f03f"), bytes.fromhex("0000000000000840"))
    assert 1 not in by_k[2][0] and 2 not in by_k[2][0] and 1 not in by_k[2][1] and 2 not in by_k[2][1]
    assert len(t.plan_files(col("d").is_nan())) == 2
    assert len(t.plan_files("d != 2.0")) == 2
    nan_rows = t.scan(col("d").is_nan(), columns=["k"]).to_arrow()
    assert rows(nan_rows) == [(1,), (2,)]


def with_ids(table: pa.Table, ids: dict[str, int]) -> pa.Table:
    return table.cast(pa.schema([f.with_metadata({"PARQUET:field_id": str(ids[f.name])}) for f in table.schema]))


def test_data_files_use_the_logical_types_and_readers_take_any_physical_form(local_catalog):
    """TYPE-9: lakefmt writes each column with the table's Parquet logical type; a reader accepts DECIMAL
    stored as INT32, INT64 or FIXED_LEN_BYTE_ARRAY, small string and binary variants, and any codec (WRITE-1)."""
    schema = pa.schema([("d", pa.decimal128(9, 2)), ("e", pa.decimal128(18, 3)), ("s", pa.string()),
                        ("b", pa.binary()), ("day", pa.date32()), ("ts", pa.timestamp("us")),
                        ("tz", pa.timestamp("us", tz="UTC"))])
    t = local_catalog.create_table("types.physical", schema=schema)
    ids = {f.name: f.id for f in t.schema().fields}
    mine = pa.table({"d": [Decimal("1.25")], "e": [Decimal("-7.125")], "s": ["x"], "b": [b"\x01"],
                     "day": [dt.date(2026, 1, 1)], "ts": [dt.datetime(2026, 1, 1, 12)],
                     "tz": [dt.datetime(2026, 1, 1, 12, tzinfo=UTC)]}, schema=schema)
    t.append(mine)
    (e,) = live_entries(t)
    pf = parquet(t, e["file_path"])
    logical = {pf.schema.column(i).name: str(pf.schema.column(i).logical_type) for i in range(len(schema))}
    assert logical["d"].startswith("Decimal(precision=9, scale=2") and logical["e"].startswith("Decimal(precision=18")
    assert logical["s"] == "String" and logical["day"] == "Date"
    assert "isAdjustedToUTC=false" in logical["ts"] and "isAdjustedToUTC=true" in logical["tz"]
    assert field_ids(pf.schema_arrow) == ids  # WRITE-1: every column carries its field id

    theirs = []
    for i, (store_as_int, codec) in enumerate([(True, "snappy"), (False, "gzip"), (True, "none")]):
        data = pa.table({"d": [Decimal("2.50") + i], "e": [Decimal("3.000") + i], "s": [f"y{i}"], "b": [b"\x02"],
                         "day": [dt.date(2026, 1, 2)], "ts": [dt.datetime(2026, 1, 2)],
                         "tz": [dt.datetime(2026, 1, 2, tzinfo=UTC)]}, schema=schema)
        theirs.append(data)
        rel = f"data/foreign-{i}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(with_ids(data, ids), sink, compression=codec, store_decimal_as_integer=store_as_int)
        raw = sink.getvalue().to_pybytes()
        footer = pq.read_metadata(pa.BufferReader(raw))
        physical = {footer.schema.column(c).name: footer.schema.column(c).physical_type for c in range(2)}
        assert physical == ({"d": "INT32", "e": "INT64"} if store_as_int
                            else {"d": "FIXED_LEN_BYTE_ARRAY", "e": "FIXED_LEN_BYTE_ARRAY"})
        t.io.write_bytes(f"{t.location}/{rel}", raw)
        t.commit_change(FileChange("append", added=[
            data_file_from_footer(rel, (), len(raw), footer, t.schema(), t.spec(), None)]))
    got = t.scan().to_arrow()
    assert got.schema == t.arrow_schema()
    assert rows(got) == rows(pa.concat_tables([mine, *theirs]))
    assert t.scan(filter="d >= 3.50").count() == 2  # bounds from the foreign footers prune and filter alike
