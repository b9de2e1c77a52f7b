"""Spark's automatic discovery of the ``lakefmt`` data source (spec/spark.md, SPARK-18).

Spark imports every top-level module whose name starts with ``pyspark_`` and registers
its ``DefaultSource`` under ``DefaultSource.name()``, so with lakefmt installed
``spark.read.format("lakefmt")`` works without ``lakefmt.spark.register(spark)``. Reads
then still need ``spark.sql.python.filterPushdown.enabled=true`` (``register`` sets it).
"""

from lakefmt.spark.source import LakefmtDataSource as DefaultSource

__all__ = ["DefaultSource"]
