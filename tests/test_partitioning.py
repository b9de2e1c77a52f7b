"""Partition transforms and specs (spec/partitioning.md, PART-1..PART-8)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefmt.bucketing import bucket_hash, hash_array, murmur3_32
from lakefmt.conversions import to_physical
from lakefmt.errors import SchemaError, UnknownColumnError, ValidationError
from lakefmt.partitioning import (
    UNPARTITIONED, PartitionField, PartitionSpec, Transform, parse_partition_by,
)
from lakefmt.schema import Field, Schema
from lakefmt.types import (
    BINARY, BOOLEAN, DATE, DOUBLE, FLOAT, INT, LONG, STRING, TIME, TIMESTAMP, TIMESTAMPTZ, LakeType,
    decimal,
)

UTC = dt.timezone.utc
PST = dt.timezone(dt.timedelta(hours=-8))
DEC = decimal(9, 2)

SCHEMA = Schema((
    Field(1, "id", LONG), Field(2, "ts", TIMESTAMPTZ), Field(3, "mission_id", INT),
    Field(4, "name", STRING), Field(5, "d", DATE), Field(6, "amount", DEC), Field(7, "raw", BINARY),
    Field(8, "x", DOUBLE), Field(9, "flag", BOOLEAN), Field(10, "t", TIME), Field(11, "local", TIMESTAMP),
))


# -- PART-4: Iceberg spec Appendix B bucket hash vectors ------------------------------------------

HASH_VECTORS = [  # spec/partitioning.md PART-4 test vectors (= Iceberg spec Appendix B)
    pytest.param(INT, 34, 2017239379, 3, id="int-34"),
    pytest.param(LONG, 34, 2017239379, 3, id="long-34"),
    pytest.param(decimal(4, 2), Decimal("14.20"), -500754589, 3, id="decimal-14.20"),
    pytest.param(DATE, dt.date(2017, 11, 16), -653330422, 10, id="date-2017-11-16"),
    pytest.param(TIME, dt.time(22, 31, 8), -662762989, 3, id="time-22:31:08"),
    pytest.param(TIMESTAMP, dt.datetime(2017, 11, 16, 22, 31, 8), -2047944441, 7, id="timestamp"),
    pytest.param(TIMESTAMPTZ, dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=PST), -2047944441, 7,
                 id="timestamptz"),
    pytest.param(STRING, "iceberg", 1210000089, 9, id="string-iceberg"),
    pytest.param(BINARY, bytes([0, 1, 2, 3]), -188683207, 9, id="binary-00010203"),
]


@pytest.mark.parametrize("ltype, value, expected, bucket16", HASH_VECTORS)
def test_bucket_hash_iceberg_vectors(ltype: LakeType, value: object, expected: int, bucket16: int) -> None:
    # PART-4: murmur3_x86_32 (seed 0) of the Iceberg single-value bucket serialization.
    physical = to_physical(ltype, value)
    assert bucket_hash(physical, ltype) == expected
    # The vectorized (pyarrow.compute) hash agrees, and nulls stay null.
    arr = pa.array([value, None], type=ltype.to_arrow())
    assert hash_array(arr, ltype).to_pylist() == [expected, None]
    # bucket[N] = (hash & 0x7FFFFFFF) % N, scalar and vectorized.
    t = Transform("bucket", 16)
    assert t.apply_value(physical, ltype) == bucket16 == (expected & 0x7FFFFFFF) % 16
    assert t.apply(arr, ltype).to_pylist() == [bucket16, None]


def test_murmur3_tails() -> None:
    # PART-4: reference values of MurmurHash3_x86_32 (seed 0) for 0..3 tail bytes.
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"a") == 0x3C2569B2
    assert murmur3_32(b"abc") == -1277324294  # 0xB3DD93FA
    assert murmur3_32(b"abcd") == 0x43ED676A


# -- PART-5: Iceberg truncate vectors ------------------------------------------------------------

TRUNCATE_VECTORS = [  # spec/partitioning.md PART-5 test vectors (Iceberg's, plus saturation)
    pytest.param(INT, 10, 1, 0, id="int-W10-1"),
    pytest.param(INT, 10, -1, -10, id="int-W10-minus1"),
    pytest.param(INT, 10, -2147483647, -2147483648, id="int-W10-saturated"),
    pytest.param(LONG, 10, 1, 0, id="long-W10-1"),
    pytest.param(LONG, 10, -1, -10, id="long-W10-minus1"),
    pytest.param(LONG, 10, 10, 10, id="long-W10-10"),
    pytest.param(decimal(4, 2), 10, Decimal("10.65"), Decimal("10.60"), id="decimal(4,2)-W10-10.65"),
    pytest.param(decimal(3, 2), 10, Decimal("-0.05"), Decimal("-0.10"), id="decimal(3,2)-W10-minus0.05"),
    pytest.param(decimal(4, 2), 50, Decimal("10.65"), Decimal("10.50"), id="decimal(4,2)-W50-10.65"),
    pytest.param(decimal(3, 2), 50, Decimal("-0.05"), Decimal("-0.50"), id="decimal(3,2)-W50-minus0.05"),
    pytest.param(STRING, 3, "a\u00e9\U0001f600bc", "a\u00e9\U0001f600", id="string-W3-emoji"),
    pytest.param(BINARY, 3, bytes.fromhex("0001020304"), bytes.fromhex("000102"), id="binary-W3"),
    # The Iceberg spec example is W=50: 10.65 -> 10.50 (W=10 would give 10.60).
    pytest.param(DEC, 50, Decimal("10.65"), Decimal("10.50"), id="decimal-W50-10.65"),
    pytest.param(DEC, 10, Decimal("10.65"), Decimal("10.60"), id="decimal-W10-10.65"),
    pytest.param(DEC, 10, Decimal("-0.05"), Decimal("-0.10"), id="decimal-W10-minus0.05"),
    pytest.param(STRING, 3, "iceberg", "ice", id="string-W3-iceberg"),
    pytest.param(STRING, 3, "ab", "ab", id="string-W3-short"),
    pytest.param(STRING, 2, "\u00e9\u00e8\u00ea", "\u00e9\u00e8", id="string-code-points"),
    pytest.param(BINARY, 2, b"\x00\x01\x02", b"\x00\x01", id="binary-W2"),
]


@pytest.mark.parametrize("ltype, width, value, expected", TRUNCATE_VECTORS)
def test_truncate_iceberg_vectors(ltype: LakeType, width: int, value: object, expected: object) -> None:
    # PART-5: truncate[W], scalar and vectorized.
    t = Transform("truncate", width)
    assert t.apply_value(value, ltype) == expected
    out = t.apply(pa.array([value, None], type=ltype.to_arrow()), ltype)
    assert out.type == ltype.to_arrow()
    assert [to_physical(ltype, v) for v in out.to_pylist()] == [expected, None]


def test_truncate_saturates_at_type_minimum() -> None:
    # PART-5: results below the type's smallest value saturate (keeps order, no overflow).
    t = Transform("truncate", 10)
    assert t.apply_value(-2**31, INT) == -2**31
    assert t.apply(pa.array([-2**31 + 1], pa.int32()), INT).to_pylist() == [-2**31]
    assert t.apply_value(-2**63 + 3, LONG) == -2**63
    assert t.apply(pa.array([-2**63 + 3], pa.int64()), LONG).to_pylist() == [-2**63]
    assert t.apply_value(Decimal("-9999999.99"), DEC) == Decimal("-9999999.99")


# -- PART-3: time transforms ----------------------------------------------------------------------

TIME_VECTORS = [  # spec/partitioning.md PART-3 test vectors
    pytest.param("year", TIMESTAMPTZ, dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=UTC), 47, id="year"),
    pytest.param("month", TIMESTAMPTZ, dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=UTC), 574, id="month"),
    pytest.param("day", TIMESTAMPTZ, dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=UTC), 17486, id="day"),
    pytest.param("hour", TIMESTAMPTZ, dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=UTC), 419686, id="hour"),
    pytest.param("year", DATE, dt.date(2017, 11, 16), 47, id="year-of-date"),
    pytest.param("month", DATE, dt.date(1969, 12, 31), -1, id="month-before-epoch"),
    pytest.param("day", TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59, 999999), -1, id="day-floors"),
    pytest.param("hour", TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59), -1, id="hour-floors"),
    pytest.param("year", TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59), -1, id="year-floors"),
    pytest.param("month", TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59, 999999), -1, id="month-floors"),
    pytest.param("hour", TIMESTAMPTZ, dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=PST), 419686, id="hour-tz"),
    pytest.param("month", DATE, dt.date(2017, 11, 16), 574, id="month-of-date"),
    pytest.param("day", DATE, dt.date(2017, 11, 16), 17486, id="day-of-date"),
    pytest.param("year", TIMESTAMP, dt.datetime(1900, 1, 1), -70, id="year-1900"),
    pytest.param("month", TIMESTAMP, dt.datetime(1900, 1, 1), -840, id="month-1900"),
    pytest.param("day", TIMESTAMP, dt.datetime(1900, 1, 1), -25567, id="day-1900"),
    pytest.param("hour", TIMESTAMP, dt.datetime(1900, 1, 1), -613608, id="hour-1900"),
    pytest.param("year", DATE, dt.date(1969, 12, 31), -1, id="year-of-date-before-epoch"),
    pytest.param("day", DATE, dt.date(1969, 12, 31), -1, id="day-of-date-before-epoch"),
]


@pytest.mark.parametrize("name, ltype, value, expected", TIME_VECTORS)
def test_time_transforms(name: str, ltype: LakeType, value: object, expected: int) -> None:
    # PART-3: years/months/days/hours since the epoch, floor division before 1970.
    t = Transform(name)
    physical = to_physical(ltype, value)
    assert t.apply_value(physical, ltype) == expected
    out = t.apply(pa.array([value, None], type=ltype.to_arrow()), ltype)
    assert out.type == t.result_type(ltype).to_arrow()
    assert [to_physical(t.result_type(ltype), v) for v in out.to_pylist()] == [expected, None]


# -- PART-6: result types and refused source types ------------------------------------------------

@pytest.mark.parametrize("transform, source, result", [
    ("identity", DOUBLE, DOUBLE), ("identity", BOOLEAN, BOOLEAN), ("year", DATE, INT),
    ("month", TIMESTAMP, INT), ("day", TIMESTAMPTZ, DATE), ("day", DATE, DATE), ("hour", TIMESTAMP, INT),
    ("bucket[8]", STRING, INT), ("bucket[8]", DEC, INT), ("bucket[8]", TIME, INT),
    ("truncate[4]", STRING, STRING), ("truncate[4]", DEC, DEC), ("truncate[4]", LONG, LONG),
])
def test_result_types(transform: str, source: LakeType, result: LakeType) -> None:
    assert Transform.parse(transform).result_type(source) == result


@pytest.mark.parametrize("transform, source", [
    ("day", STRING), ("year", TIME), ("hour", DATE), ("bucket[4]", BOOLEAN), ("bucket[4]", FLOAT),
    ("bucket[4]", DOUBLE), ("truncate[4]", DOUBLE), ("truncate[4]", DATE), ("truncate[4]", TIMESTAMP),
    ("truncate[4]", BOOLEAN),
])
def test_refused_source_types(transform: str, source: LakeType) -> None:
    # PART-6: Iceberg's allowed transform/source combinations.
    with pytest.raises(SchemaError, match="cannot be applied"):
        Transform.parse(transform).result_type(source)


@pytest.mark.parametrize("text", ["identity", "year", "month", "day", "hour", "bucket[16]", "truncate[4]"])
def test_transform_round_trip(text: str) -> None:
    # PART-1: the JSON spelling.
    assert str(Transform.parse(text)) == text


@pytest.mark.parametrize("text", ["bucket", "bucket[0]", "truncate[]", "days", "identity[2]", "", "Day"])
def test_transform_parse_errors(text: str) -> None:
    with pytest.raises(ValidationError):
        Transform.parse(text)


def test_preserves_order() -> None:
    assert Transform("day").preserves_order and Transform("truncate", 3).preserves_order
    assert not Transform("bucket", 3).preserves_order


# -- vectorized == scalar (hypothesis) --------------------------------------------------------------

_HOUR_SAFE_US = 2**31 * 3_600_000_000 - 1
_VALUES = {
    "int": st.integers(-2**31, 2**31 - 1),
    "long": st.integers(-2**63, 2**63 - 1),
    "date": st.integers(-2**31, 2**31 - 1),
    "time": st.integers(0, 86_400_000_000 - 1),
    "timestamp": st.integers(-_HOUR_SAFE_US, _HOUR_SAFE_US),
    "timestamptz": st.integers(-_HOUR_SAFE_US, _HOUR_SAFE_US) | st.integers(-10**13, 10**13),
    "string": st.text(max_size=12),
    "binary": st.binary(max_size=12),
    "decimal": st.decimals(min_value=Decimal("-9999999.99"), max_value=Decimal("9999999.99"), places=2,
                           allow_nan=False, allow_infinity=False),
}
_TYPES = {"int": INT, "long": LONG, "date": DATE, "time": TIME, "timestamp": TIMESTAMP,
          "timestamptz": TIMESTAMPTZ, "string": STRING, "binary": BINARY, "decimal": DEC}
_COMBOS = [(t, s) for t in ["identity", "year", "month", "day", "hour", "bucket[1]", "bucket[16]",
                            "bucket[1000]", "truncate[1]", "truncate[3]", "truncate[10]", "truncate[1000]"]
           for s in _TYPES if (Transform.parse(t).name not in ("year", "month", "day", "hour")
                               or s in ("date", "timestamp", "timestamptz"))
           and not (t == "hour" and s == "date")
           and (not t.startswith("truncate") or s in ("int", "long", "string", "binary", "decimal"))
           and (not t.startswith("bucket") or s != "boolean")]


def _physical_list(arr: pa.Array, ltype: LakeType) -> list:
    """Physical values of an array without going through Python date/datetime (range-safe)."""
    if ltype.name == "date":
        return arr.cast(pa.int32()).to_pylist()
    if ltype.name in ("time", "timestamp", "timestamptz"):
        return arr.cast(pa.int64()).to_pylist()
    return [to_physical(ltype, v) for v in arr.to_pylist()]


def _arrow_from_physical(ltype: LakeType, values: list) -> pa.Array:
    if ltype.name == "date":
        return pa.array(values, pa.int32()).cast(pa.date32())
    if ltype.name in ("time", "timestamp", "timestamptz"):
        return pa.array(values, pa.int64()).cast(ltype.to_arrow())
    return pa.array(values, ltype.to_arrow())


@pytest.mark.parametrize("transform, source", _COMBOS, ids=[f"{t}-{s}" for t, s in _COMBOS])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_vectorized_matches_scalar(transform: str, source: str, data: st.DataObject) -> None:
    # PART-2..PART-5: apply() (pyarrow.compute) equals apply_value() on every element, nulls included.
    ltype, t = _TYPES[source], Transform.parse(transform)
    values = data.draw(st.lists(st.none() | _VALUES[source], max_size=20))
    arr = _arrow_from_physical(ltype, values)
    chunked = pa.chunked_array([arr[: len(values) // 2], arr[len(values) // 2:]], type=arr.type)
    out = t.apply(chunked, ltype)
    rtype = t.result_type(ltype)
    assert out.type == rtype.to_arrow()
    assert _physical_list(out, rtype) == [t.apply_value(v, ltype) for v in values]


# -- PART-8: partition_by strings ------------------------------------------------------------------

def test_parse_partition_by_happy() -> None:
    spec = parse_partition_by(["day(ts)", "mission_id", " bucket ( 16 , id ) ", "truncate(4,name)",
                               "year(d)", "month(local)"], SCHEMA, spec_id=3)
    assert spec.spec_id == 3
    assert [(f.source_id, f.field_id, f.name, str(f.transform)) for f in spec.fields] == [
        (2, 1000, "ts_day", "day"), (3, 1001, "mission_id", "identity"),
        (1, 1002, "id_bucket_16", "bucket[16]"), (4, 1003, "name_trunc_4", "truncate[4]"),
        (5, 1004, "d_year", "year"), (11, 1005, "local_month", "month"),
    ]
    assert spec.partition_type(SCHEMA) == [("ts_day", DATE), ("mission_id", INT), ("id_bucket_16", INT),
                                           ("name_trunc_4", STRING), ("d_year", INT), ("local_month", INT)]
    assert PartitionSpec.from_json(spec.to_json()) == spec
    assert spec.to_json()["fields"][0] == {"source-id": 2, "field-id": 1000, "name": "ts_day",
                                           "transform": "day"}
    assert parse_partition_by(["hour(ts)", '"name"'], SCHEMA, first_field_id=2000).fields[1] == \
        PartitionField(4, 2001, "name", Transform("identity"))
    assert parse_partition_by([], SCHEMA).is_unpartitioned and UNPARTITIONED.is_unpartitioned
    # PART-8: identity(col), case-insensitive function names, quoted column names.
    spec = parse_partition_by(["identity(id)", "DAY(ts)", 'Bucket(4, "name")'], SCHEMA)
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("id", "identity"), ("ts_day", "day"), ("name_bucket_4", "bucket[4]")]


@pytest.mark.parametrize("exprs, error, message", [
    (["nope"], UnknownColumnError, "unknown column 'nope'"),
    (["day(nope)"], UnknownColumnError, "unknown column 'nope'"),
    (["id", "id"], ValidationError, "duplicate partition field"),
    (["bucket(4, id)", "bucket(4,id)"], ValidationError, "duplicate partition field"),
    (["day(ts)", "hour(ts)"], ValidationError, "redundant partition field"),
    (["days(ts)"], ValidationError, "unknown partition transform 'days'"),
    (["bucket(id)"], ValidationError, "expected bucket(N, column)"),
    (["bucket(0, id)"], ValidationError, "needs a parameter"),
    (["truncate(name, 4)"], ValidationError, "expected truncate(N, column)"),
    ([""], ValidationError, "invalid partition expression"),
    (["day(name)"], SchemaError, "cannot be applied to a string column"),
    (["bucket(4, x)"], SchemaError, "cannot be applied to a double column"),
])
def test_parse_partition_by_errors(exprs: list[str], error: type, message: str) -> None:
    """PART-8 syntax errors, and PART-10: no duplicate field, no two time transforms of one column, an
    existing source column."""
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_partition_by(exprs, SCHEMA)


def test_partition_name_clash_with_column() -> None:
    """PART-10: a non-identity partition field must not take the name of a column."""
    schema = Schema((Field(1, "ts", TIMESTAMP), Field(2, "ts_day", DATE)))
    with pytest.raises(ValidationError, match="clashes"):
        parse_partition_by(["day(ts)"], schema)


# -- PART-7: partition paths --------------------------------------------------------------------------

def test_partition_path() -> None:
    spec = parse_partition_by(["day(ts)", "mission_id"], SCHEMA)
    day = (dt.date(2026, 1, 15) - dt.date(1970, 1, 1)).days
    assert spec.partition_path((day, 2), SCHEMA) == "ts_day=2026-01-15/mission_id=2"
    assert spec.partition_path((None, None), SCHEMA) == "ts_day=__NULL__/mission_id=__NULL__"
    with pytest.raises(ValidationError):
        spec.partition_path((day,), SCHEMA)


@pytest.mark.parametrize("expr, value, human", [  # PART-7 human strings
    ("month(ts)", 574, "2017-11"), ("hour(ts)", 419686, "2017-11-16-22"), ("year(ts)", 47, "2017"),
    ("bucket(8, id)", 0, "0"), ("x", 1e-07, "1e-07"), ("x", float("nan"), "nan"), ("x", 1.5, "1.5"),
    ("t", 81068000000, "22%3A31%3A08"), ("t", 1, "00%3A00%3A00.000001"),
    ("ts", 1510871468000000, "2017-11-16T22%3A31%3A08%2B00%3A00"), ("amount", Decimal("14.20"), "14.20"),
    ("year(ts)", 56, "2026"), ("month(ts)", 56 * 12, "2026-01"), ("day(ts)", -1, "1969-12-31"),
    ("hour(ts)", (dt.datetime(2026, 1, 15, 10) - dt.datetime(1970, 1, 1)) // dt.timedelta(hours=1),
     "2026-01-15-10"),
    ("name", "a/b c=%", "a%2Fb%20c%3D%25"), ("raw", b"\x00\xff", "00ff"), ("bucket(8, id)", 3, "3"),
    ("truncate(2, name)", "ab", "ab"), ("amount", Decimal("1.50"), "1.50"), ("flag", True, "true"),
    ("d", 0, "1970-01-01"), ("local", 1_000_000, "1970-01-01T00%3A00%3A01"),
])
def test_human_strings(expr: str, value: object, human: str) -> None:
    spec = parse_partition_by([expr], SCHEMA)
    assert spec.partition_path((value,), SCHEMA) == f"{spec.fields[0].name}={human}"


def test_compute_and_struct_type() -> None:
    spec = parse_partition_by(["day(ts)", "mission_id", "bucket(4, id)", "truncate(1, name)"], SCHEMA)
    data = pa.table({
        "id": pa.array([1, 2, None], pa.int64()),
        "ts": pa.array([0, -1, None], pa.timestamp("us", tz="UTC")),
        "mission_id": pa.array([2, None, 3], pa.int32()),
        "name": pa.array(["abc", None, "xyz"], pa.large_string()),
    })
    out = spec.compute(data, SCHEMA)
    assert out.column_names == ["ts_day", "mission_id", "id_bucket_4", "name_trunc_1"]
    assert out.schema == pa.schema(list(spec.arrow_struct_type(SCHEMA)))
    assert out.column("ts_day").to_pylist() == [dt.date(1970, 1, 1), dt.date(1969, 12, 31), None]
    assert out.column("mission_id").to_pylist() == [2, None, 3]
    assert out.column("id_bucket_4").to_pylist()[2] is None
    assert out.column("name_trunc_1").to_pylist() == ["a", None, "x"]
    assert UNPARTITIONED.compute(data, SCHEMA).num_rows == 3


def test_hash_array_strings_binary_decimals_hash_each_distinct_value() -> None:
    # PART-4: variable-width values are hashed per distinct value (dictionary-encoded) with mmh3;
    # repeats, nulls, chunks and dictionary-typed input give the scalar hash of every row.
    words = ["iceberg", "", "é😀", "iceberg", None, "x" * 100, ""]
    cases = [
        (STRING, pa.chunked_array([words[:3], words[3:]], pa.large_string())),
        (STRING, pa.array(words, pa.string()).dictionary_encode()),
        (BINARY, pa.array([None if w is None else w.encode() for w in words], pa.binary())),
        (decimal(4, 2), pa.array([Decimal("14.20"), None, Decimal("-1.28"), Decimal("14.20")],
                                 pa.decimal128(4, 2))),
    ]
    for ltype, arr in cases:
        expected = [None if v is None else bucket_hash(to_physical(ltype, v), ltype) for v in arr.to_pylist()]
        assert hash_array(arr, ltype).to_pylist() == expected
    assert hash_array(pa.array(["iceberg"]), STRING).to_pylist() == [1210000089]
