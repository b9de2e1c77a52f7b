"""lakefmt on Spark: a PySpark data source and compaction on Spark (spec/spark.md, docs/spark.md).

Needs PySpark >= 4.0 (4.1 for filter pushdown and Arrow streaming writes). Nothing in
the core imports this package; it uses only lakefmt's public table and commit API.

Example:
    >>> import lakefmt.spark
    >>> lakefmt.spark.register(spark)
    >>> df = spark.read.format("lakefmt").option("catalog", "warehouse").load("artemis.downlinks")
    >>> df.write.format("lakefmt").option("catalog", "warehouse").mode("append").save("artemis.downlinks")
    >>> t.compaction.run(strategy="zorder", columns=["payload_id"], engine="spark", spark=spark)
    >>> lakefmt.spark.read_native(spark, t, filter="payload_id = 3")   # Spark's own Parquet reader
    >>> lakefmt.spark.write_native(df, t)                               # Spark's own Parquet writer
"""

from __future__ import annotations

from typing import Any

from lakefmt.spark.compaction import SparkRewriter
from lakefmt.spark.native_read import read_native
from lakefmt.spark.native_write import write_native
from lakefmt.spark.source import LakefmtDataSource

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
SPARK_DEFAULT_ARROW_BATCH = "10000"

__all__ = ["ARROW_BATCH_CONF", "FILTER_PUSHDOWN_CONF", "LakefmtDataSource", "SparkRewriter", "read_native", "register",
           "write_native"]


def register(spark: Any, *, arrow_batch_rows: int | None = 100_000) -> None:
    """Register the ``lakefmt`` format with ``spark`` and turn on Python filter pushdown (SPARK-18).

    Without pushdown Spark refuses to plan reads of a source that can take filters, so
    this sets ``spark.sql.python.filterPushdown.enabled=true`` for the session.

    Writes hand rows to Python as Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows; at Spark's default of 10,000 that transfer costs about twice what it does at
    100,000. Unless the session already set another value, it is raised to
    ``arrow_batch_rows`` (None leaves it alone). It applies to the session's Arrow UDFs too.
    """
    spark.dataSource.register(LakefmtDataSource)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    if arrow_batch_rows and spark.conf.get(ARROW_BATCH_CONF, SPARK_DEFAULT_ARROW_BATCH) == SPARK_DEFAULT_ARROW_BATCH:
        spark.conf.set(ARROW_BATCH_CONF, str(int(arrow_batch_rows)))
