"""Physical values and the binary serialization of bounds (spec/types.md §Bounds).

Inside lakefmt, a single value of a column (a literal in a filter, a partition
value, a lower or upper bound) is held in its *physical* Python form:

==============  =========================================================
type            physical Python value
==============  =========================================================
boolean         ``bool``
int, long       ``int``
float, double   ``float``
decimal(P,S)    ``decimal.Decimal`` with exponent ``-S``
date            ``int`` days since 1970-01-01
time            ``int`` microseconds since midnight
timestamp(tz)   ``int`` microseconds since 1970-01-01T00:00:00 (UTC for tz)
string          ``str``
binary          ``bytes``
==============  =========================================================

Bounds in manifests are stored as bytes (TYPE-6): little-endian for fixed-width
numbers, UTF-8 for strings, two's-complement big-endian unscaled integers for
decimals. String and binary bounds are truncated to 16 characters/bytes (TYPE-7).

:func:`physical_range` gives the values a column of each type may hold (TYPE-10):
dates and timestamps in years 0001 to 9999, times within one day, decimals within
their precision.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from typing import Any

from lakefmt.types import LakeType

EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH_NAIVE = dt.datetime(1970, 1, 1)
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
BOUND_TRUNCATE_LENGTH = 16
_US = dt.timedelta(microseconds=1)
_DECIMAL_CONTEXT = decimal.Context(prec=100)  # exact for decimal(76, S); the default 28 digits round

US_PER_DAY = 86_400_000_000
MIN_DATE_DAYS = (dt.date.min - EPOCH_DATE).days  # 0001-01-01 (TYPE-10)
MAX_DATE_DAYS = (dt.date.max - EPOCH_DATE).days  # 9999-12-31
MIN_TIMESTAMP_US = MIN_DATE_DAYS * US_PER_DAY  # 0001-01-01T00:00:00
MAX_TIMESTAMP_US = (MAX_DATE_DAYS + 1) * US_PER_DAY - 1  # 9999-12-31T23:59:59.999999
MAX_TIME_US = US_PER_DAY - 1  # 23:59:59.999999


def to_physical(ltype: LakeType, value: Any) -> Any:
    """Convert a Python value read from Arrow (``as_py()``) to its physical form."""
    if value is None:
        return None
    name = ltype.name
    if name == "date":
        if isinstance(value, dt.datetime):
            value = value.date()
        if isinstance(value, dt.date):
            return (value - EPOCH_DATE).days
        return int(value)
    if name == "time":
        if isinstance(value, dt.time):
            return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
        return int(value)
    if name in ("timestamp", "timestamptz"):
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                return (value - EPOCH_NAIVE) // _US
            return (value - EPOCH_UTC) // _US
        if hasattr(value, "value") and hasattr(value, "tz_localize"):  # pandas Timestamp
            return int(value.value) // 1000
        return int(value)
    if name == "decimal":
        return decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-(ltype.scale or 0)),
                                               context=_DECIMAL_CONTEXT)
    if name in ("int", "long"):
        return int(value)
    if name in ("float", "double"):
        return float(value)
    if name == "boolean":
        return bool(value)
    if name == "string":
        return str(value)
    if name == "binary":
        return bytes(value)
    raise ValueError(f"no physical form for {ltype}")


def physical_range(ltype: LakeType) -> tuple[Any, Any] | None:
    """The smallest and largest physical value a column of ``ltype`` may hold (TYPE-10).

    None for types whose every Arrow value can be stored (booleans, integers, floats,
    strings, binary).
    """
    name = ltype.name
    if name == "date":
        return MIN_DATE_DAYS, MAX_DATE_DAYS
    if name == "time":
        return 0, MAX_TIME_US
    if name in ("timestamp", "timestamptz"):
        return MIN_TIMESTAMP_US, MAX_TIMESTAMP_US
    if name == "decimal":
        largest = decimal.Decimal(10 ** (ltype.precision or 0) - 1).scaleb(-(ltype.scale or 0),
                                                                             context=_DECIMAL_CONTEXT)
        return -largest, largest
    return None


def to_python(ltype: LakeType, value: Any) -> Any:
    """The friendly Python form of a physical value (dates as ``date`` and so on)."""
    if value is None:
        return None
    if ltype.name == "date":
        return EPOCH_DATE + dt.timedelta(days=value)
    if ltype.name == "timestamp":
        return EPOCH_NAIVE + value * _US
    if ltype.name == "timestamptz":
        return EPOCH_UTC + value * _US
    if ltype.name == "time":
        seconds, micros = divmod(value, 1_000_000)
        minutes, sec = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return dt.time(hours, minute, sec, micros)
    return value


def to_bytes(ltype: LakeType, value: Any) -> bytes:
    """Serialize a physical value as a bound (TYPE-6)."""
    name = ltype.name
    if name == "boolean":
        return b"\x01" if value else b"\x00"
    if name in ("int", "date"):
        return struct.pack("<i", value)
    if name in ("long", "time", "timestamp", "timestamptz"):
        return struct.pack("<q", value)
    if name == "float":
        return struct.pack("<f", value)
    if name == "double":
        return struct.pack("<d", value)
    if name == "string":
        return value.encode("utf-8")
    if name == "binary":
        return bytes(value)
    if name == "decimal":
        unscaled = int(value.scaleb(ltype.scale or 0, context=_DECIMAL_CONTEXT).to_integral_value())
        return _int_to_min_bytes(unscaled)
    raise ValueError(f"cannot serialize bounds of type {ltype}")


def from_bytes(ltype: LakeType, data: bytes) -> Any:
    """Deserialize a bound to its physical value (TYPE-6)."""
    name = ltype.name
    if name == "boolean":
        return data != b"\x00"
    if name in ("int", "date"):
        return struct.unpack("<i", data)[0]
    if name in ("long", "time", "timestamp", "timestamptz"):
        if name == "long" and len(data) == 4:  # written while the column was an int (SCHEMA-6, TYPE-6)
            return struct.unpack("<i", data)[0]
        return struct.unpack("<q", data)[0]
    if name == "float":
        return struct.unpack("<f", data)[0]
    if name == "double":
        if len(data) == 4:  # written while the column was a float (SCHEMA-6, TYPE-6)
            return struct.unpack("<f", data)[0]
        return struct.unpack("<d", data)[0]
    if name == "string":
        return data.decode("utf-8")
    if name == "binary":
        return bytes(data)
    if name == "decimal":
        unscaled = int.from_bytes(data, "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-(ltype.scale or 0), context=_DECIMAL_CONTEXT)
    raise ValueError(f"cannot deserialize bounds of type {ltype}")


def _int_to_min_bytes(value: int) -> bytes:
    length = max(1, (value + (value < 0)).bit_length() // 8 + 1)
    return value.to_bytes(length, "big", signed=True)


def truncate_lower(ltype: LakeType, value: Any) -> Any:
    """A lower bound no larger than ``value``, at most 16 characters/bytes long (TYPE-7)."""
    if ltype.name in ("string", "binary"):
        return value[:BOUND_TRUNCATE_LENGTH]
    return value


def truncate_upper(ltype: LakeType, value: Any) -> Any | None:
    """An upper bound no smaller than ``value``, at most 16 characters/bytes long (TYPE-7).

    The prefix is kept and its last character (byte) incremented; when no character
    can be incremented the bound is omitted (``None``).
    """
    if ltype.name == "string":
        if len(value) <= BOUND_TRUNCATE_LENGTH:
            return value
        chars = list(value[:BOUND_TRUNCATE_LENGTH])
        while chars:
            code = ord(chars[-1]) + 1
            if code == 0xD800:  # skip the surrogate block, which UTF-8 cannot encode
                code = 0xE000
            if code <= 0x10FFFF:
                chars[-1] = chr(code)
                return "".join(chars)
            chars.pop()
        return None
    if ltype.name == "binary":
        if len(value) <= BOUND_TRUNCATE_LENGTH:
            return bytes(value)
        data = bytearray(value[:BOUND_TRUNCATE_LENGTH])
        while data:
            if data[-1] < 0xFF:
                data[-1] += 1
                return bytes(data)
            data.pop()
        return None
    return value


# -- zero bounds (TYPE-11) ----------------------------------------------------------------------

def lower_bound_value(ltype: LakeType, value: Any) -> Any:
    """The value written as a lower bound: a float/double zero is −0.0 (TYPE-11), else ``value``."""
    if ltype.name in ("float", "double") and value == 0:
        return -0.0
    return value


def upper_bound_value(ltype: LakeType, value: Any) -> Any:
    """The value written as an upper bound: a float/double zero is +0.0 (TYPE-11), else ``value``."""
    if ltype.name in ("float", "double") and value == 0:
        return 0.0
    return value


# -- shortest decimal text of floats (PART-7) ---------------------------------------------------

def float_text(value: float, single: bool) -> str:
    """The decimal text of a ``float`` (``single``) or ``double`` value in partition paths (PART-7).

    The fewest significant digits that read back (round to nearest, ties to even) as the same
    binary32 / binary64 value; of two such, the nearer, then the one with an even last digit.
    With E the decimal exponent of the first digit: positional when −4 ≤ E < 16, with at least
    one fraction digit (``100.0``, ``0.0001``); otherwise ``d[.ddd]e±XX`` with at least two
    exponent digits (``1e-05``, ``1.5e+16``). ``nan``, ``inf``, ``-inf``, ``0.0`` and ``-0.0``
    stand for themselves. For ``double`` this is the text of Python's ``repr``.
    """
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    digits, exponent = _shortest_digits(abs(value), single)
    if -4 <= exponent < 16:
        if exponent < 0:
            text = "0." + "0" * (-exponent - 1) + digits
        else:
            whole = digits[:exponent + 1].ljust(exponent + 1, "0")
            text = whole + "." + (digits[exponent + 1:] or "0")
    else:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        text = f"{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return sign + text


def _rounding_interval(value: float, single: bool) -> tuple[decimal.Decimal, decimal.Decimal, bool]:
    """The decimals halfway to the next smaller and larger value of the format around ``value`` > 0,
    and whether ``value``'s significand is even (a decimal exactly halfway then reads as ``value``)."""
    fmt, ufmt = ("<f", "<I") if single else ("<d", "<Q")
    bits = struct.unpack(ufmt, struct.pack(fmt, value))[0]
    exact = decimal.Decimal(value)
    below = decimal.Decimal(struct.unpack(fmt, struct.pack(ufmt, bits - 1))[0])
    above_value = struct.unpack(fmt, struct.pack(ufmt, bits + 1))[0]
    # The largest finite value: the gap above it (to where rounding overflows) is the gap below.
    above = exact + (exact - below) if above_value == float("inf") else decimal.Decimal(above_value)
    with decimal.localcontext(_DECIMAL_CONTEXT):
        return (exact + below) / 2, (exact + above) / 2, bits % 2 == 0


def _shortest_digits(value: float, single: bool) -> tuple[str, int]:
    """(significant digits without trailing zeros, decimal exponent of the first) of ``value`` > 0."""
    exact = decimal.Decimal(value)
    low, high, even = _rounding_interval(value, single)
    for precision in range(1, 18):
        found = []
        for rounding in (decimal.ROUND_FLOOR, decimal.ROUND_CEILING):
            candidate = decimal.Context(prec=precision, rounding=rounding).plus(exact)
            if low < candidate < high or (even and candidate in (low, high)):
                found.append(candidate)
        if found:
            best = min(found, key=lambda c: (abs(c - exact), c.as_tuple().digits[-1] % 2))
            _, digits, exponent = best.normalize(_DECIMAL_CONTEXT).as_tuple()
            text = "".join(map(str, digits))
            return text, int(exponent) + len(text) - 1
    raise AssertionError(f"no shortest decimal for {value!r}")  # 17 digits always suffice
