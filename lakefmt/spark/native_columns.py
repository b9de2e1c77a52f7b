"""Spark columns of a native write: rows conformed to the table, partition values, sort keys (spec/spark.md).

Everything here builds Spark expressions on the driver, so the rows never leave the JVM
(SPARK-27), except the partition transforms Spark cannot compute exactly, which run
lakefmt's own code in an Arrow UDF (SPARK-28):

* :func:`conformed_columns`: the table's columns in table order (WRITE-3, WRITE-8), each
  carrying its field id as ``parquet.field.id`` (WRITE-1); a null in a required column or
  a date or timestamp outside TYPE-10 fails the task with a lakefmt message, which
  :func:`refusal` turns back into the lakefmt error on the driver.
* :func:`partition_column`: a partition field's value, null for null: a number for
  integral results (dates as days, timestamps as microseconds), else ``"v"`` + its text
  (the prefix keeps the empty string apart from null, which Spark writes alike). Spark
  escapes it into a folder name; :func:`decode_partition_value` reads it back as the
  physical value (TYPE-5).
* :func:`sort_keys`: the table's sort order as Spark sort keys (WRITE-4).

Example:
    >>> out = df.select(*conformed_columns(df, schema), partition_column(spec.fields[0], schema).alias("p0"))
"""

from __future__ import annotations

import re
import warnings
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import functions as F

from lakefmt.conversions import MAX_TIMESTAMP_US, MIN_TIMESTAMP_US, to_physical
from lakefmt.errors import SchemaMismatchError, ValueOutOfRangeError
from lakefmt.spark.types import spark_type

if TYPE_CHECKING:
    from lakefmt.partitioning import PartitionField
    from lakefmt.schema import Field, Schema
    from lakefmt.sorting import SortOrder
    from lakefmt.types import LakeType

__all__ = ["FIELD_ID_KEY", "SPARK_NULL_PARTITION", "conformed_columns", "decode_partition_value",
           "partition_column", "quoted", "refusal", "sort_keys"]

FIELD_ID_KEY = "parquet.field.id"  # Spark's StructField metadata key for Parquet field ids
SPARK_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_REFUSAL = re.compile(r"\[lakefmt:(\w+)\] (.*?)(?: SQLSTATE: \w+|\n|$)")
_SPARK_TRANSFORMS = {"identity", "year", "month", "day", "hour", "truncate"}


def quoted(name: str) -> str:
    """A column name for ``F.col``, whatever characters it holds."""
    return "`" + name.replace("`", "``") + "`"


def conformed_columns(df: Any, schema: Schema) -> list[Any]:
    """The table's columns from ``df``, in table order, conformed as WRITE-3 and WRITE-8 ask."""
    incoming = {f.name: f.dataType for f in df.schema.fields}
    columns = []
    for field in schema.fields:
        target = spark_type(field.type)
        if field.name in incoming:
            column = F.col(quoted(field.name))
            if incoming[field.name] != target:
                column = column.cast(target)  # a widening check_writable allowed
        else:
            column = F.lit(None).cast(target)  # an optional column missing from the data (WRITE-8)
        column = _range_checked(column, field)
        if field.required:
            column = _not_null(column, field)
        columns.append(column.alias(field.name, metadata={FIELD_ID_KEY: field.id}))
    return columns


def _refuse(error: str, message: Any) -> Any:
    """A task error the driver turns back into the lakefmt error ``error`` (see :func:`refusal`)."""
    return F.raise_error(F.concat(F.lit(f"[lakefmt:{error}] "), message))


def _range_checked(column: Any, field: Field) -> Any:
    """Dates and timestamps outside 0001-01-01 ... 9999-12-31 fail the task (TYPE-10)."""
    name = field.type.name
    if name == "date":
        low, high = F.expr("DATE'0001-01-01'"), F.expr("DATE'9999-12-31'")
    elif name == "timestamp":
        low, high = F.expr("TIMESTAMP_NTZ'0001-01-01 00:00:00'"), F.expr("TIMESTAMP_NTZ'9999-12-31 23:59:59.999999'")
    elif name == "timestamptz":
        low, high = F.timestamp_micros(F.lit(MIN_TIMESTAMP_US)), F.timestamp_micros(F.lit(MAX_TIMESTAMP_US))
    else:
        return column
    message = F.concat(F.lit(f"column {field.name!r} holds the {name} value "), column.cast("string"),
                       F.lit(", outside the range a table can store: years 0001 to 9999 (TYPE-10). Nothing was "
                             "committed"))
    return F.when((column < low) | (column > high), _refuse("ValueOutOfRangeError", message)).otherwise(column)


def _not_null(column: Any, field: Field) -> Any:
    """A null fails the task; the coalesce with a typed constant makes Spark write a REQUIRED column (WRITE-9)."""
    message = F.lit(f"required column {field.name!r} has null values; nothing was committed")
    checked = F.when(column.isNull(), _refuse("SchemaMismatchError", message)).otherwise(column)
    name = field.type.name
    if name == "decimal":
        scale = field.type.scale or 0
        zero = F.expr(("0." + "0" * scale if scale else "0") + "BD")
    elif name == "date":
        zero = F.expr("DATE'1970-01-01'")
    elif name == "timestamp":
        zero = F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'")
    elif name == "timestamptz":
        zero = F.timestamp_micros(F.lit(0))
    elif name == "binary":
        zero = F.lit(bytearray())
    elif name == "string":
        zero = F.lit("")
    else:
        zero = F.lit(0)
    return F.coalesce(checked, zero.cast(spark_type(field.type)))


def partition_column(pf: PartitionField, schema: Schema) -> Any:
    """Each row's partition value: a long for integral results (PART-6), else ``"v" + text``; null stays null.

    :func:`decode_partition_value` reads it back from Spark's folder name.
    """
    source = schema.field_by_id(pf.source_id)
    assert source is not None
    column, transform, kind = F.col(quoted(source.name)), pf.transform, source.type.name
    exact = transform.name in _SPARK_TRANSFORMS and kind not in ("float", "double") and not (
        transform.name == "truncate" and kind == "decimal")
    value = _spark_transform(column, transform.name, transform.param, kind) if exact else \
        _udf_transform(pf, source.type)(column)
    return value.cast("long") if _integral(transform.result_type(source.type)) else F.concat(F.lit("v"), value)


def _integral(ltype: LakeType) -> bool:
    """Whether a partition value is written as a number: ints, and dates and timestamps as days or microseconds."""
    return ltype.name in ("int", "long", "date", "time", "timestamp", "timestamptz")


def _micros(column: Any, kind: str) -> Any:
    """Microseconds since the epoch of a timestamp, with no time zone involved."""
    if kind == "timestamptz":
        return F.unix_micros(column)
    return F.timestamp_diff("MICROSECOND", F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'"), column)


def _div_floor(value: Any, divisor: int) -> Any:
    """Integer division rounding down, in 64-bit integers (no float on the way)."""
    d = F.lit(divisor).cast("long")
    return F.call_function("div", value - F.pmod(value, d), d)


def _spark_transform(column: Any, name: str, param: int | None, kind: str) -> Any:
    """A transform computed by Spark expressions, exactly as PART-2 ... PART-5 define it.

    Integral results are numbers (dates as days, timestamps as microseconds); others text.
    """
    if name == "identity":
        if kind == "binary":
            return F.hex(column)
        if kind == "date":
            return F.unix_date(column)
        if kind in ("timestamp", "timestamptz"):
            return _micros(column, kind)
        return column.cast("string") if kind in ("boolean", "decimal") else column  # "true", plain decimal text
    if name == "truncate":
        assert param is not None
        if kind == "string":
            return F.substring(column, 1, param)  # code points, like lakefmt's utf8 slice
        if kind == "binary":
            return F.hex(F.substring(column, 1, param))
        lowest = F.lit(-2**31 if kind == "int" else -2**63).cast(kind if kind == "int" else "long")
        remainder = F.pmod(column, F.lit(param).cast("int" if kind == "int" else "long"))
        return F.when(column < lowest + remainder, lowest).otherwise(column - remainder)
    if name == "hour":
        return _div_floor(_micros(column, kind), 3_600_000_000)
    if kind == "date":
        date = column
    elif kind == "timestamp":
        date = column.cast("date")  # a wall-clock timestamp has no zone: its date is exact
    else:
        date = F.date_from_unix_date(_div_floor(F.unix_micros(column), 86_400_000_000).cast("int"))
    if name == "day":
        return F.unix_date(date)
    years = F.year(date) - F.lit(1970)  # Spark's calendar is proleptic Gregorian, as PART-3's
    return years if name == "year" else years * 12 + F.month(date) - 1


def _udf_transform(pf: PartitionField, source: LakeType) -> Any:
    """An Arrow UDF running lakefmt's own transform (:meth:`Transform.apply`): exact by construction."""
    transform = pf.transform
    result = transform.result_type(source)
    integral = _integral(result)

    def encode(values):  # type: ignore[no-untyped-def]  # no hints: the function type is given below
        out = transform.apply(values, source)
        if integral:
            return out.cast(pa.int64())
        rendered = [None if v is None else float(v).hex() if result.name in ("float", "double") else str(v)
                    for v in out.to_pylist()]
        return pa.array(rendered, pa.string())

    with warnings.catch_warnings():  # Spark prefers type hints, which it cannot resolve under postponed annotations
        warnings.simplefilter("ignore", UserWarning)
        return F.arrow_udf(encode, "long" if integral else "string", F.ArrowUDFType.SCALAR)


def decode_partition_value(text: str, ltype: LakeType) -> Any:
    """The physical partition value (TYPE-5) of one partition folder's value (see :func:`partition_column`)."""
    if text == SPARK_NULL_PARTITION:
        return None
    if _integral(ltype):
        return int(text)  # days or microseconds for dates and timestamps
    text = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)[1:]  # Spark escapes ASCII only
    name = ltype.name
    if name == "boolean":
        return text == "true"
    if name == "string":
        return text
    if name == "binary":
        return bytes.fromhex(text)
    if name == "decimal":
        return to_physical(ltype, Decimal(text))
    return float.fromhex(text)  # float or double


def sort_keys(order: SortOrder, schema: Schema) -> tuple[list[Any], bool]:
    """Spark sort keys of a sort order (WRITE-4), and whether they cover all of it (identity fields only)."""
    keys = []
    for sf in order.fields:
        field = schema.field_by_id(sf.source_id)
        if field is None or sf.transform != "identity":
            return keys, False
        column = F.col(quoted(field.name))
        first = sf.null_order == "nulls-first"
        if sf.direction == "asc":
            keys.append(column.asc_nulls_first() if first else column.asc_nulls_last())
        else:
            keys.append(column.desc_nulls_first() if first else column.desc_nulls_last())
    return keys, True


def refusal(exc: BaseException) -> BaseException | None:
    """The lakefmt error a task raised through ``raise_error`` (see :func:`_refuse`), if that failed the job."""
    match = _REFUSAL.search(str(exc))
    if match is None:
        return None
    kind, message = match.group(1), match.group(2).strip()
    if kind == "ValueOutOfRangeError":
        column = re.search(r"column '([^']*)'", message)
        return ValueOutOfRangeError(message, column=column.group(1) if column else "", value=None)
    return SchemaMismatchError(message)
