"""lakefmt column types as Spark SQL types, and the Arrow casts between the two (spec/spark.md, SPARK-3, SPARK-4).

Most types map one to one. Two have no Spark counterpart and are carried losslessly in
another Spark type:

* ``time`` (microseconds since midnight) is a Spark ``LongType`` holding those
  microseconds: Python data sources cannot return Spark's ``TIME`` type.
* ``decimal(P,S)`` with ``P > 38`` is a Spark ``StringType`` holding the decimal text:
  Spark decimals stop at 38 digits.

Reading casts every batch to exactly the Arrow schema Spark expects for the requested
Spark schema (string instead of large string, UTC timestamps, nullability). Writing
undoes the two carried types, then :func:`lakefmt.write.conform` applies WRITE-3.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from lakefmt.errors import SchemaMismatchError
from lakefmt.schema import Schema
from lakefmt.types import LakeType, can_write, decimal

_SIMPLE: dict[str, T.DataType] = {
    "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
    "double": T.DoubleType(), "date": T.DateType(), "time": T.LongType(), "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(), "string": T.StringType(), "binary": T.BinaryType(),
}


def is_carried(ltype: LakeType) -> bool:
    """Whether Spark sees this type as another type (time as long, wide decimal as string)."""
    return ltype.name == "time" or (ltype.name == "decimal" and (ltype.precision or 0) > 38)


def spark_type(ltype: LakeType) -> T.DataType:
    """The Spark type a lakefmt column reads as (SPARK-3)."""
    if ltype.name == "decimal":
        assert ltype.precision is not None and ltype.scale is not None
        return T.DecimalType(ltype.precision, ltype.scale) if ltype.precision <= 38 else T.StringType()
    return _SIMPLE[ltype.name]


def spark_schema(schema: Schema) -> T.StructType:
    """The Spark schema of a lakefmt schema: required columns are not nullable."""
    return T.StructType([T.StructField(f.name, spark_type(f.type), nullable=not f.required) for f in schema.fields])


def lake_type_of(dtype: T.DataType) -> LakeType | None:
    """The lakefmt type Spark data of ``dtype`` is stored as, or None if it cannot be stored."""
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType)):
        return LakeType("int")
    if isinstance(dtype, T.DecimalType):
        return decimal(dtype.precision, dtype.scale)
    if isinstance(dtype, (T.CharType, T.VarcharType)):
        return LakeType("string")
    for name, simple in _SIMPLE.items():
        if name != "time" and type(dtype) is type(simple):
            return LakeType(name)
    return None


def check_writable(incoming: T.StructType, schema: Schema) -> None:
    """Refuse a DataFrame whose schema cannot be written to ``schema`` before any file is written (SPARK-9).

    The rules are WRITE-3's, applied to types: unknown or duplicate columns, types that
    do not store without loss, and missing required columns. Nulls in required columns
    can only be seen in the data and are refused while writing.
    """
    names = [f.name for f in incoming.fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaMismatchError(f"the DataFrame has duplicate columns {duplicates}")
    extra = [n for n in names if n not in schema.names]
    if extra:
        raise SchemaMismatchError(f"the DataFrame has columns the table does not have: {extra}; "
                                  f"table columns: {schema.names} (add them with update_schema first)")
    for f in incoming.fields:
        target = schema.find(f.name).type
        if is_carried(target) and spark_type(target) == f.dataType:
            continue
        source = lake_type_of(f.dataType)
        if source is None or not can_write(source, target):
            raise SchemaMismatchError(f"column {f.name!r} has Spark type {f.dataType.simpleString()}; the table "
                                      f"stores {target} (Spark type {spark_type(target).simpleString()})")
    missing = [f.name for f in schema.fields if f.required and f.name not in names]
    if missing:
        raise SchemaMismatchError(f"required columns {missing} are missing from the DataFrame")


def spark_arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema Spark checks Python data source batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema  # imports pandas helpers; only needed here

    return to_arrow_schema(schema, timezone="UTC")


def to_spark_arrow(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Cast lakefmt rows (as read) to the Arrow schema Spark expects (SPARK-3)."""
    columns = []
    for field in target:
        column = table.column(field.name)
        if pa.types.is_time(column.type) and pa.types.is_integer(field.type):
            column = column.cast(pa.int64())  # time travels as microseconds since midnight
        if column.type != field.type:
            column = column.cast(field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def from_spark_arrow(data: pa.Table | pa.RecordBatch, schema: Schema) -> pa.Table:
    """Undo the carried types of Spark data (long -> time, string -> wide decimal) before WRITE-3."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    for name in table.column_names:
        if name not in schema.names:
            continue  # conform() refuses it with the table's message
        ltype = schema.find(name).type
        column = table.column(name)
        if ltype.name == "time" and pa.types.is_integer(column.type):
            table = table.set_column(table.column_names.index(name), name, column.cast(pa.int64()).cast(
                pa.time64("us")))
        elif is_carried(ltype) and ltype.name == "decimal" and pa.types.is_string(column.type):
            try:
                cast = column.cast(ltype.to_arrow())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(f"column {name!r} holds text that is not a {ltype}: {exc}") from None
            table = table.set_column(table.column_names.index(name), name, cast)
    return table

