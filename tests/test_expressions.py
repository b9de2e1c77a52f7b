"""Filters: parsing, binding and evaluators (spec/expressions.md, EXPR-1..EXPR-10)."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefmt.conversions import to_bytes, to_physical, to_python, truncate_lower, truncate_upper
from lakefmt.errors import FilterError, UnknownColumnError
from lakefmt.evaluators import (
    ManifestEvaluator, MetricsEvaluator, PartitionEvaluator, StrictMetricsEvaluator, project_inclusive,
    rewrite_not, to_arrow_expression,
)
from lakefmt.expressions import (
    ALWAYS_FALSE, ALWAYS_TRUE, And, BoundPredicate, Expression, Not, Or, Predicate, bind, col, not_,
    parse_filter, referenced_field_ids, to_expression,
)
from lakefmt.manifest import DataFile, FieldSummary, ManifestFile
from lakefmt.partitioning import PartitionField, PartitionSpec, Transform, parse_partition_by
from lakefmt.schema import Field, Schema
from lakefmt.types import (
    BINARY, DATE, DOUBLE, FLOAT, INT, LONG, STRING, TIMESTAMP, TIMESTAMPTZ, LakeType, decimal,
)

UTC = dt.timezone.utc
DEC = decimal(9, 2)
SCHEMA = Schema((
    Field(1, "n", INT), Field(2, "i", LONG), Field(3, "f", DOUBLE), Field(4, "s", STRING),
    Field(5, "b", BINARY), Field(6, "ts", TIMESTAMPTZ), Field(7, "d", DATE), Field(8, "dec", DEC),
    Field(9, "g", FLOAT), Field(10, "local", TIMESTAMP), Field(11, "mission_id", INT),
))
NAMES = {f.id: f.name for f in SCHEMA.fields}


def name_of(field_id: int) -> str | None:
    return NAMES.get(field_id)


# -- EXPR-2: parser ---------------------------------------------------------------------------------

PARSE_CASES = [
    ("a = 1", col("a") == 1),
    ("a == 1", col("a") == 1),
    ("a != 'x'", col("a") != "x"),
    ("a <> 'x'", col("a") != "x"),
    ("1 < a", col("a") > 1),
    ("-2.5 >= a", col("a") <= Decimal("-2.5")),
    ("a <= 1e3", col("a") <= 1000.0),
    ("a > +7", col("a") > 7),
    ("a = 'it''s'", col("a") == "it's"),
    ("a = TRUE", col("a") == True),
    ("TRUE", ALWAYS_TRUE),
    ("false", ALWAYS_FALSE),
    # EXPR-2: AND binds tighter than OR.
    ("a = 1 OR b = 2 AND c = 3", (col("a") == 1) | ((col("b") == 2) & (col("c") == 3))),
    ("(a = 1 OR b = 2) AND c = 3", ((col("a") == 1) | (col("b") == 2)) & (col("c") == 3)),
    ("NOT a = 1 AND b = 2", Not(col("a") == 1) & (col("b") == 2)),
    ("not (a = 1 or b = 2)", Not((col("a") == 1) | (col("b") == 2))),
    ("NOT NOT a = 1", col("a") == 1),
    ("a BETWEEN 1 AND 3", (col("a") >= 1) & (col("a") <= 3)),
    ("a not between 1 and 3 or b = 1", ~((col("a") >= 1) & (col("a") <= 3)) | (col("b") == 1)),  # EXPR-2
    ("a IN (1, 2, 3)", col("a").isin([1, 2, 3])),
    ("a NOT IN ('x')", col("a").not_in(["x"])),
    ("a IS NULL", col("a").is_null()),
    ("a is not null", col("a").not_null()),
    ("s LIKE 'ab%'", col("s").starts_with("ab")),
    ("s NOT LIKE 'ab%'", col("s").not_starts_with("ab")),
    ("s LIKE 'ab'", col("s") == "ab"),
    ("s LIKE '%'", col("s").starts_with("")),
    ("starts_with(s, 'a_%')", col("s").starts_with("a_%")),
    ('"my col" = 1', col("my col") == 1),
    ('"a ""q"" b" = 1', col('a "q" b') == 1),
    ('"and" = 1', col("and") == 1),
    ("date = 1", col("date") == 1),
    ("d = DATE '2026-01-15'", col("d") == dt.date(2026, 1, 15)),
    ("t < TIMESTAMP '2026-01-01 10:00:00'", col("t") < dt.datetime(2026, 1, 1, 10)),
    ("t < timestamptz '2026-01-01 10:00:00'", col("t") < dt.datetime(2026, 1, 1, 10, tzinfo=UTC)),
    ("x = TIME '10:00:00'", col("x") == dt.time(10)),
    ("x In (1) AnD y Is NoT nUlL", col("x").isin([1]) & col("y").not_null()),
    ("isnan(f) OR NOT ISNAN(g)", col("f").is_nan() | Not(col("g").is_nan())),
]


@pytest.mark.parametrize("text, expected", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse(text: str, expected: Expression) -> None:
    assert parse_filter(text) == expected
    # The printed form parses back to the same tree.
    assert parse_filter(str(expected)) == expected


PARSE_ERRORS = [
    ("", 0, "empty filter"),
    ("a =", 3, "expected a column or a literal"),
    ("a = = 1", 4, "expected a column or a literal"),
    ("a = 1 b", 6, "expected AND, OR or end of filter"),
    ("(a = 1", 6, "expected ')'"),
    ("a = 'abc", 4, "unterminated string"),
    ("a ? 1", 2, "unexpected character '?'"),
    ("a = NULL", 4, "NULL is only allowed in IS NULL"),
    ("a = b", 2, "comparing two columns"),
    ("1 = 2", 0, "needs a column"),
    ("a IS 1", 5, "expected NULL"),
    ("a IN 1", 5, "expected '('"),
    ("a IN (b)", 6, "expected a literal"),
    ("s LIKE '%ab'", 7, "only prefix patterns"),
    ("s LIKE 'a_c%'", 7, "only prefix patterns"),
    ("d = DATE '2026-13-01'", 9, "invalid DATE literal"),
    ("a BETWEEN 1 OR 2", 12, "expected AND in BETWEEN"),
    ("a", 1, "expected a comparison operator"),
    ("and = 1", 0, "expected a column or a literal"),
]


@pytest.mark.parametrize("text, position, message", PARSE_ERRORS, ids=[c[0] or "empty" for c in PARSE_ERRORS])
def test_parse_errors(text: str, position: int, message: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert message in str(info.value)
    assert f"at position {position}" in str(info.value)
    assert info.value.position == position  # type: ignore[attr-defined]


def test_to_expression() -> None:
    assert to_expression(None) == ALWAYS_TRUE
    assert to_expression("a = 1") == (col("a") == 1)
    e = col("a") > 1
    assert to_expression(e) is e
    with pytest.raises(FilterError):
        to_expression(42)  # type: ignore[arg-type]


def test_fluent_combinators_simplify() -> None:
    e = col("a") == 1
    assert (e & ALWAYS_TRUE) == e and (e | ALWAYS_FALSE) == e
    assert (e & ALWAYS_FALSE) == ALWAYS_FALSE and (e | ALWAYS_TRUE) == ALWAYS_TRUE
    assert ~~e == e and ~ALWAYS_TRUE == ALWAYS_FALSE
    assert ALWAYS_TRUE.is_always_true and not e.is_always_true


# -- EXPR-3/EXPR-4: binding -----------------------------------------------------------------------------

def bp(op: str, name: str, *lits: Any) -> BoundPredicate:
    f = SCHEMA.find(name)
    return BoundPredicate(op, f.id, f.name, f.type, tuple(lits))


BIND_CASES = [
    ("i = 3", bp("eq", "i", 3)),
    ("i = 3.0", bp("eq", "i", 3)),
    ("n IN (3, 1, 3)", bp("in", "n", 1, 3)),
    ("n IN (3)", bp("eq", "n", 3)),
    ("n NOT IN (3)", bp("ne", "n", 3)),
    ("f > 1", bp("gt", "f", 1.0)),
    ("f > 1.5", bp("gt", "f", 1.5)),
    ("g < 0.1", bp("lt", "g", 0.10000000149011612)),
    ("dec >= 1.5", bp("ge", "dec", Decimal("1.50"))),
    ("dec = 2", bp("eq", "dec", Decimal("2.00"))),
    ("d = '2026-01-15'", bp("eq", "d", 20468)),
    ("d = DATE '1969-12-31'", bp("eq", "d", -1)),
    ("ts >= '2026-01-01'", bp("ge", "ts", 1767225600000000)),
    ("ts >= '2026-01-01T10:00:00Z'", bp("ge", "ts", 1767225600000000 + 36_000_000_000)),
    ("ts >= '2026-01-01 10:00:00'", bp("ge", "ts", 1767225600000000 + 36_000_000_000)),
    ("ts >= '2026-01-01T12:00:00+02:00'", bp("ge", "ts", 1767225600000000 + 36_000_000_000)),
    ("local < TIMESTAMP '1970-01-01 00:00:01'", bp("lt", "local", 1_000_000)),
    ("s LIKE 'ab%'", bp("starts_with", "s", "ab")),
    ("b LIKE 'ab%'", bp("starts_with", "b", b"ab")),
    ("b = 'x'", bp("eq", "b", b"x")),
    ("s IS NULL", bp("is_null", "s")),
    ("n IN (1) AND n NOT IN (2)", bp("eq", "n", 1) & bp("ne", "n", 2)),
]


@pytest.mark.parametrize("text, expected", BIND_CASES, ids=[c[0] for c in BIND_CASES])
def test_bind(text: str, expected: Expression) -> None:
    assert bind(text, SCHEMA) == expected


def test_bind_python_objects() -> None:
    assert bind(col("ts") == dt.datetime(1970, 1, 1, 0, 0, 1), SCHEMA) == bp("eq", "ts", 1_000_000)
    assert bind(col("ts") == dt.date(1970, 1, 2), SCHEMA) == bp("eq", "ts", 86_400_000_000)
    assert bind(col("d") > dt.date(1970, 1, 2), SCHEMA) == bp("gt", "d", 1)
    assert bind(col("b").starts_with(b"\xff"), SCHEMA) == bp("starts_with", "b", b"\xff")
    assert bind(col("n").isin([]), SCHEMA) == ALWAYS_FALSE
    assert bind(col("n").not_in([]), SCHEMA) == ALWAYS_TRUE
    assert bind(~(col("n") == 1), SCHEMA) == Not(bp("eq", "n", 1))


BIND_ERRORS = [
    ("i = 'abc'", FilterError, "type mismatch"),
    ("n = 2147483648", FilterError, "out of range"),
    ("n = 1.5", FilterError, "not an integral value"),
    ("f = 'x'", FilterError, "type mismatch"),
    ("dec = 1.234", FilterError, "more than 2 fractional digits"),
    ("dec = 12345678", FilterError, "out of range"),
    ("d = 'yesterday'", FilterError, "not an ISO date string"),
    ("d = 5", FilterError, "type mismatch"),
    ("ts = 5", FilterError, "type mismatch"),
    ("s = 5", FilterError, "type mismatch"),
    ("n LIKE 'a%'", FilterError, "applies to string and binary columns"),
    ("s = TRUE", FilterError, "type mismatch"),
    ("isnan(n)", FilterError, "applies to float and double columns"),
]


@pytest.mark.parametrize("text, error, message", BIND_ERRORS, ids=[c[0] for c in BIND_ERRORS])
def test_bind_errors(text: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        bind(text, SCHEMA)


def test_bind_unknown_column() -> None:
    with pytest.raises(UnknownColumnError) as info:
        bind("nope = 1 AND n = 2", SCHEMA)
    assert "'nope'" in str(info.value)
    assert "n, i, f, s" in str(info.value)  # lists the table's columns
    with pytest.raises(FilterError, match="IS NULL"):
        bind(col("n") == None, SCHEMA)
    with pytest.raises(FilterError, match="NaN"):
        bind(col("f") == math.nan, SCHEMA)  # noqa: PLW0177 -- builds a predicate


def test_rebind_after_widening() -> None:
    bound = bind("n = 1", SCHEMA)
    widened = Schema(tuple(Field(f.id, "m" if f.name == "n" else f.name, LONG if f.name == "n" else f.type)
                           for f in SCHEMA.fields))
    assert bind(bound, widened) == BoundPredicate("eq", 1, "m", LONG, (1,))
    with pytest.raises(FilterError, match="bound to another schema"):
        bind(bound, Schema((Field(1, "n", STRING),)))


def test_referenced_field_ids() -> None:
    assert referenced_field_ids(bind("n = 1 OR (s IS NULL AND NOT ts > '2026-01-01')", SCHEMA)) == {1, 4, 6}
    assert referenced_field_ids(ALWAYS_TRUE) == set()


# -- EXPR-6: NOT push-down --------------------------------------------------------------------------------

def test_rewrite_not() -> None:
    e = bind("NOT (n < 5 OR s IS NULL) AND NOT (s LIKE 'a%') AND NOT n IN (1, 2)", SCHEMA)
    assert rewrite_not(e) == (bp("ge", "n", 5) & bp("not_null", "s")) & bp("not_starts_with", "s", "a") \
        & bp("not_in", "n", 1, 2)
    assert rewrite_not(not_(bp("eq", "n", 1) & bp("le", "i", 2))) == bp("ne", "n", 1) | bp("gt", "i", 2)
    # Float ordering comparisons: NaN satisfies the negation (READ-8).
    assert rewrite_not(bind("NOT f < 5 AND NOT f = 1", SCHEMA)) == Or(bp("ge", "f", 5.0), bp("is_nan", "f")) \
        & bp("ne", "f", 1.0)
    assert rewrite_not(bind("NOT isnan(g)", SCHEMA)) == bp("not_nan", "g")


# -- evaluator unit cases ---------------------------------------------------------------------------------

def data_file(table: pa.Table, *, partition: tuple = (), spec_id: int = 0, drop: frozenset[int] = frozenset(),
              path: str = "data/f.parquet") -> DataFile:
    """A DataFile whose statistics are computed from ``table`` (columns named per SCHEMA)."""
    vc, nc, lo, hi = {}, {}, {}, {}
    for field in SCHEMA.fields:
        if field.name not in table.column_names or field.id in drop:
            continue
        arr = table.column(field.name)
        vc[field.id], nc[field.id] = len(arr), arr.null_count
        values = [to_physical(field.type, v) for v in arr.to_pylist() if v is not None]
        values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
        if values:
            lower, upper = truncate_lower(field.type, min(values)), truncate_upper(field.type, max(values))
            lo[field.id] = to_bytes(field.type, lower)
            if upper is not None:
                hi[field.id] = to_bytes(field.type, upper)
    return DataFile(path, partition, table.num_rows, 100, spec_id=spec_id, value_counts=vc,
                    null_value_counts=nc, lower_bounds=lo, upper_bounds=hi)


def make_table(rows: dict[str, list]) -> pa.Table:
    return pa.table({name: arrow_from_physical(SCHEMA.find(name).type, values)
                     for name, values in rows.items()})


def arrow_from_physical(ltype: LakeType, values: list) -> pa.Array:
    if ltype.name == "date":
        return pa.array(values, pa.int32()).cast(pa.date32())
    if ltype.name in ("time", "timestamp", "timestamptz"):
        return pa.array(values, pa.int64()).cast(ltype.to_arrow())
    return pa.array(values, ltype.to_arrow())


def matching_rows(table: pa.Table, expr: Expression) -> int:
    return table.filter(to_arrow_expression(expr, lambda fid: NAMES[fid] if NAMES[fid] in table.column_names
                                            else None)).num_rows


def test_metrics_evaluator_rules() -> None:
    t = make_table({"n": [1, 5, None], "f": [1.0, float("nan"), 3.0], "s": ["b" * 20, "c", None]})
    f = data_file(t)
    might = lambda text: MetricsEvaluator(text, SCHEMA).might_match(f)
    assert might("n < 2") and not might("n < 1") and not might("n > 5") and might("n >= 5")
    assert not might("n = 3 AND n = 7") and might("n IN (0, 5)") and not might("n IN (0, 6)")
    assert might("n IS NULL") and might("n IS NOT NULL") and might("i = 1")
    assert not might("f > 3") and might("f != 2")  # NaN rows satisfy != (bounds ignore NaN)
    assert might("s LIKE 'bbbbbbbbbbbbbbbbbbbb%'") and not might("s LIKE 'a%'") and not might("s LIKE 'd%'")
    assert might("ts > '2026-01-01'")  # no statistics: might match
    all_null = data_file(make_table({"n": [None, None]}))
    assert not MetricsEvaluator("n = 1", SCHEMA).might_match(all_null)
    assert not MetricsEvaluator("n IS NOT NULL", SCHEMA).might_match(all_null)
    assert not MetricsEvaluator("n != 1", SCHEMA).might_match(all_null)
    assert not MetricsEvaluator("n IS NULL", SCHEMA).might_match(data_file(make_table({"n": [1]})))
    assert not MetricsEvaluator("n != 1", SCHEMA).might_match(data_file(make_table({"n": [1, 1]})))
    assert not MetricsEvaluator(ALWAYS_TRUE, SCHEMA).might_match(data_file(make_table({"n": []})))


def test_strict_evaluator_rules_and_identity_partitions() -> None:
    t = make_table({"n": [1, 5], "mission_id": [2, 2], "f": [1.0, 2.0], "s": ["abc", "abd"]})
    spec = parse_partition_by(["mission_id"], SCHEMA, spec_id=1)
    f = data_file(t, partition=(2,), spec_id=1)
    must = lambda text: StrictMetricsEvaluator(text, SCHEMA).must_match(f, spec)
    assert must("mission_id = 2") and must("mission_id IN (1, 2)") and not must("mission_id != 2")
    assert must("n >= 1 AND n <= 5") and not must("n > 1") and must("n NOT IN (0, 6)")
    assert must("s LIKE 'ab%'") and not must("s LIKE 'abc%'") and must("s NOT LIKE 'x%'")
    assert not must("f > 0")  # float columns: never strict (NaN)
    assert must("n IS NOT NULL") and not must("n IS NULL")
    assert must("mission_id = 2 OR n = 100") and not must("mission_id = 2 AND n = 1")
    # Without the spec (or with another spec id) only statistics decide.
    assert StrictMetricsEvaluator("mission_id = 2", SCHEMA).must_match(f)
    no_stats = StrictMetricsEvaluator("mission_id = 2", SCHEMA)
    assert no_stats.must_match(DataFile("x", (2,), 2, 1, spec_id=1), spec)
    assert not no_stats.must_match(DataFile("x", (2,), 2, 1, spec_id=9), spec)
    assert not no_stats.must_match(DataFile("x", (2,), 2, 1, spec_id=1))


def test_to_arrow_expression_null_semantics_and_missing_columns() -> None:
    t = make_table({"n": [1, None, 3], "f": [1.0, float("nan"), None]})
    assert matching_rows(t, bind("n != 1", SCHEMA)) == 1
    assert matching_rows(t, bind("NOT n = 1", SCHEMA)) == 1
    assert matching_rows(t, bind("n NOT IN (1, 2)", SCHEMA)) == 1
    assert matching_rows(t, bind("f != 1", SCHEMA)) == 1  # NaN != 1 is true (IEEE)
    assert matching_rows(t, bind("NOT f < 5", SCHEMA)) == 1  # NaN < 5 is FALSE, so NOT is TRUE (READ-8)
    assert matching_rows(t, bind("f < 5", SCHEMA)) == 1
    assert matching_rows(t, bind("isnan(f)", SCHEMA)) == 1
    assert matching_rows(t, bind("NOT isnan(f)", SCHEMA)) == 1  # NULL stays NULL
    assert matching_rows(t, bind("s IS NULL", SCHEMA)) == 3  # missing column reads as null
    assert matching_rows(t, bind("s IS NOT NULL OR s = 'x' OR s NOT LIKE 'a%'", SCHEMA)) == 0
    with pytest.raises(FilterError, match="not bound"):
        to_arrow_expression(col("n") == 1, name_of)


def test_projection_examples() -> None:
    spec = parse_partition_by(["day(ts)", "bucket(4, i)", "truncate(2, s)", "n"], SCHEMA)
    p = project_inclusive("ts < '2026-01-02' AND i = 7 AND s LIKE 'abc%' AND n != 3", spec, SCHEMA)
    day, bucket, trunc, ident = spec.fields
    assert p == And(And(  # a chain of four is a balanced tree (EXPR-11)
        BoundPredicate("le", day.field_id, "ts_day", DATE, (20454,)),
        BoundPredicate("eq", bucket.field_id, "i_bucket_4", INT, (bucket.transform.apply_value(7, LONG),))),
        And(BoundPredicate("eq", trunc.field_id, "s_trunc_2", STRING, ("ab",)),
            BoundPredicate("ne", ident.field_id, "n", INT, (3,))))
    assert project_inclusive("i = 7 OR s LIKE 'a%'", spec, SCHEMA) == Or(
        BoundPredicate("eq", bucket.field_id, "i_bucket_4", INT, (bucket.transform.apply_value(7, LONG),)),
        BoundPredicate("starts_with", trunc.field_id, "s_trunc_2", STRING, ("a",)))
    assert project_inclusive("i > 7", spec, SCHEMA) == ALWAYS_TRUE  # bucket: only = and IN
    assert project_inclusive("NOT (f > 1)", spec, SCHEMA) == ALWAYS_TRUE


# -- property tests: inclusive evaluators never drop a match; strict never over-claims --------------------

_NAN = float("nan")
VALUES: dict[str, st.SearchStrategy] = {
    "n": st.integers(-4, 4) | st.sampled_from([-2**31, 2**31 - 1]),
    "i": st.integers(-40, 40) | st.sampled_from([-2**63, 2**63 - 1]),
    "f": st.sampled_from([-1.5, -0.0, 0.0, 1.0, 2.5, math.inf, -math.inf]) | st.floats(-5, 5),
    "g": st.floats(-5, 5, width=32) | st.sampled_from([0.0, -0.0, 0.10000000149011612, math.inf]),
    "s": st.text(alphabet="ab\u00e9\U0010ffff", max_size=20),
    "b": st.binary(max_size=18) | st.lists(st.sampled_from([0, 1, 255]), max_size=18).map(bytes),
    "ts": st.integers(-3, 3).map(lambda d: d * 86_400_000_000) | st.integers(-3 * 86_400_000_000,
                                                                                 3 * 86_400_000_000),
    "local": st.integers(-3 * 3_600_000_000, 3 * 3_600_000_000),
    "d": st.integers(-40, 40),
    "dec": st.decimals(min_value=-10, max_value=10, places=2, allow_nan=False, allow_infinity=False),
}
COLUMNS = list(VALUES)


def literal_for(name: str, physical: Any) -> Any:
    """A Python literal that binds to ``physical`` (timestamps/dates as datetime/date objects)."""
    ltype = SCHEMA.find(name).type
    if ltype.name in ("timestamptz", "timestamp", "date"):
        return to_python(ltype, physical)
    return physical


@st.composite
def leaves(draw: st.DrawFn) -> Expression:
    name = draw(st.sampled_from(COLUMNS))
    ops = ["eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "is_null", "not_null"]
    if name in ("f", "g"):
        ops += ["is_nan", "not_nan"]
    if name in ("s", "b"):
        ops += ["starts_with", "not_starts_with"] * 3
    op = draw(st.sampled_from(ops))
    if op in ("is_null", "not_null", "is_nan", "not_nan"):
        return Predicate(op, name)
    if op in ("in", "not_in"):
        values = draw(st.lists(VALUES[name], max_size=3))
        return Predicate(op, name, tuple(literal_for(name, v) for v in values))
    if op in ("starts_with", "not_starts_with"):
        value = draw(VALUES[name])
        return Predicate(op, name, (value[: draw(st.integers(0, 18))],))
    return Predicate(op, name, (literal_for(name, draw(VALUES[name])),))


PREDICATES = st.recursive(
    leaves(),
    lambda inner: st.one_of(st.tuples(inner, inner).map(lambda p: And(*p)),
                            st.tuples(inner, inner).map(lambda p: Or(*p)), inner.map(Not)),
    max_leaves=5,
)


@st.composite
def tables(draw: st.DrawFn) -> dict[str, list]:
    size = draw(st.integers(0, 8))
    rows: dict[str, list] = {}
    for name in COLUMNS:
        value = VALUES[name]
        if name in ("f", "g"):
            value = value | st.just(_NAN)
        rows[name] = draw(st.lists(st.none() | value, min_size=size, max_size=size))
    return rows


def kleene(expr: Expression, row: dict[str, Any]) -> bool | None:
    """Reference SQL three-valued evaluation of a bound expression (NOT applied to truth values)."""
    if isinstance(expr, (And, Or)):
        a, b = kleene(expr.left, row), kleene(expr.right, row)
        if isinstance(expr, And):
            return False if a is False or b is False else None if a is None or b is None else True
        return True if a is True or b is True else None if a is None or b is None else False
    if isinstance(expr, Not):
        v = kleene(expr.child, row)
        return None if v is None else not v
    if expr == ALWAYS_TRUE or expr == ALWAYS_FALSE:
        return expr == ALWAYS_TRUE
    assert isinstance(expr, BoundPredicate)
    value, op, lits = row[expr.name], expr.op, expr.literals
    if op in ("is_null", "not_null"):
        return (value is None) == (op == "is_null")
    if value is None:
        return None
    if op in ("is_nan", "not_nan"):
        return math.isnan(value) == (op == "is_nan")
    return {"eq": lambda: value == lits[0], "ne": lambda: value != lits[0], "lt": lambda: value < lits[0],
            "le": lambda: value <= lits[0], "gt": lambda: value > lits[0], "ge": lambda: value >= lits[0],
            "in": lambda: value in lits, "not_in": lambda: value not in lits,
            "starts_with": lambda: value.startswith(lits[0]),
            "not_starts_with": lambda: not value.startswith(lits[0])}[op]()


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(rows=tables(), pred=PREDICATES)
def test_row_filter_is_sql_three_valued_logic(rows: dict[str, list], pred: Expression) -> None:
    # EXPR-5/EXPR-10 (READ-8): the Arrow filter selects exactly the rows where the filter is TRUE
    # under SQL three-valued logic with IEEE float comparisons (Python's own semantics).
    table, bound = make_table(rows), bind(pred, SCHEMA)
    expected = [i for i in range(table.num_rows)
                if kleene(bound, {k: v[i] for k, v in rows.items()}) is True]
    got = table.append_column("__i", pa.array(range(table.num_rows), pa.int64()))
    got = got.filter(to_arrow_expression(bound, name_of)).column("__i").to_pylist()
    assert got == expected


@PROPERTY
@given(rows=tables(), pred=PREDICATES, drop=st.frozensets(st.integers(1, 11), max_size=3))
def test_metrics_evaluators_are_sound(rows: dict[str, list], pred: Expression, drop: frozenset[int]) -> None:
    # EXPR-8: a file holding a matching row is never pruned; EXPR-9: must_match implies all rows match.
    table, bound = make_table(rows), bind(pred, SCHEMA)
    f = data_file(table, drop=drop)
    matches = matching_rows(table, bound)
    if matches:
        assert MetricsEvaluator(bound, SCHEMA).might_match(f)
    if StrictMetricsEvaluator(bound, SCHEMA).must_match(f):
        assert matches == table.num_rows


SPEC = parse_partition_by(["day(ts)", "bucket(3, i)", "truncate(2, s)", "n", "truncate(4, i)", "month(d)",
                           "truncate(1, b)", "truncate(50, dec)", "hour(local)", "g"], SCHEMA, spec_id=7)
SPEC_TYPES = SPEC.partition_type(SCHEMA)


def partition_tuples(table: pa.Table) -> list[tuple]:
    parts = SPEC.compute(table, SCHEMA)
    columns = [[to_physical(t, v) for v in parts.column(i).to_pylist()]
               for i, (_, t) in enumerate(SPEC_TYPES)]
    return list(zip(*columns)) if columns else []


def summaries(partitions: list[tuple]) -> tuple[FieldSummary, ...]:
    out = []
    for i, (_, ltype) in enumerate(SPEC_TYPES):
        values = [p[i] for p in partitions
                  if p[i] is not None and not (isinstance(p[i], float) and math.isnan(p[i]))]
        lower = to_bytes(ltype, truncate_lower(ltype, min(values))) if values else None
        upper = truncate_upper(ltype, max(values)) if values else None
        out.append(FieldSummary(any(p[i] is None for p in partitions), lower,
                                to_bytes(ltype, upper) if upper is not None else None))
    return tuple(out)


def manifest(partitions: list[tuple]) -> ManifestFile:
    return ManifestFile("m.parquet", 1, SPEC.spec_id, 1, 1, len(partitions), 0, 0, 1, 0, 0,
                        summaries(partitions))


@PROPERTY
@given(rows=tables(), pred=PREDICATES)
def test_partition_projection_is_inclusive(rows: dict[str, list], pred: Expression) -> None:
    # EXPR-7/EXPR-8: partitions (and manifests) holding a matching row are never pruned.
    table, bound = make_table(rows), bind(pred, SCHEMA)
    partitions = partition_tuples(table)
    mask = table.append_column("__i", pa.array(range(table.num_rows), pa.int64()))
    matched = mask.filter(to_arrow_expression(bound, name_of)).column("__i").to_pylist()
    evaluator = PartitionEvaluator(bound, SPEC, SCHEMA)
    manifests = ManifestEvaluator(bound, SPEC, SCHEMA)
    strict = StrictMetricsEvaluator(bound, SCHEMA)
    for i in matched:
        assert evaluator.might_match(partitions[i])
        assert manifests.might_match(manifest([partitions[i]]))
    if matched:
        assert manifests.might_match(manifest(partitions))
    # Per-partition files: strict evaluation with identity partition values never over-claims.
    for value in set(partitions):
        rows_in = [i for i, p in enumerate(partitions) if p == value]
        part = table.take(pa.array(rows_in, pa.int64()))
        if strict.must_match(data_file(part, partition=value, spec_id=SPEC.spec_id), SPEC):
            assert all(i in matched for i in rows_in)


def test_manifest_evaluator_basics() -> None:
    spec = parse_partition_by(["n"], SCHEMA, spec_id=7)
    m = ManifestFile("m", 1, 7, 1, 1, 1, 0, 0, 1, 0, 0,
                     (FieldSummary(False, to_bytes(INT, 3), to_bytes(INT, 5)),))
    assert ManifestEvaluator("n = 4", spec, SCHEMA).might_match(m)
    assert not ManifestEvaluator("n = 6", spec, SCHEMA).might_match(m)
    assert not ManifestEvaluator("n IS NULL", spec, SCHEMA).might_match(m)
    assert ManifestEvaluator("n = 6", PartitionSpec(8, spec.fields), SCHEMA).might_match(m)  # other spec
    assert ManifestEvaluator("n = 6", spec, SCHEMA).might_match(
        ManifestFile("m", 1, 7, 1, 1, 1, 0, 0, 1, 0, 0, (FieldSummary(True),)))


def test_old_spec_with_dropped_source_column() -> None:
    # A spec kept from before a column was dropped (PART-12) still evaluates on the other fields.
    spec = PartitionSpec(3, (PartitionField(99, 1000, "gone", Transform("identity")),
                             PartitionField(11, 1001, "mission_id", Transform("identity"))))
    assert not PartitionEvaluator("mission_id = 2", spec, SCHEMA).might_match(("x", 3))
    assert PartitionEvaluator("mission_id = 2", spec, SCHEMA).might_match(("x", 2))
    m = ManifestFile("m", 1, 3, 1, 1, 1, 0, 0, 1, 0, 0,
                     (FieldSummary(False, b"x", b"x"),
                      FieldSummary(False, to_bytes(INT, 3), to_bytes(INT, 3))))
    assert not ManifestEvaluator("mission_id = 2", spec, SCHEMA).might_match(m)
