"""Column types of lakefmt and their Arrow counterparts (spec/types.md).

A type is written in metadata JSON as a string: ``boolean``, ``int``, ``long``,
``float``, ``double``, ``decimal(P,S)``, ``date``, ``time``, ``timestamp``,
``timestamptz``, ``string``, ``binary``. Times and timestamps are stored as
microseconds (TYPE-2); ``timestamptz`` values are instants in UTC (TYPE-3).

Example:
    >>> parse_type("decimal(10,2)").to_arrow()
    Decimal128Type(decimal128(10, 2))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from lakefmt.errors import SchemaError

PRIMITIVE_NAMES = (
    "boolean", "int", "long", "float", "double", "date", "time",
    "timestamp", "timestamptz", "string", "binary",
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class LakeType:
    """One lakefmt column type. ``precision``/``scale`` are set only for decimals."""

    name: str
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        return self.name

    @property
    def is_numeric(self) -> bool:
        return self.name in ("int", "long", "float", "double", "decimal")

    @property
    def is_temporal(self) -> bool:
        return self.name in ("date", "time", "timestamp", "timestamptz")

    def to_arrow(self) -> pa.DataType:
        """The Arrow type lakefmt reads and writes for this type (TYPE-1)."""
        if self.name == "decimal":
            assert self.precision is not None and self.scale is not None
            if self.precision <= 38:
                return pa.decimal128(self.precision, self.scale)
            return pa.decimal256(self.precision, self.scale)
        return _TO_ARROW[self.name]


BOOLEAN = LakeType("boolean")
INT = LakeType("int")
LONG = LakeType("long")
FLOAT = LakeType("float")
DOUBLE = LakeType("double")
DATE = LakeType("date")
TIME = LakeType("time")
TIMESTAMP = LakeType("timestamp")
TIMESTAMPTZ = LakeType("timestamptz")
STRING = LakeType("string")
BINARY = LakeType("binary")

_TO_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "string": pa.string(),
    "binary": pa.binary(),
}


def decimal(precision: int, scale: int) -> LakeType:
    if not 1 <= precision <= 76 or not 0 <= scale <= precision:
        raise SchemaError(f"invalid decimal({precision},{scale}): need 1 <= P <= 76 and 0 <= S <= P")
    return LakeType("decimal", precision, scale)


def parse_type(text: str) -> LakeType:
    """Parse the JSON spelling of a type (TYPE-1)."""
    if not isinstance(text, str):
        raise SchemaError(f"a type must be a string, got {text!r}")
    if text in PRIMITIVE_NAMES:
        return LakeType(text)
    match = _DECIMAL.match(text)
    if match:
        return decimal(int(match.group(1)), int(match.group(2)))
    raise SchemaError(f"unknown type {text!r}; supported: {', '.join(PRIMITIVE_NAMES)}, decimal(P,S)")


def from_arrow(dtype: pa.DataType) -> LakeType:
    """The lakefmt type an Arrow column is stored as (TYPE-4).

    Narrow integers widen to ``int``, ``uint32`` to ``long``; any timestamp unit is
    stored as microseconds, with a time zone as ``timestamptz``; views and large
    variants of strings and binaries map to ``string`` and ``binary``.
    """
    if pa.types.is_boolean(dtype):
        return BOOLEAN
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype) or pa.types.is_int32(dtype):
        return INT
    if pa.types.is_uint8(dtype) or pa.types.is_uint16(dtype):
        return INT
    if pa.types.is_int64(dtype) or pa.types.is_uint32(dtype):
        return LONG
    if pa.types.is_float16(dtype) or pa.types.is_float32(dtype):
        return FLOAT
    if pa.types.is_float64(dtype):
        return DOUBLE
    if pa.types.is_decimal(dtype):
        return decimal(dtype.precision, dtype.scale)
    if pa.types.is_date(dtype):
        return DATE
    if pa.types.is_time(dtype):
        return TIME
    if pa.types.is_timestamp(dtype):
        return TIMESTAMPTZ if dtype.tz is not None else TIMESTAMP
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or _is_view(dtype, "string"):
        return STRING
    if (pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype)
            or pa.types.is_fixed_size_binary(dtype) or _is_view(dtype, "binary")):
        return BINARY
    if pa.types.is_dictionary(dtype):
        return from_arrow(dtype.value_type)
    raise SchemaError(f"Arrow type {dtype} is not supported by lakefmt v1 (see spec/types.md)")


def _is_view(dtype: pa.DataType, kind: str) -> bool:
    checker = getattr(pa.types, f"is_{kind}_view", None)
    return bool(checker and checker(dtype))


def can_promote(old: LakeType, new: LakeType) -> bool:
    """Whether a column of type ``old`` may be widened to ``new`` (SCHEMA-6)."""
    if old == new:
        return True
    if (old.name, new.name) in (("int", "long"), ("float", "double")):
        return True
    if old.name == "decimal" and new.name == "decimal":
        assert old.precision is not None and new.precision is not None
        return old.scale == new.scale and new.precision >= old.precision
    return False


def can_write(source: LakeType, target: LakeType) -> bool:
    """Whether values of ``source`` can be stored in a ``target`` column without loss (WRITE-3)."""
    if can_promote(source, target):
        return True
    if source.name == "int" and target.name == "long":
        return True
    if source.name == "decimal" and target.name == "decimal":
        assert source.precision is not None and target.precision is not None
        assert source.scale is not None and target.scale is not None
        return (target.scale >= source.scale
                and target.precision - target.scale >= source.precision - source.scale)
    return False
