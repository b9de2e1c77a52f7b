"""Partition transforms and partition specs (spec/partitioning.md).

A spec maps each row to a partition tuple by applying a *transform* to a source column.
Implements PART-1 (spec JSON), PART-2..PART-5 (``identity``, ``year``/``month``/``day``/
``hour``, ``bucket[N]``, ``truncate[W]``: Iceberg's definitions bit for bit, plus saturation
where truncation would fall below the type's minimum), PART-6 (source and result types),
PART-7 (partition paths), PART-8 and PART-10 (``partition_by`` strings, spec rules).

Example:
    >>> spec = parse_partition_by(["day(ts)", "mission_id"], schema)
    >>> spec.partition_path((20468, 2), schema)
    'ts_day=2026-01-15/mission_id=2'
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import arrow_values
from lakefmt.bucketing import bucket_array, bucket_hash, hash_array
from lakefmt.conversions import float_text
from lakefmt.errors import SchemaError, ValidationError
from lakefmt.schema import Schema
from lakefmt.types import DATE, INT, LakeType

US_PER_HOUR = 3_600_000_000
US_PER_DAY = 86_400_000_000
NULL_PARTITION = "__NULL__"
_INT_RANGE = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}
_TIME = frozenset({"year", "month", "day", "hour"})
_DATES = frozenset({"date", "timestamp", "timestamptz"})
_SOURCES: dict[str, frozenset[str] | None] = {
    "identity": None,
    "year": _DATES, "month": _DATES, "day": _DATES,
    "hour": frozenset({"timestamp", "timestamptz"}),
    "bucket": frozenset({"int", "long", "decimal", "date", "time", "timestamp", "timestamptz",
                         "string", "binary"}),
    "truncate": frozenset({"int", "long", "decimal", "string", "binary"}),
}
_PARAMETERIZED = frozenset({"bucket", "truncate"})
_TRANSFORM_TEXT = re.compile(r"^\s*([a-z]+)\s*(?:\[\s*(\d+)\s*\])?\s*$")


@dataclass(frozen=True)
class Transform:
    """A partition transform: its name and, for bucket/truncate, N or W (PART-2..PART-5)."""

    name: str
    param: int | None = None

    def __post_init__(self) -> None:
        if self.name not in _SOURCES:
            raise ValidationError(f"unknown partition transform {self.name!r}; known: "
                                  f"{', '.join(_SOURCES)}")
        if self.name in _PARAMETERIZED:
            if not isinstance(self.param, int) or not 0 < self.param < 2**31:
                raise ValidationError(f"transform {self.name} needs a parameter between 1 and "
                                      f"2147483647, got {self.param!r}")
        elif self.param is not None:
            raise ValidationError(f"transform {self.name} takes no parameter")

    @staticmethod
    def parse(text: str) -> Transform:
        """Parse ``identity``, ``day``, ``bucket[16]``, ``truncate[4]``... (PART-1)."""
        match = _TRANSFORM_TEXT.match(text) if isinstance(text, str) else None
        if not match:
            raise ValidationError(f"invalid partition transform {text!r}")
        param = int(match.group(2)) if match.group(2) is not None else None
        if match.group(1) in _PARAMETERIZED and param is None:
            raise ValidationError(f"invalid partition transform {text!r}: "
                                  f"{match.group(1)} needs a parameter, e.g. {match.group(1)}[16]")
        return Transform(match.group(1), param)

    def __str__(self) -> str:
        return f"{self.name}[{self.param}]" if self.param is not None else self.name

    @property
    def preserves_order(self) -> bool:
        """Whether ``a <= b`` implies ``t(a) <= t(b)``."""
        return self.name != "bucket"

    def result_type(self, source: LakeType) -> LakeType:
        """The type of the partition values (PART-6); SchemaError for a bad source type."""
        allowed = _SOURCES[self.name]
        if allowed is not None and source.name not in allowed:
            raise SchemaError(f"transform {self} cannot be applied to a {source} column; "
                              f"it accepts: {', '.join(sorted(allowed))}")
        if self.name in ("identity", "truncate"):
            return source
        return DATE if self.name == "day" else INT

    # -- vectorized ------------------------------------------------------------------------------

    def apply(self, arr: pa.Array | pa.ChunkedArray, source: LakeType) -> pa.Array:
        """Transform a whole column; nulls stay null, output type is ``result_type(source)``."""
        result = self.result_type(source)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks else pa.array([], source.to_arrow())
        if arr.type != source.to_arrow():
            arr = arr.cast(source.to_arrow())
        name = self.name
        if name == "identity":
            return arr
        if name in _TIME:
            return _apply_time(name, arr, source)
        if name == "bucket":
            assert self.param is not None
            return bucket_array(hash_array(arr, source), self.param)
        assert self.param is not None
        if source.name in _INT_RANGE:
            return _truncate_int_array(arr, source, self.param)
        if source.name == "string":
            return pc.utf8_slice_codeunits(arr, 0, self.param)
        if source.name == "binary":
            return pc.binary_slice(arr, 0, self.param)
        return pa.array([self.apply_value(v, source) for v in arr.to_pylist()], result.to_arrow())

    # -- scalar ----------------------------------------------------------------------------------

    def apply_value(self, value: Any, source: LakeType) -> Any:
        """Transform one physical value (see lakefmt.conversions) to a physical result."""
        self.result_type(source)
        if value is None or self.name == "identity":
            return value
        name, param = self.name, self.param
        if name in _TIME:
            if name == "hour":
                return _to_int32(value // US_PER_HOUR, "hour")
            days = value if source.name == "date" else value // US_PER_DAY
            if name == "day":
                return days
            year, month, _ = civil_from_days(days)
            return year - 1970 if name == "year" else (year - 1970) * 12 + month - 1
        assert param is not None
        if name == "bucket":
            return (bucket_hash(value, source) & 0x7FFFFFFF) % param
        if source.name in _INT_RANGE:
            return max(value - value % param, _INT_RANGE[source.name][0])
        if source.name == "decimal":
            return _truncate_decimal(value, source, param)
        return value[:param]

    def human_string(self, value: Any, source: LakeType) -> str:
        """The path form of a partition value (PART-7)."""
        if value is None:
            return NULL_PARTITION
        name = self.name
        if name == "year":
            return year_str(value + 1970)
        if name == "month":
            years, month = divmod(value, 12)
            return f"{year_str(1970 + years)}-{month + 1:02d}"
        if name == "day":
            return date_str(value)
        if name == "hour":
            days, hour = divmod(value, 24)
            return f"{date_str(days)}-{hour:02d}"
        if name == "bucket":
            return str(value)
        return _identity_human(value, source)


# -- time transforms (PART-3) -------------------------------------------------------------------

def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number since 1970-01-01, for any integer (proleptic Gregorian)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _int64(value: int) -> pa.Scalar:
    """An int64 scalar for the kernels below (a Python int there would make pyarrow import pandas)."""
    return arrow_values.scalar(value, pa.int64())


def _floordiv(x: pa.Array, d: int) -> pa.Array:
    d, zero, one = _int64(d), _int64(0), _int64(1)
    q = pc.divide(x, d)  # integer division truncates toward zero
    return pc.if_else(pc.less(pc.subtract(x, pc.multiply(q, d)), zero), pc.subtract(q, one), q)


def _floormod(x: pa.Array, d: int) -> pa.Array:
    d = _int64(d)
    r = pc.subtract(x, pc.multiply(pc.divide(x, d), d))
    return pc.if_else(pc.less(r, _int64(0)), pc.add(r, d), r)


def _civil_year_month(days: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Vectorized :func:`civil_from_days` (year and month) on int64 day numbers."""
    z = pc.add(days, _int64(719468))
    era = _floordiv(z, 146097)
    doe = pc.subtract(z, pc.multiply(era, _int64(146097)))
    yoe = pc.divide(pc.add(pc.subtract(doe, pc.divide(doe, _int64(1460))),
                           pc.subtract(pc.divide(doe, _int64(36524)), pc.divide(doe, _int64(146096)))), _int64(365))
    doy = pc.subtract(doe, pc.subtract(pc.add(pc.multiply(yoe, _int64(365)), pc.divide(yoe, _int64(4))),
                                       pc.divide(yoe, _int64(100))))
    mp = pc.divide(pc.add(pc.multiply(doy, _int64(5)), _int64(2)), _int64(153))
    month = pc.if_else(pc.less(mp, _int64(10)), pc.add(mp, _int64(3)), pc.subtract(mp, _int64(9)))
    year = pc.add(pc.add(yoe, pc.multiply(era, _int64(400))), pc.cast(pc.less_equal(month, _int64(2)), pa.int64()))
    return year, month


def _apply_time(name: str, arr: pa.Array, source: LakeType) -> pa.Array:
    if source.name == "date":
        days = arr.cast(pa.int32()).cast(pa.int64())
    else:
        micros = arr.cast(pa.int64())
        if name == "hour":
            return _to_int32(_floordiv(micros, US_PER_HOUR), "hour")
        days = _floordiv(micros, US_PER_DAY)
    if name == "day":
        return days.cast(pa.int32()).cast(pa.date32())
    year, month = _civil_year_month(days)
    years = pc.subtract(year, _int64(1970))
    if name == "year":
        return _to_int32(years, "year")
    return _to_int32(pc.add(pc.multiply(years, _int64(12)), pc.subtract(month, _int64(1))), "month")


def _to_int32(arr: Any, what: str) -> Any:
    """Cast an array (or check a Python int) to the int range; ValidationError on overflow."""
    if isinstance(arr, int):
        if -2**31 <= arr < 2**31:
            return arr
    else:
        try:
            return arr.cast(pa.int32())
        except pa.ArrowInvalid:
            pass
    raise ValidationError(f"{what} partition value out of the int range")


def year_str(year: int) -> str:
    """A year as in partition paths (PART-7): at least four digits, zero-padded, ``-`` before a
    negative year (``0047``, ``10000``, ``-0001``)."""
    return f"-{-year:04d}" if year < 0 else f"{year:04d}"


def date_str(days: int) -> str:
    """ISO form ``YYYY-MM-DD`` of a day number (the year as :func:`year_str`)."""
    year, month, day = civil_from_days(days)
    return f"{year_str(year)}-{month:02d}-{day:02d}"


def time_str(micros: int) -> str:
    """``HH:MM:SS[.ffffff]`` of microseconds since midnight."""
    seconds, us = divmod(micros, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours:02d}:{minute:02d}:{sec:02d}" + (f".{us:06d}" if us else "")


def _identity_human(value: Any, source: LakeType) -> str:
    name = source.name
    if name == "date":
        return date_str(value)
    if name == "boolean":
        return "true" if value else "false"
    if name == "binary":
        return bytes(value).hex()
    if name == "time":
        text = time_str(value)
    elif name in ("timestamp", "timestamptz"):
        days, micros = divmod(value, US_PER_DAY)
        text = f"{date_str(days)}T{time_str(micros)}" + ("+00:00" if name == "timestamptz" else "")
    elif name in ("float", "double"):
        text = float_text(value, single=name == "float")
    elif name == "decimal":
        text = _decimal_text(value, source.scale or 0)
    else:
        text = value if name == "string" else str(value)
    return quote(text, safe="")  # PART-7: every UTF-8 byte but A-Z a-z 0-9 - _ . ~ as %XX


def _decimal_text(value: decimal.Decimal, scale: int) -> str:
    """``-``, the integer digits, and exactly ``scale`` fraction digits; never an exponent (PART-7)."""
    unscaled = int(value.scaleb(scale, context=decimal.Context(prec=100)).to_integral_value())
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    text = digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"
    return ("-" if unscaled < 0 else "") + text


# -- truncate (PART-5) --------------------------------------------------------------------------

def _truncate_int_array(arr: pa.Array, source: LakeType, width: int) -> pa.Array:
    lowest = _INT_RANGE[source.name][0]
    values = arr.cast(pa.int64())
    mod = _floormod(values, width)
    below = pc.less(values, pc.add(mod, _int64(lowest)))
    out = pc.if_else(below, _int64(lowest), pc.subtract(values, mod))
    return out.cast(source.to_arrow())


def _truncate_decimal(value: decimal.Decimal, source: LakeType, width: int) -> decimal.Decimal:
    scale, precision = source.scale or 0, source.precision or 0
    context = decimal.Context(prec=100)
    unscaled = int(value.scaleb(scale, context=context).to_integral_value())
    truncated = max(unscaled - unscaled % width, -(10**precision - 1))
    return decimal.Decimal(truncated).scaleb(-scale, context=context)


# -- specs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionField:
    """One partition field: source column id, its own id, name and transform (PART-1)."""

    source_id: int
    field_id: int
    name: str
    transform: Transform

    def to_json(self) -> dict[str, Any]:
        return {"source-id": self.source_id, "field-id": self.field_id, "name": self.name,
                "transform": str(self.transform)}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> PartitionField:
        try:
            return PartitionField(int(obj["source-id"]), int(obj["field-id"]), str(obj["name"]),
                                  Transform.parse(obj["transform"]))
        except (KeyError, TypeError) as exc:
            raise ValidationError(f"invalid partition field {obj!r}: {exc}") from None


@dataclass(frozen=True)
class PartitionSpec:
    """An ordered tuple of partition fields with a spec id (PART-1)."""

    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        names = [f.name for f in self.fields]
        ids = [f.field_id for f in self.fields]
        if len(set(names)) != len(names) or len(set(ids)) != len(ids):
            raise ValidationError(f"partition spec {self.spec_id} has duplicate field names or ids")

    @property
    def is_unpartitioned(self) -> bool:
        return not self.fields

    def to_json(self) -> dict[str, Any]:
        return {"spec-id": self.spec_id, "fields": [f.to_json() for f in self.fields]}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> PartitionSpec:
        try:
            fields = tuple(PartitionField.from_json(f) for f in obj["fields"])
            return PartitionSpec(int(obj["spec-id"]), fields)
        except (KeyError, TypeError) as exc:
            raise ValidationError(f"invalid partition spec {obj!r}: {exc}") from None

    def source_field(self, pf: PartitionField, schema: Schema) -> Any:
        """The schema field a partition field reads; SchemaError if it is not in ``schema``."""
        src = schema.field_by_id(pf.source_id)
        if src is None:
            raise SchemaError(f"partition field {pf.name!r} reads column id {pf.source_id}, "
                              "which is not in the schema")
        return src

    def partition_type(self, schema: Schema) -> list[tuple[str, LakeType]]:
        """(name, result type) of each partition field (PART-6)."""
        return [(pf.name, pf.transform.result_type(self.source_field(pf, schema).type))
                for pf in self.fields]

    def arrow_struct_type(self, schema: Schema) -> pa.StructType:
        return pa.struct([pa.field(name, t.to_arrow()) for name, t in self.partition_type(schema)])

    def compute(self, data: pa.Table, schema: Schema) -> pa.Table:
        """One column per partition field, named by the field's name (same row count as ``data``)."""
        if not self.fields:
            return data.select([])
        columns = []
        for pf in self.fields:
            src = self.source_field(pf, schema)
            if src.name not in data.column_names:
                raise SchemaError(f"partition source column {src.name!r} is missing from the data")
            columns.append(pf.transform.apply(data.column(src.name), src.type))
        return pa.Table.from_arrays(columns, names=[pf.name for pf in self.fields])

    def partition_path(self, values: tuple[Any, ...], schema: Schema) -> str:
        """``name=human/...`` for a tuple of physical partition values (PART-7)."""
        if len(values) != len(self.fields):
            raise ValidationError(f"partition spec {self.spec_id} has {len(self.fields)} fields, "
                                  f"got {len(values)} values")
        parts = []
        for pf, value in zip(self.fields, values):
            src = self.source_field(pf, schema)
            parts.append(f"{quote(pf.name, safe='')}={pf.transform.human_string(value, src.type)}")
        return "/".join(parts)


UNPARTITIONED = PartitionSpec(0)

_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.DOTALL)
_PARAM_ARG = re.compile(r"^\s*(\d+)\s*,(.*)$", re.DOTALL)


def _column_token(text: str, expr: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    if not text or any(c in text for c in '(),"'):
        raise ValidationError(f"invalid partition expression {expr!r}")
    return text


def _parse_one(expr: str, schema: Schema) -> tuple[str, Transform]:
    if not isinstance(expr, str) or not expr.strip():
        raise ValidationError(f"invalid partition expression {expr!r}")
    if expr.strip() in schema.names:
        return expr.strip(), Transform("identity")
    match = _CALL.match(expr)
    if not match:
        return _column_token(expr, expr), Transform("identity")
    func, args = match.group(1).lower(), match.group(2)
    if func in _PARAMETERIZED:
        param = _PARAM_ARG.match(args)
        if not param:
            raise ValidationError(f"invalid partition expression {expr!r}: "
                                  f"expected {func}(N, column)")
        return _column_token(param.group(2), expr), Transform(func, int(param.group(1)))
    if func in _TIME or func == "identity":
        return _column_token(args, expr), Transform(func)
    raise ValidationError(f"unknown partition transform {match.group(1)!r} in {expr!r}; known: "
                          "identity, year, month, day, hour, bucket, truncate")


def parse_partition_by(exprs: list[str], schema: Schema, *, spec_id: int = 0,
                       first_field_id: int = 1000) -> PartitionSpec:
    """Build a spec from ``partition_by`` strings (PART-8).

    Raises:
        UnknownColumnError: a source column is not in ``schema``.
        SchemaError: a transform does not accept the column's type.
        ValidationError: bad syntax, duplicate or redundant fields, name clashes.
    """
    if isinstance(exprs, str):
        exprs = [exprs]
    fields: list[PartitionField] = []
    seen: dict[tuple[int, str], str] = {}
    time_sources: dict[int, str] = {}
    for i, expr in enumerate(exprs):
        column, transform = _parse_one(expr, schema)
        src = schema.find(column)
        transform.result_type(src.type)
        key = (src.id, str(transform))
        if key in seen:
            raise ValidationError(f"duplicate partition field {expr!r} (same as {seen[key]!r})")
        seen[key] = expr
        if transform.name in _TIME:
            if src.id in time_sources:
                raise ValidationError(f"redundant partition field {expr!r}: column {column!r} is "
                                      f"already partitioned by {time_sources[src.id]!r}")
            time_sources[src.id] = expr
        name = src.name + {"identity": "", "bucket": f"_bucket_{transform.param}",
                           "truncate": f"_trunc_{transform.param}"}.get(transform.name, f"_{transform.name}")
        if any(f.name == name for f in fields):
            raise ValidationError(f"duplicate partition field name {name!r} from {expr!r}")
        if transform.name != "identity" and name in schema.names:
            raise ValidationError(f"partition field name {name!r} from {expr!r} clashes with a "
                                  "column of the table")
        fields.append(PartitionField(src.id, first_field_id + i, name, transform))
    return PartitionSpec(spec_id, tuple(fields))
