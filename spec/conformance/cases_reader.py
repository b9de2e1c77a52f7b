"""Reader cases of types, transforms, schema evolution and filters: tables lakefmt wrote, with the rows each
snapshot and filter must give."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from _build import TableBuild, case, finish_reader, rng_for
from kit_rows import EVENTS_SCHEMA, TYPES_SCHEMA, events, typed_rows

MIN_INPUT = {"min_age_seconds": 0, "min_input_files": 2}


def tick() -> None:
    """Let the clock move, so that snapshots get distinct timestamps for time travel by timestamp (READ-2)."""
    time.sleep(0.003)


@case("reader", "r-empty", "a table without snapshots reads as empty", "READ-1 META-11 LAYOUT-3")
def empty(b: TableBuild) -> dict:
    b.create(EVENTS_SCHEMA)
    b.read("filter on an empty table", ["=", "id", 1])
    b.read("projection", columns=["v", "id"])
    return finish_reader(b)


@case("reader", "r-types", "every column type, with edge values (NaN, -0.0, extremes, years 1 and 9999)",
      "TYPE-1 TYPE-2 TYPE-3 TYPE-5 TYPE-10 WRITE-1 READ-6 READ-7 READ-8 EXPR-4 EXPR-5")
def types(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(TYPES_SCHEMA)
    b.append(typed_rows(24, rng))
    b.append(typed_rows(24, rng, first_id=100, edges=0))
    b.read("long > 0", [">", "l", 0])
    b.read("int in list", ["in", "i", [-2147483648, 0, 2147483647]])
    b.read("double < 0 (NaN is not)", ["<", "d", 0])
    b.read("double != 1 (NaN is)", ["!=", "d", 1])
    b.read("float >= 1.5", [">=", "f", 1.5])
    b.read("decimal >= 10.65", [">=", "dec", {"decimal": "10.65"}])
    b.read("decimal(40,4) < 0", ["<", "big", {"decimal": "0"}])
    b.read("date before the epoch", ["<", "day", {"date": "1970-01-01"}])
    b.read("time after noon", [">", "tod", {"time": "12:00:00"}])
    b.read("timestamp before 1970", ["<", "ts", {"timestamp": "1970-01-01T00:00:00"}])
    b.read("timestamptz from 2026", [">=", "tz", {"timestamptz": "2026-01-01T00:00:00Z"}])
    b.read("string equals a non-ASCII value", ["=", "s", "aé😀bc"])
    b.read("string prefix", ["starts_with", "s", "a"])
    b.read("boolean and null", ["and", ["=", "b", True], ["is_null", "s"]])
    b.read("binary not null", ["not_null", "bin"])
    b.read("projection reorders", columns=["s", "id", "big"])
    return finish_reader(b)


@case("reader", "r-part-identity", "identity partitions on a string and an int, with null partition values",
      "PART-2 PART-7 MAN-4 ML-4 READ-5 EXPR-7 EXPR-8 LAYOUT-6")
def part_identity(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["kind", "truncate(25, n)"])
    b.append(events(30, rng, null_every=6))
    b.append(events(10, rng, first_id=30))
    b.read("kind = 'imu'", ["=", "kind", "imu"])
    b.read("kind is null", ["is_null", "kind"])
    b.read("kind not in", ["not_in", "kind", ["imu", "cam"]])
    b.read("n >= 25", [">=", "n", 25])
    return finish_reader(b)


@case("reader", "r-part-bucket", "bucket partitions of a long and a string",
      "PART-4 PART-6 MAN-4 ML-4 READ-5 EXPR-8")
def part_bucket(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["bucket(4, id)", "bucket(2, kind)"])
    b.append(events(40, rng, null_every=9))
    b.read("id = 17", ["=", "id", 17])
    b.read("id in", ["in", "id", [1, 2, 3, 33]])
    b.read("kind = 'rad'", ["=", "kind", "rad"])
    return finish_reader(b)


@case("reader", "r-part-truncate", "truncate partitions of an int, a string and a decimal",
      "PART-5 PART-6 PART-7 MAN-4 READ-5 EXPR-8")
def part_truncate(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32()),
                        pa.field("s", pa.string()), pa.field("price", pa.decimal128(6, 2))])
    b.create(schema, partition_by=["truncate(10, n)", "truncate(1, s)", "truncate(500, price)"])
    rows = pa.Table.from_pydict({
        "id": list(range(30)),
        "n": [rng.randrange(-30, 30) for _ in range(29)] + [None],
        "s": [rng.choice(["apple", "avocado", "banana", "é-acute", ""]) for _ in range(30)],
        "price": [Decimal(rng.randrange(-2000, 2000)) / 100 for _ in range(30)],
    }, schema=schema)
    b.append(rows)
    b.read("n < 0", ["<", "n", 0])
    b.read("starts_with a", ["starts_with", "s", "a"])
    b.read("price between -5 and 5", ["and", [">=", "price", {"decimal": "-5.00"}], ["<=", "price", {"decimal": "5.00"}]])
    return finish_reader(b)


@case("reader", "r-part-time", "year, month, day and hour partitions, around the epoch",
      "PART-3 PART-6 PART-7 MAN-4 ML-4 READ-5 EXPR-8")
def part_time(b: TableBuild) -> dict:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("d", pa.date32()),
                        pa.field("ts", pa.timestamp("us")), pa.field("tz", pa.timestamp("us", tz="UTC")),
                        pa.field("h", pa.timestamp("us"))])
    b.create(schema, partition_by=["year(d)", "month(ts)", "day(tz)", "hour(h)"])
    instants = [dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1),
                dt.datetime(2026, 1, 15, 10, 30), dt.datetime(2026, 1, 15, 11, 5), dt.datetime(2026, 2, 1, 0, 0)]
    rows = {"id": [], "d": [], "ts": [], "tz": [], "h": []}
    for k, when in enumerate(instants * 3):
        rows["id"].append(k)
        rows["d"].append(when.date())
        rows["ts"].append(when)
        rows["tz"].append(when.replace(tzinfo=dt.timezone.utc))
        rows["h"].append(None if k == 14 else when)
    b.append(pa.Table.from_pydict(rows, schema=schema))
    b.read("year(d) >= 2026", [">=", "d", {"date": "2026-01-01"}])
    b.read("month of ts", ["<", "ts", {"timestamp": "2026-02-01T00:00:00"}])
    b.read("day of tz before the epoch", ["<", "tz", {"timestamptz": "1970-01-01T00:00:00Z"}])
    b.read("hour of h", ["=", "h", {"timestamp": "2026-01-15T11:05:00"}])
    b.read("h is null", ["is_null", "h"])
    return finish_reader(b)


@case("reader", "r-schema-add", "a column added after data was written reads as nulls in older files",
      "SCHEMA-4 SCHEMA-5 SCHEMA-7 READ-3 READ-6 COMMIT-16")
def schema_add(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA)
    first = b.append(events(10, rng))
    with t.update_schema() as u:
        u.add_column("quality", pa.float32())
    b.model = b.model.append_column(pa.field("quality", pa.float32()), pa.nulls(b.model.num_rows, pa.float32()))
    more = events(5, rng, first_id=10).append_column("quality", pa.array([0.5, None, 1.0, 2.0, -1.0], pa.float32()))
    b.append(more)
    b.read("quality is null", ["is_null", "quality"])
    b.read("quality > 0", [">", "quality", 0])
    b.read("first snapshot with its own schema", snapshot_id=first)
    return finish_reader(b)


@case("reader", "r-schema-rename", "a renamed column is found by field id, under its current name",
      "SCHEMA-1 SCHEMA-5 READ-3 READ-6 EXPR-3")
def schema_rename(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA)
    first = b.append(events(10, rng))
    with t.update_schema() as u:
        u.rename_column("v", "reading").rename_column("kind", "sensor")
    b.model = b.model.rename_columns(["id", "sensor", "n", "reading", "ts"])
    b.append(events(5, rng, first_id=10).rename_columns(["id", "sensor", "n", "reading", "ts"]))
    b.read("filter on the new name", [">", "reading", 50])
    b.read("old snapshot keeps the old names", ["=", "kind", "imu"], snapshot_id=first)
    return finish_reader(b)


@case("reader", "r-schema-drop", "a dropped column disappears; a new column of the same name has a new id",
      "SCHEMA-4 SCHEMA-5 SCHEMA-8 READ-6")
def schema_drop(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA)
    first = b.append(events(10, rng))
    with t.update_schema() as u:
        u.drop_column("v")
    b.model = b.model.drop_columns(["v"])
    with t.update_schema() as u:
        u.add_column("v", pa.string())
    b.model = b.model.append_column(pa.field("v", pa.string()), pa.nulls(b.model.num_rows, pa.string()))
    b.append(events(4, rng, first_id=10).drop_columns(["v"]).append_column("v", pa.array(["a", "b", None, "c"])))
    b.read("new v is not the old v", ["not_null", "v"])
    b.read("old snapshot still has the old v", [">", "v", 10], snapshot_id=first)
    return finish_reader(b)


@case("reader", "r-schema-widen", "int to long, float to double, decimal(5,2) to decimal(10,2), required to optional",
      "SCHEMA-5 SCHEMA-6 READ-6 MAN-7 EXPR-8")
def schema_widen(b: TableBuild) -> dict:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("i", pa.int32()),
                        pa.field("f", pa.float32()), pa.field("price", pa.decimal128(5, 2)),
                        pa.field("tag", pa.string(), nullable=False)])
    t = b.create(schema)
    first = b.append(pa.Table.from_pydict({"id": [0, 1, 2], "i": [-5, 7, 2**31 - 1], "f": [1.5, None, -0.25],
                                           "price": [Decimal("1.10"), Decimal("-999.99"), None],
                                           "tag": ["a", "b", "c"]}, schema=schema))
    with t.update_schema() as u:
        u.widen_column("i", pa.int64()).widen_column("f", pa.float64()).widen_column("price", pa.decimal128(10, 2))
        u.make_optional("tag")
    wide = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("i", pa.int64()),
                      pa.field("f", pa.float64()), pa.field("price", pa.decimal128(10, 2)), pa.field("tag", pa.string())])
    b.model = b.model.cast(wide)
    b.append(pa.Table.from_pydict({"id": [3, 4], "i": [2**40, -1], "f": [1e100, 2.5],
                                   "price": [Decimal("12345678.90"), Decimal("0.01")], "tag": [None, "e"]},
                                  schema=wide))
    b.read("i > 2^31 - 2 (bounds of the int file decode as int)", [">", "i", 2**31 - 2])
    b.read("f < 0", ["<", "f", 0])
    b.read("price < 0", ["<", "price", {"decimal": "0"}])
    b.read("first snapshot in the narrow schema", snapshot_id=first)
    return finish_reader(b)


@case("reader", "r-nulls-nan", "three-valued logic with nulls and NaN, against pruning",
      "EXPR-5 EXPR-6 EXPR-8 EXPR-9 TYPE-8 MAN-6 MAN-7 READ-4 READ-8")
def nulls_nan(b: TableBuild) -> dict:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("x", pa.float64()),
                        pa.field("s", pa.string())])
    b.create(schema)
    nan = float("nan")
    for chunk in ([1.0, 2.0, 3.0], [nan, nan, nan], [None, None, None], [nan, None, 5.0], [-0.0, 0.0, None]):
        start = b.model.num_rows
        b.append(pa.Table.from_pydict({"id": list(range(start, start + 3)), "x": chunk,
                                       "s": [None if v is None else "v" for v in chunk]}, schema=schema))
    b.read("x > 2", [">", "x", 2])
    b.read("x != 1 (NaN matches, null does not)", ["!=", "x", 1])
    b.read("NOT x < 5 (NaN matches)", ["not", ["<", "x", 5]])
    b.read("x = 0 (-0.0 equals 0.0)", ["=", "x", 0])
    b.read("x is null", ["is_null", "x"])
    b.read("NOT (s = 'v')", ["not", ["=", "s", "v"]])
    b.read("x > 1 OR s is null", ["or", [">", "x", 1], ["is_null", "s"]])
    return finish_reader(b)


@case("reader", "r-upsert", "upserts by key: matched rows replaced by deletion vectors, new rows added",
      "ROWDEL-6 ROWDEL-2 DV-8 READ-14")
def upsert(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA)
    b.append(events(20, rng))
    source = events(6, rng, first_id=17)  # ids 17..22: 3 updates, 3 inserts
    t.upsert(source, on=["id"])
    kept = b.model.filter(pc.invert(pc.is_in(b.model["id"], source["id"])))
    b.model = pa.concat_tables([kept, source])
    b.snap()
    b.read("ids 15 and up", [">=", "id", 15])
    return finish_reader(b)


@case("reader", "r-long-strings", "string and binary bounds are truncated; pruning stays exact",
      "TYPE-6 TYPE-7 MAN-7 EXPR-8 READ-4")
def long_strings(b: TableBuild) -> dict:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string()),
                        pa.field("bin", pa.binary())])
    b.create(schema)
    long_a, long_z = "a" * 40 + "b", "z" * 20 + "\U0010ffff" * 20
    b.append(pa.Table.from_pydict({"id": [0, 1], "s": [long_a, "m"], "bin": [b"\x00" * 40, b"\xff" * 40]},
                                  schema=schema))
    b.append(pa.Table.from_pydict({"id": [2, 3], "s": [long_z, "n"], "bin": [b"\x7f", b"\xff" * 50]}, schema=schema))
    b.read("s = the long value", ["=", "s", long_a])
    b.read("s > 'zzzz'", [">", "s", "zzzz"])
    b.read("prefix of the long value", ["starts_with", "s", "a" * 30])
    b.read("bin = 'ÿ' as UTF-8 (c3 bf): no row", ["=", "bin", "\u00ff"])
    return finish_reader(b)
