"""The ``lakefmt`` Spark data source: resolves a table and hands out readers and writers (spec/spark.md).

Spark runs every method here on the driver, each in a short-lived Python worker, and
pickles the data source between them: state set in ``schema()`` (the pinned
snapshot) is what ``reader()`` sees later, and a DataFrame keeps reading the snapshot
it was created on (SPARK-2).

Example:
    >>> import lakefmt.spark; lakefmt.spark.register(spark)
    >>> df = spark.read.format("lakefmt").option("catalog", "warehouse").load("artemis.downlinks")
"""

from __future__ import annotations

import json
import os
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from lakefmt.errors import ValidationError
from lakefmt.expressions import bind, to_expression
from lakefmt.spark.options import (
    DEFAULT_OPEN_COST,
    DEFAULT_SPLIT_SIZE,
    TableRef,
    as_of_option,
    columns_option,
    int_option,
    lowered,
)
from lakefmt.spark.reader import LakefmtReader, ScanSpec
from lakefmt.spark.stream import LakefmtStreamWriter, writer_id_option
from lakefmt.spark.types import spark_schema
from lakefmt.spark.writer import LakefmtBatchWriter, new_job


class LakefmtDataSource(DataSource):
    """``spark.read.format("lakefmt")``, ``df.write.format("lakefmt")``, ``writeStream.format("lakefmt")``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._scan: ScanSpec | None = None

    @classmethod
    def name(cls) -> str:
        return "lakefmt"

    # -- reading ---------------------------------------------------------------------
    def schema(self) -> StructType:
        """Resolve the table, pin the snapshot to read, return its Spark schema (SPARK-2, SPARK-3)."""
        scan = self._pin()
        schema = scan.schema()
        columns = columns_option(self.options)
        return spark_schema(schema.select(columns) if columns else schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return LakefmtReader(self._pin(), schema)

    def _pin(self) -> ScanSpec:
        """The table's metadata file and snapshot, fixed the first time this data source is asked."""
        if self._scan is None:
            ref = TableRef.from_options(self.options)
            table = ref.load()
            opts = lowered(self.options)
            if opts.get("native", "false").lower() != "false":  # SPARK-23: a Python source cannot hand back a JVM scan
                raise ValidationError("option 'native' is not supported by format('lakefmt'): for Spark's own "
                                      "Parquet reader use lakefmt.spark.read_native(spark, table, catalog=...)")
            snapshot_id = int(opts["snapshot-id"]) if opts.get("snapshot-id") else None
            scan = table.scan(snapshot_id=snapshot_id, as_of=as_of_option(self.options))
            row_filter = to_expression(opts.get("filter") or None)
            bind(row_filter, scan.schema)  # unknown columns and bad literals fail now, on the driver
            self._scan = ScanSpec(
                ref=ref, metadata_location=table.metadata_location,
                snapshot_id=None if scan.snapshot is None else scan.snapshot.snapshot_id,
                schema_json=json.dumps(scan.schema.to_json()), filter=row_filter,
                split_size=max(1, int_option(self.options, "split-size", DEFAULT_SPLIT_SIZE)),
                open_cost=int_option(self.options, "open-cost", DEFAULT_OPEN_COST),
                min_partitions=int_option(self.options, "min-partitions", os.cpu_count() or 1),
                table_location=table.location)
        return self._scan

    # -- writing ---------------------------------------------------------------------
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch write: appends, or with ``mode("overwrite")`` replaces every row (SPARK-10, SPARK-11)."""
        ref = TableRef.from_options(self.options)
        _refuse_read_options(self.options)
        return LakefmtBatchWriter(new_job(ref.load(), ref, schema, dict(self.options)), overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming sink: one snapshot per micro-batch, exactly once (SPARK-14)."""
        ref = TableRef.from_options(self.options)
        _refuse_read_options(self.options)
        job = new_job(ref.load(), ref, schema, dict(self.options))
        explicit, fallback = writer_id_option(dict(self.options))
        return LakefmtStreamWriter(job, schema, overwrite=overwrite,  # type: ignore[return-value]
                                   writer_id=explicit, fallback_writer_id=fallback)


def _refuse_read_options(options: Any) -> None:
    opts = lowered(options)
    for name in ("snapshot-id", "as-of", "columns", "filter"):
        if opts.get(name):
            raise ValidationError(f"option {name!r} applies to reads only; a write always goes to the current "
                                  "snapshot of the whole table")

