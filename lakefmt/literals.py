"""Literal coercion: a filter literal as the physical value of its column (spec/expressions.md EXPR-4).

Binding (:func:`lakefmt.expressions.bind`) turns each literal of a predicate into the value
the column stores (TYPE-5), so that pruning and row filters compare like with like:

* integers must be integral and in the column's range; floats are rounded to ``float``
  precision for a ``float`` column; decimals must fit the scale and precision exactly;
* strings and booleans only match their own kind; a ``binary`` column takes ``bytes`` or
  UTF-8 ``str``;
* temporal columns take ISO strings (:func:`parse_iso_temporal`) and ``date``/``time``/
  ``datetime`` objects, never ints: a naive value for ``timestamptz`` is UTC, an
  offset-aware value for ``timestamp`` is converted to UTC wall time, a date for either
  timestamp type is its midnight, and a ``date`` column takes a datetime only at midnight
  without an offset.

A literal that does not fit raises :class:`~lakefmt.errors.FilterError`.

Example:
    >>> coerce_literal("2026-01-02", DATE, "day")
    20455
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import struct
from typing import Any

from lakefmt.conversions import EPOCH_DATE, EPOCH_NAIVE, EPOCH_UTC, to_physical
from lakefmt.errors import FilterError
from lakefmt.types import LakeType

_INT_RANGE = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}
_US = dt.timedelta(microseconds=1)


def _mismatch(value: Any, ltype: LakeType, column: str, why: str = "") -> FilterError:
    detail = f": {why}" if why else ""
    return FilterError(f"type mismatch: cannot compare column {column!r} ({ltype}) with "
                       f"{type(value).__name__} literal {value!r}{detail}")


def coerce_literal(value: Any, ltype: LakeType, column: str) -> Any:
    """The physical value of ``value`` for a column of ``ltype`` (EXPR-4)."""
    if value is None:
        raise FilterError(f"NULL literal in a comparison on {column!r}: use IS NULL / IS NOT NULL")
    name = ltype.name
    if name == "boolean":
        if isinstance(value, bool):
            return value
        raise _mismatch(value, ltype, column)
    if isinstance(value, bool) and name != "boolean":
        raise _mismatch(value, ltype, column)
    if name in _INT_RANGE:
        return _coerce_int(value, ltype, column)
    if name in ("float", "double"):
        return _coerce_float(value, ltype, column)
    if name == "decimal":
        return _coerce_decimal(value, ltype, column)
    if name == "string":
        if isinstance(value, str):
            return value
        raise _mismatch(value, ltype, column)
    if name == "binary":
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, str):
            return value.encode("utf-8")
        raise _mismatch(value, ltype, column)
    return _coerce_temporal(value, ltype, column)


def _coerce_int(value: Any, ltype: LakeType, column: str) -> int:
    if isinstance(value, int):
        result = value
    elif isinstance(value, (float, decimal.Decimal)):
        finite = math.isfinite(value) if isinstance(value, float) else value.is_finite()
        if not finite or value != int(value):
            raise _mismatch(value, ltype, column, "not an integral value")
        result = int(value)
    else:
        raise _mismatch(value, ltype, column)
    low, high = _INT_RANGE[ltype.name]
    if not low <= result <= high:
        raise FilterError(f"literal {value!r} is out of range for column {column!r} ({ltype})")
    return result


def _coerce_float(value: Any, ltype: LakeType, column: str) -> float:
    if not isinstance(value, (int, float, decimal.Decimal)):
        raise _mismatch(value, ltype, column)
    result = float(value)
    if math.isnan(result):
        raise FilterError(f"NaN literal on column {column!r}: comparisons with NaN are not supported")
    if ltype.name == "float" and math.isfinite(result):
        try:
            result = struct.unpack("<f", struct.pack("<f", result))[0]
        except OverflowError:
            raise FilterError(f"literal {value!r} is out of range for column {column!r} "
                              "(float)") from None
    return result


def _coerce_decimal(value: Any, ltype: LakeType, column: str) -> decimal.Decimal:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _mismatch(value, ltype, column)
        value = decimal.Decimal(repr(value))
    elif isinstance(value, int):
        value = decimal.Decimal(value)
    elif not isinstance(value, decimal.Decimal) or not value.is_finite():
        raise _mismatch(value, ltype, column)
    scale, precision = ltype.scale or 0, ltype.precision or 0
    quantum = decimal.Decimal(1).scaleb(-scale)
    with decimal.localcontext() as ctx:
        ctx.prec = 100
        try:
            result = value.quantize(quantum)
        except decimal.InvalidOperation:
            raise FilterError(f"literal {value} is out of range for column {column!r} ({ltype})") from None
        if result != value:
            raise FilterError(f"literal {value} has more than {scale} fractional digits for "
                              f"column {column!r} ({ltype})")
        if abs(result.scaleb(scale)) >= 10**precision:
            raise FilterError(f"literal {value} is out of range for column {column!r} ({ltype})")
    return result


_LONG_FRACTION = re.compile(r"[.,]\d{7}")


def parse_iso_temporal(text: str, kind: str) -> Any:
    """A ``date``, ``time`` or ``datetime`` from ISO 8601 text (EXPR-2, EXPR-4); ValueError if invalid.

    ``kind`` is ``date`` (a date, or a date-time that EXPR-4 then checks is a midnight),
    ``time`` or ``datetime`` (a date alone is its midnight). More than six fraction digits
    are refused rather than truncated.
    """
    text = text.strip()
    if _LONG_FRACTION.search(text):
        raise ValueError(f"{text!r} has more than 6 fraction digits (microseconds)")
    if kind == "time":
        return dt.time.fromisoformat(text)
    if len(text) == 10:
        day = dt.date.fromisoformat(text)
        return day if kind == "date" else dt.datetime.combine(day, dt.time())
    return dt.datetime.fromisoformat(text)


def _parse_temporal_text(value: str, ltype: LakeType, column: str) -> Any:
    kind = ltype.name if ltype.name in ("date", "time") else "datetime"
    try:
        return parse_iso_temporal(value, kind)
    except ValueError:
        raise _mismatch(value, ltype, column, f"not an ISO {ltype} string") from None


def _coerce_temporal(value: Any, ltype: LakeType, column: str) -> int:
    name = ltype.name
    if isinstance(value, str):
        value = _parse_temporal_text(value, ltype, column)
    if hasattr(value, "to_pydatetime") and not isinstance(value, dt.datetime):
        value = value.to_pydatetime()
    if name == "date":
        if isinstance(value, dt.datetime):  # EXPR-4: only a midnight without an offset is a date
            if value.tzinfo is not None:
                raise _mismatch(value, ltype, column, "has an offset; a date has no time zone")
            if value.time() != dt.time():
                raise _mismatch(value, ltype, column, "has a time of day")
            value = value.date()
        if isinstance(value, dt.date):
            return (value - EPOCH_DATE).days
        raise _mismatch(value, ltype, column)
    if name == "time":
        if isinstance(value, dt.time) and value.tzinfo is None:
            return int(to_physical(ltype, value))
        raise _mismatch(value, ltype, column)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return (value - EPOCH_UTC) // _US
        return (value - EPOCH_NAIVE) // _US  # naive: wall time, or UTC for timestamptz
    if isinstance(value, dt.date):
        return (value - EPOCH_DATE).days * 86_400_000_000
    raise _mismatch(value, ltype, column)
