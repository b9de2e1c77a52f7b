"""A bound filter as the WHERE clause of a DuckDB query, with exactly its meaning (spec/expressions.md, READ-18).

:func:`to_duckdb_sql` turns a bound filter (EXPR-3, EXPR-4) into SQL text plus parameter values
such that DuckDB's value of the clause on every row is the filter's value under EXPR-5: TRUE,
FALSE or NULL alike, so that NOT and the Kleene AND/OR of SQL compose it exactly. Where DuckDB's
own meaning differs from EXPR-5 the text says so:

* A filter on a ``float`` or ``double`` column is not translated. DuckDB orders NaN above every
  number, which a guard could undo (``c > v AND NOT isnan(c)``), but its Parquet reader also
  decides such filters from the row-group statistics, which exclude NaN (TYPE-8, and Parquet's
  own rule): measured with DuckDB 2.0 on one file of doubles {11, 12, NaN, 13},
  ``isnan(d)`` found no row, and ``d > 5 AND NOT isnan(d)`` and ``NOT isnan(d)`` returned the NaN
  rows, the filter having been judged always true from the bounds 11..13.
* ``starts_with`` on a string is DuckDB's ``starts_with`` (bytes of UTF-8, the same as code
  points); on a binary it is the byte range ``p <= c < succ(p)``. The prefix is a parameter, so
  ``%`` and ``_`` in it are plain characters.
* Strings and binaries compare byte-wise in DuckDB as in EXPR-5 (UTF-8 preserves code point
  order).

Literals are physical values (TYPE-5). Strings and binaries are passed as parameters; every
other literal is written from a Python int, bool or Decimal as a typed constant
(``DATE '...'``, ``TIMESTAMPTZ '...+00'``, ``CAST('1.5' AS DECIMAL(9, 2))``), so no text of the
user's reaches the SQL except through a parameter, and a ``timestamptz`` literal names its offset and
does not depend on the session's time zone. Columns are quoted identifiers of the table's names.

Anything this does not translate exactly (a float column, a type without a rule here, a ``decimal``
wider than DuckDB's 38 digits, a column without a name) gives None, and the caller filters another
way.

Example:
    >>> to_duckdb_sql(bind("payload_id = 17 AND sensor_kind = 'imu'", schema), names.get)
    ('(("payload_id" = CAST(17 AS BIGINT)) AND ("sensor_kind" = ?))', ['imu'])
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

from lakefmt.expressions import AlwaysFalse, AlwaysTrue, And, BoundPredicate, Expression, Not, Or
from lakefmt.types import LakeType

__all__ = ["FILTER_TYPES", "SQL_TYPES", "has_glob", "quote_identifier", "to_duckdb_sql"]

# The lakefmt types whose values DuckDB reads from Parquet, compares and hands to Arrow as they are.
SQL_TYPES = frozenset({"boolean", "int", "long", "float", "double", "decimal", "date", "time", "timestamp",
                       "timestamptz", "string", "binary"})
# The types a filter may compare in DuckDB: not ``float``/``double``, whose NaN the statistics miss (see above).
FILTER_TYPES = SQL_TYPES - {"float", "double"}
_OPERATORS = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)


class _Untranslatable(Exception):
    """A part of the filter without an exact translation."""


_GLOB = frozenset("*?[]{}")


def has_glob(path: str) -> bool:
    """Whether DuckDB's ``read_parquet`` would read ``path`` as a glob pattern rather than one file."""
    return not _GLOB.isdisjoint(path)


def quote_identifier(name: str) -> str:
    """``name`` as a DuckDB quoted identifier (``"`` doubled inside)."""
    if "\x00" in name:
        raise _Untranslatable(name)
    return '"' + name.replace('"', '""') + '"'


def to_duckdb_sql(expr: Expression, column_name: Callable[[int], str | None]) -> tuple[str, list[Any]] | None:
    """The WHERE text of ``expr`` (bound) and its parameter values, or None when a part of it has no exact
    translation; ``column_name`` gives the column of a field id (None: untranslatable)."""
    params: list[Any] = []
    try:
        return _sql(expr, column_name, params), params
    except (_Untranslatable, ValueError, OverflowError, decimal.InvalidOperation):
        return None


def _sql(expr: Expression, column_name: Callable[[int], str | None], params: list[Any]) -> str:
    if isinstance(expr, AlwaysTrue):
        return "TRUE"
    if isinstance(expr, AlwaysFalse):
        return "FALSE"
    if isinstance(expr, (And, Or)):
        # Chains are balanced trees (EXPR-11): the recursion is as deep as the filter's nesting.
        joiner = " AND " if isinstance(expr, And) else " OR "
        return "(" + _sql(expr.left, column_name, params) + joiner + _sql(expr.right, column_name, params) + ")"
    if isinstance(expr, Not):
        return "(NOT " + _sql(expr.child, column_name, params) + ")"
    if not isinstance(expr, BoundPredicate):
        raise _Untranslatable(repr(expr))
    return _leaf(expr, column_name, params)


def _leaf(pred: BoundPredicate, column_name: Callable[[int], str | None], params: list[Any]) -> str:
    name = column_name(pred.field_id)
    ltype = pred.type
    if name is None or ltype.name not in FILTER_TYPES:
        raise _Untranslatable(str(pred))  # floats: see the module docstring
    column, op = quote_identifier(name), pred.op
    if op == "is_null":
        return f"({column} IS NULL)"
    if op == "not_null":
        return f"({column} IS NOT NULL)"
    if op in ("in", "not_in"):
        items = ", ".join(_literal(v, ltype, params) for v in pred.literals)
        return f"({column} {'IN' if op == 'in' else 'NOT IN'} ({items}))"
    if op in ("starts_with", "not_starts_with"):
        match = _prefix(column, ltype, pred.literal, params)
        return match if op == "starts_with" else f"(NOT {match})"
    if op not in _OPERATORS:
        raise _Untranslatable(str(pred))  # is_nan / not_nan: float columns only
    return f"({column} {_OPERATORS[op]} {_literal(pred.literal, ltype, params)})"


def _prefix(column: str, ltype: LakeType, prefix: Any, params: list[Any]) -> str:
    """TRUE where ``column`` starts with ``prefix``, NULL where it is NULL (EXPR-5)."""
    if ltype.name == "string" and isinstance(prefix, str):
        params.append(prefix)
        return f"starts_with({column}, ?)"
    if ltype.name != "binary" or not isinstance(prefix, bytes):
        raise _Untranslatable(repr(prefix))
    if not prefix:
        return f"({column} IS NOT NULL OR NULL)"  # TRUE for every value, NULL for NULL
    params.append(prefix)
    upper = prefix.rstrip(b"\xff")
    if not upper:  # only 0xff bytes: every value from the prefix on starts with it
        return f"({column} >= ?)"
    params.append(upper[:-1] + bytes([upper[-1] + 1]))
    return f"({column} >= ? AND {column} < ?)"


def _literal(value: Any, ltype: LakeType, params: list[Any]) -> str:
    """``value`` (physical, TYPE-5) as a constant of the column's DuckDB type."""
    name = ltype.name
    if name == "boolean" and isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, bool):
        raise _Untranslatable(repr(value))
    if name in ("int", "long") and isinstance(value, int):
        return f"CAST({int(value)} AS {'INTEGER' if name == 'int' else 'BIGINT'})"
    if name == "decimal" and isinstance(value, decimal.Decimal) and value.is_finite():
        precision, scale = ltype.precision or 0, ltype.scale or 0
        if precision > 38:
            raise _Untranslatable(str(ltype))
        return f"CAST('{value:f}' AS DECIMAL({precision}, {scale}))"
    if name == "date" and isinstance(value, int):
        return f"DATE '{(_EPOCH_DATE + dt.timedelta(days=value)).isoformat()}'"
    if name == "time" and isinstance(value, int):
        if not 0 <= value < 86_400_000_000:
            raise _Untranslatable(repr(value))
        return f"TIME '{(_EPOCH + dt.timedelta(microseconds=value)).time().isoformat('microseconds')}'"
    if name in ("timestamp", "timestamptz") and isinstance(value, int):
        wall = (_EPOCH + dt.timedelta(microseconds=value)).isoformat(" ", "microseconds")
        return f"TIMESTAMP '{wall}'" if name == "timestamp" else f"TIMESTAMPTZ '{wall}+00'"
    if name == "string" and isinstance(value, str):
        params.append(value)
        return "?"
    if name == "binary" and isinstance(value, bytes):
        params.append(value)
        return "?"
    raise _Untranslatable(f"{value!r} for {ltype}")
