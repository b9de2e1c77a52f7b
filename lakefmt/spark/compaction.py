"""Compaction on Spark: each group's rewrite runs as a Spark task (spec/spark.md, SPARK-19..SPARK-21).

``t.compaction.run(..., engine="spark", spark=spark)`` runs the local compaction
runner unchanged — same planner, partition leases, read budget, per-group commits
with the same validation (COMPACT-18) — except that each group's
:func:`~lakefmt.compaction.rewrite_group` call happens in a one-task Spark job. The
runner keeps up to ``max-concurrent-groups`` groups in flight (COMPACT-27), so as
many Spark tasks run at once, and commits each group on the driver as soon as its
task returns (partial progress, COMPACT-19).

The task receives the picklable :class:`~lakefmt.compaction.RewriteTask` and the
warehouse's location and storage options, nothing else; it writes and verifies the
outputs (COMPACT-17) and never commits. The task's files are the inputs' manifest
entries with their deletion vectors, so the executor drops deleted rows exactly as local
compaction does (COMPACT-32), and the driver's commit removes the inputs with the very
vectors the task read (COMPACT-34).
"""

from __future__ import annotations

import pickle
from functools import partial
from typing import TYPE_CHECKING, Any

from lakefmt.compaction.rewrite import RewriteResult, RewriteTask, rewrite_group
from lakefmt.errors import CompactionError, ValidationError
from lakefmt.io import FileIO

if TYPE_CHECKING:
    from lakefmt.table import Table


class SparkRewriter:
    """Rewrites one group in a Spark task; callable from several driver threads at once."""

    def __init__(self, spark: Any, io: FileIO) -> None:
        self.spark = spark
        self.io_args = (io.location, dict(io.storage_options))

    def __call__(self, task: RewriteTask) -> RewriteResult:
        sc = self.spark.sparkContext
        sc.setJobDescription(f"lakefmt compaction: group {task.group_id} ({len(task.files)} files)")
        [result] = sc.parallelize([task], 1).map(partial(rewrite_in_task, self.io_args)).collect()
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]


def make_rewriter(table: Table, *, spark: Any = None) -> SparkRewriter:
    """The ``"spark"`` compaction engine for ``table`` (the active session unless ``spark`` is given)."""
    if spark is None:
        from pyspark.sql import SparkSession  # the engine is chosen at run time; pyspark is optional

        spark = SparkSession.getActiveSession()
    if spark is None:
        raise ValidationError("engine='spark' needs a SparkSession: pass spark=...")
    return SparkRewriter(spark, table.io)


def rewrite_in_task(io_args: tuple[str, dict[str, Any]], task: RewriteTask) -> RewriteResult | BaseException:
    """Runs on an executor. A failure is returned, not raised: Spark would retry a deterministic error."""
    try:
        return rewrite_group(FileIO(*io_args), task)
    except Exception as exc:  # noqa: BLE001 - re-raised on the driver by SparkRewriter
        try:
            pickle.loads(pickle.dumps(exc))
            return exc
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling
            return CompactionError(f"group {task.group_id}: {type(exc).__name__}: {exc}")
