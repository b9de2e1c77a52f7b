"""Spark reads at native speed: lakefmt plans, Spark's own Parquet reader reads (spec/spark.md, SPARK-23..SPARK-26).

:func:`read_native` plans the scan on the driver exactly as ``format("lakefmt")`` does
(snapshot pinned, manifests and files pruned by the filter, READ-5) and returns a
DataFrame that reads only the planned files with ``spark.read.parquet``: no Python
worker touches a row. What the Python reader does itself is done here in Spark terms:

* **Columns by field id** (READ-6, SPARK-23). The read schema carries each column's id
  as ``parquet.field.id`` and ``spark.sql.parquet.fieldId.read.enabled`` is on, so a
  renamed column is found under its old name, an added column reads as nulls and a
  widened one (``int`` -> ``long``, ``float`` -> ``double``) is widened by Spark. Spark
  still uses *names* to push filters into the Parquet reader and to resolve clipped
  column types, so a column whose name (case-insensitively) ever belonged to another
  field id in the table's schemas is read under a private name and renamed afterwards.
* **Exact filtering** (READ-8, SPARK-24). The lakefmt filter becomes a Spark condition
  with lakefmt's semantics (IEEE 754 comparisons with NaN, EXPR-5) and is applied to
  every row; Spark pushes it into its Parquet reader for row-group skipping.
* **Deleted rows** (READ-14, SPARK-25). The planned files that carry a deletion vector
  are read with ``_metadata.file_name`` and ``_metadata.row_index``; their vectors'
  positions, decoded on the driver, form a small DataFrame that is anti-joined
  (broadcast) away. Time travel plans the files and vectors of the chosen snapshot.

Example:
    >>> import lakefmt.spark
    >>> df = lakefmt.spark.read_native(spark, "artemis.downlinks", catalog="warehouse",
    ...                                filter="payload_id = 3", columns=["ts", "value"])
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefmt.conversions import EPOCH_NAIVE
from lakefmt.deletion_vectors import positions, read_deleted
from lakefmt.errors import FilterError, SchemaError, ValidationError
from lakefmt.evaluators import rewrite_not
from lakefmt.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundPredicate,
    Expression,
    Or,
    referenced_field_ids,
)
from lakefmt.schema import Field
from lakefmt.spark.types import spark_type
from lakefmt.threads import thread_map

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from lakefmt.catalog import Catalog
    from lakefmt.scan import DataScan, FileScanTask
    from lakefmt.table import Table

FIELD_ID_KEY = "parquet.field.id"
FIELD_ID_READ_CONF = "spark.sql.parquet.fieldId.read.enabled"
FIELD_ID_IGNORE_MISSING_CONF = "spark.sql.parquet.fieldId.read.ignoreMissing"
BROADCAST_POSITIONS = 5_000_000  # deleted positions up to this many are broadcast to every task
_VECTOR_THREADS = 8


def read_native(spark: SparkSession, table_or_name: Table | str, *, catalog: Catalog | str | None = None,
                filter: str | Expression | None = None, columns: Sequence[str] | None = None,
                snapshot_id: int | None = None, as_of: dt.datetime | None = None) -> DataFrame:
    """A DataFrame of one snapshot of a lakefmt table, read by Spark's own Parquet reader (SPARK-23).

    ``table_or_name`` is a :class:`~lakefmt.Table` (its loaded metadata is read, as
    ``t.scan()`` would) or ``"namespace.table"`` in ``catalog`` (a :class:`~lakefmt.Catalog`
    or a location ``lakefmt.Catalog`` accepts). ``filter`` (lakefmt syntax, EXPR-2) prunes
    files while planning and is applied to every row; Spark filters on the returned
    DataFrame prune row groups but not files. The snapshot and its files are fixed now:
    every action reads them (SPARK-2). Turns on ``spark.sql.parquet.fieldId.read.enabled``
    for the session (it only affects reads whose schema carries field ids).

    Raises:
        SchemaError: a needed column is a decimal wider than 38 digits (Spark cannot read it).
        ValidationError: no catalog for a table name, or the session ignores missing field ids.
    """
    table = _load(table_or_name, catalog)
    scan = table.scan(filter, columns, snapshot_id=snapshot_id, as_of=as_of)
    return native_frame(spark, scan, scan.plan().tasks)


def native_frame(spark: SparkSession, scan: DataScan, tasks: Sequence[FileScanTask]) -> DataFrame:
    """The DataFrame of ``scan``'s rows in the planned files ``tasks`` (their entries carry the vectors)."""
    from pyspark.sql import functions as F

    _configure(spark)
    projected = scan.projected_schema.fields
    needed_ids = {f.id for f in projected} | referenced_field_ids(scan.row_filter)
    needed = [f for f in scan.schema.fields if f.id in needed_ids]
    names = read_names(scan, needed)
    prefix = private_prefix(scan)
    file_column, row_column = f"{prefix}file", f"{prefix}row"
    read_schema = _read_schema(needed, names)
    output = [F.col(names[f.id]).alias(f.name) for f in projected]
    if not tasks:
        from pyspark.sql.types import StructType

        empty = spark.createDataFrame([], StructType([read_schema[names[f.id]] for f in projected]))
        return empty.select(*output)
    condition = spark_condition(scan.row_filter, names)
    clean = [t.location for t in tasks if t.data_file.deletion_vector is None]
    marked = [t for t in tasks if t.data_file.deletion_vector is not None]

    def read(paths: Sequence[str], with_position: bool) -> DataFrame:
        df = (spark.read.schema(read_schema).option("ignoreMissingFiles", "false")
              .option("ignoreCorruptFiles", "false").parquet(*paths))
        if with_position:
            df = df.select("*", F.col("_metadata.file_name").alias(file_column),
                           F.col("_metadata.row_index").alias(row_column))
        return df if condition is None else df.filter(condition)

    parts = [read(clean, False).select(*output)] if clean else []
    if marked:
        deleted = deleted_positions(spark, scan, marked, (file_column, row_column))
        live = read([t.location for t in marked], True).join(deleted, on=[file_column, row_column], how="left_anti")
        parts.append(live.select(*output))
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    return frame


def read_names(scan: DataScan, fields: Sequence[Field]) -> dict[int, str]:
    """``{field id: the name Spark reads it under}``: its own name, or a private one when names are ambiguous.

    Spark matches columns by field id, but pushes filters into Parquet and resolves clipped
    column types by name (case-insensitively by default). A name that some schema of the
    table gave to another field id may be the name of a different column in an older file,
    so such a column is read under ``__lakefmt_<id>`` (SPARK-23).
    """
    owners: dict[str, set[int]] = {}
    for schema in (*scan.metadata.schemas, scan.schema):
        for f in schema.fields:
            owners.setdefault(f.name.lower(), set()).add(f.id)
    prefix = private_prefix(scan)
    return {f.id: f.name if owners[f.name.lower()] == {f.id} else f"{prefix}{f.id}" for f in fields}


def private_prefix(scan: DataScan) -> str:
    """``__lakefmt_``, with more leading underscores until no column name of any schema starts with it."""
    names = {f.name.lower() for schema in (*scan.metadata.schemas, scan.schema) for f in schema.fields}
    prefix = "__lakefmt_"
    while any(name.startswith(prefix) for name in names):
        prefix = "_" + prefix
    return prefix


def deleted_positions(spark: SparkSession, scan: DataScan, tasks: Sequence[FileScanTask],
                      columns: tuple[str, str]) -> DataFrame:
    """(file name, row index), named ``columns``, of every row the files' deletion vectors delete (READ-14).

    Files are told apart by name: LAYOUT-6 makes data file names unique within a table.
    """
    from pyspark.sql import functions as F

    names = [t.location.rsplit("/", 1)[-1] for t in tasks]
    if len(set(names)) != len(names):
        raise ValidationError("two planned data files share a file name, which LAYOUT-6 rules out; "
                              "read this table with format('lakefmt')")
    location = scan.metadata.location

    def one(task: FileScanTask) -> pa.Array:
        mask = read_deleted(scan.io, location, task.data_file)
        return positions(mask).cast(pa.int64()) if mask is not None else pa.array([], pa.int64())

    rows = thread_map(one, list(tasks), _VECTOR_THREADS)
    table = pa.table({
        columns[0]: pa.chunked_array([pa.repeat(pa.scalar(n), len(r)) for n, r in zip(names, rows)], pa.string()),
        columns[1]: pa.chunked_array(rows, pa.int64()),
    })
    frame = spark.createDataFrame(table)
    return F.broadcast(frame) if table.num_rows <= BROADCAST_POSITIONS else frame


# -- the lakefmt filter as a Spark condition ------------------------------------------------------

def spark_condition(expr: Expression, names: dict[int, str]) -> Column | None:
    """A Spark condition TRUE exactly for the rows where ``expr`` (bound) is TRUE (READ-8, SPARK-24).

    After NOT push-down (EXPR-6) only AND and OR combine leaves, and they are TRUE exactly when
    their operands are (both, either) TRUE, so each leaf need only be TRUE for the same rows as
    lakefmt's: a leaf may be FALSE where lakefmt's is NULL. Spark orders NaN above every number
    and makes ``NaN = NaN`` true; lakefmt follows IEEE 754, so float comparisons get NaN guards.
    None for a filter that keeps every row.
    """
    from pyspark.sql import functions as F

    expr = rewrite_not(expr)
    if isinstance(expr, AlwaysTrue):
        return None

    def convert(e: Expression) -> Column:
        if isinstance(e, (AlwaysTrue, AlwaysFalse)):
            return F.lit(isinstance(e, AlwaysTrue))
        if isinstance(e, And):
            return convert(e.left) & convert(e.right)
        if isinstance(e, Or):
            return convert(e.left) | convert(e.right)
        if isinstance(e, BoundPredicate):
            return _leaf(e, F.col(names[e.field_id]))
        raise FilterError(f"cannot apply {e!r} in Spark")

    return convert(expr)


def _leaf(pred: BoundPredicate, column: Column) -> Column:
    from pyspark.sql import functions as F

    op, ltype = pred.op, pred.type
    floating = ltype.name in ("float", "double")
    if op == "is_null":
        return column.isNull()
    if op == "not_null":
        return column.isNotNull()
    if op == "is_nan":
        return F.isnan(column)
    if op == "not_nan":
        return column.isNotNull() & ~F.isnan(column)
    if op in ("starts_with", "not_starts_with"):
        match = F.startswith(column, _literal(ltype, pred.literal))
        return match if op == "starts_with" else column.isNotNull() & ~match
    if op in ("in", "not_in"):  # Spark's IN matches NaN to NaN, as lakefmt's hashed IN does
        values = list(pred.literals)
        if floating and any(v == 0.0 for v in values):
            values += [0.0, -0.0]
        member = column.isin([_literal(ltype, v) for v in values])
        return member if op == "in" else column.isNotNull() & ~member
    value = pred.literal
    if floating and math.isnan(value):  # a NaN literal: only != is TRUE (IEEE 754)
        return column.isNotNull() if op == "ne" else F.lit(False)
    lit = _literal(ltype, value)
    compare = {"eq": column == lit, "ne": column != lit, "lt": column < lit, "le": column <= lit,
               "gt": column > lit, "ge": column >= lit}[op]
    if not floating:
        return compare
    return compare | F.isnan(column) if op == "ne" else compare & ~F.isnan(column)


def _literal(ltype: Any, value: Any) -> Column:
    """A Spark literal of the column's Spark type (SPARK-3) from a physical lakefmt value."""
    from pyspark.sql import functions as F

    name = ltype.name
    if name == "date":
        return F.date_from_unix_date(F.lit(int(value)))
    if name == "timestamptz":
        return F.timestamp_micros(F.lit(int(value)))
    if name == "timestamp":  # wall-clock text: no session time zone is involved
        text = (EPOCH_NAIVE + dt.timedelta(microseconds=int(value))).isoformat(sep=" ", timespec="microseconds")
        return F.lit(text).cast("timestamp_ntz")
    if name == "binary":
        return F.lit(bytearray(value))
    return F.lit(value).cast(spark_type(ltype))


# -- setup --------------------------------------------------------------------------------------

def _read_schema(fields: Sequence[Field], names: dict[int, str]) -> StructType:
    from pyspark.sql.types import StringType, StructField, StructType

    out = []
    for f in fields:
        stype = spark_type(f.type)
        if f.type.name == "decimal" and isinstance(stype, StringType):
            raise SchemaError(f"column {f.name!r} is {f.type}: Spark's Parquet reader cannot read decimals of more "
                              "than 38 digits; leave it out with columns=[...] or read the table with "
                              "format('lakefmt'), which returns it as text")
        out.append(StructField(names[f.id], stype, True, {FIELD_ID_KEY: f.id}))
    return StructType(out)


def _configure(spark: SparkSession) -> None:
    """Field-id matching on (SPARK-23); a file without field ids must fail, not read as nulls (READ-12)."""
    if str(spark.conf.get(FIELD_ID_IGNORE_MISSING_CONF, "false")).lower() == "true":
        raise ValidationError(f"{FIELD_ID_IGNORE_MISSING_CONF}=true would read a data file without field ids as "
                              "nulls (READ-12); unset it for native lakefmt reads")
    if str(spark.conf.get(FIELD_ID_READ_CONF, "false")).lower() != "true":
        spark.conf.set(FIELD_ID_READ_CONF, "true")


def _load(table_or_name: Table | str, catalog: Catalog | str | None) -> Table:
    if not isinstance(table_or_name, str):
        return table_or_name
    if catalog is None:
        raise ValidationError(f"say which catalog table {table_or_name!r} is in: read_native(spark, "
                              f"{table_or_name!r}, catalog='<warehouse location>')")
    from lakefmt.catalog import Catalog

    return (catalog if isinstance(catalog, Catalog) else Catalog(str(catalog))).load_table(table_or_name)
