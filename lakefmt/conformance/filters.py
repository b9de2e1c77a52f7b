"""Filters of the conformance kit: JSON trees, rendered as EXPR-2 text and as Arrow expressions.

The kit stores each filter as a tree (see :class:`~lakefmt.conformance.adapter.Filter`)
and its text. The generator renders the text from the tree, and checks lakefmt's rows
against the tree evaluated by Arrow under SQL three-valued logic (EXPR-5).

Example:
    >>> make(["and", [">=", "id", 3], ["is_null", "s"]]).text
    '(id >= 3 AND s IS NULL)'
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.conformance.adapter import Filter

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "true", "false", "between", "like"}
_TYPED = {"date": "DATE", "time": "TIME", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ"}


def make(tree: list[Any] | None) -> Filter | None:
    """The :class:`Filter` of ``tree`` (None for no filter)."""
    return None if tree is None else Filter(render(tree), tree)


def render(tree: list[Any]) -> str:
    """The EXPR-2 text of a filter tree."""
    op = tree[0]
    if op in ("and", "or"):
        return "(" + f" {op.upper()} ".join(render(t) for t in tree[1:]) + ")"
    if op == "not":
        return f"NOT {render(tree[1])}"
    column = _column(tree[1])
    if op in COMPARISONS:
        return f"{column} {op} {_literal(tree[2])}"
    if op in ("in", "not_in"):
        return f"{column} {'IN' if op == 'in' else 'NOT IN'} ({', '.join(_literal(v) for v in tree[2])})"
    if op == "is_null":
        return f"{column} IS NULL"
    if op == "not_null":
        return f"{column} IS NOT NULL"
    if op == "starts_with":
        return f"starts_with({column}, {_literal(tree[2])})"
    raise ValueError(f"unknown filter node {op!r}")


def _column(name: str) -> str:
    if _IDENTIFIER.match(name) and name.lower() not in _KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dict) and len(value) == 1:
        [(kind, text)] = value.items()
        if kind == "decimal":
            return str(text)
        if kind in _TYPED:
            return f"{_TYPED[kind]} '{text}'"
    raise ValueError(f"unknown filter literal {value!r}")


def to_arrow(tree: list[Any], schema: pa.Schema) -> pc.Expression:
    """The tree as an Arrow expression over ``schema``; TRUE selects, FALSE and NULL do not (EXPR-5)."""
    op = tree[0]
    if op in ("and", "or"):
        parts = [to_arrow(t, schema) for t in tree[1:]]
        return reduce((lambda a, b: a & b) if op == "and" else (lambda a, b: a | b), parts)
    if op == "not":
        return ~to_arrow(tree[1], schema)
    field = pc.field(tree[1])
    arrow_type = schema.field(tree[1]).type
    if op in COMPARISONS:
        value = _scalar(tree[2], arrow_type)
        return {"=": field == value, "!=": field != value, "<": field < value, "<=": field <= value,
                ">": field > value, ">=": field >= value}[op]
    if op in ("in", "not_in"):
        if not tree[2]:
            return pc.scalar(op == "not_in")
        if op == "in":
            return reduce(lambda a, b: a | b, [field == _scalar(v, arrow_type) for v in tree[2]])
        return reduce(lambda a, b: a & b, [field != _scalar(v, arrow_type) for v in tree[2]])
    if op == "is_null":
        return field.is_null()
    if op == "not_null":
        return field.is_valid()
    if op == "starts_with":
        return pc.starts_with(field, pattern=tree[2])
    raise ValueError(f"unknown filter node {op!r}")


def _scalar(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    if isinstance(value, dict):
        [(kind, text)] = value.items()
        parsed: Any = {
            "date": lambda s: dt.date.fromisoformat(s),
            "time": lambda s: dt.time.fromisoformat(s),
            "timestamp": lambda s: dt.datetime.fromisoformat(s),
            "timestamptz": lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00")),
            "decimal": Decimal,
        }[kind](text)
        if kind == "timestamptz" and parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        value = parsed
    elif isinstance(value, str) and (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)):
        value = value.encode()
    elif isinstance(value, (int, float)) and pa.types.is_decimal(arrow_type):
        value = Decimal(str(value))
    elif isinstance(value, int) and pa.types.is_floating(arrow_type):
        value = float(value)
    return pa.scalar(value, type=arrow_type)
