"""lakefmt on Spark: a PySpark data source and compaction on Spark (spec/spark.md, docs/spark.md).

Needs PySpark >= 4.0 (4.1 for filter pushdown and Arrow streaming writes). Nothing in
the core imports this package; it uses only lakefmt's public table and commit API.

Example:
    >>> import lakefmt.spark
    >>> lakefmt.spark.register(spark)
    >>> df = spark.read.format("lakefmt").option("catalog", "warehouse").load("artemis.downlinks")
    >>> df.write.format("lakefmt").option("catalog", "warehouse").mode("append").save("artemis.downlinks")
    >>> t.compaction.run(strategy="zorder", columns=["payload_id"], engine="spark", spark=spark)
"""

from __future__ import annotations

from typing import Any

from lakefmt.spark.compaction import SparkRewriter
from lakefmt.spark.source import LakefmtDataSource

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["FILTER_PUSHDOWN_CONF", "LakefmtDataSource", "SparkRewriter", "register"]


def register(spark: Any) -> None:
    """Register the ``lakefmt`` format with ``spark`` and turn on Python filter pushdown (SPARK-18).

    Without pushdown Spark refuses to plan reads of a source that can take filters, so
    this also sets ``spark.sql.python.filterPushdown.enabled=true`` for the session.
    """
    spark.dataSource.register(LakefmtDataSource)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
