"""Compaction on Spark: same plan, same rewrite, same commits as the local engine (SPARK-19..SPARK-21)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow.parquet as pq
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from lakefmt.spark.compaction import SparkRewriter
from tests.compaction.conftest import small_files_table
from tests.spark.conftest import no_garbage

pytestmark = pytest.mark.spark


def layout(table: lakefmt.Table, keys: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    """Each live file as (partition, sort order id, rows, its ``keys`` in file order, its rows as a set).

    File names differ between tables, and so may the order of rows that tie on the keys.
    """
    table.refresh()
    out = []
    for f in table.plan_files():
        data = pq.read_table(f"{table.location}/{f.path}")
        key_order = tuple(zip(*(data.column(k).to_pylist() for k in keys)))
        rows = sorted(map(repr, data.to_pylist()))
        out.append((f.partition, f.sort_order_id, f.record_count, key_order, tuple(rows)))
    return sorted(out, key=repr)


@pytest.mark.parametrize("strategy, options, keys", [
    ("binpack", {}, ()),
    ("sort", {}, ("payload_id", "sensor_kind")),
    ("zorder", {"columns": ["payload_id", "sensor_kind"]}, ("payload_id", "sensor_kind"))])
def test_spark_compaction_gives_the_rows_and_layout_of_local_compaction(
        spark: Any, catalog: lakefmt.Catalog, strategy: str, options: dict[str, Any], keys: tuple[str, ...]) -> None:
    """SPARK-19, SPARK-20: identical tables, compacted locally and on Spark, end up identical."""
    local = small_files_table(catalog, "artemis.local", appends=6, rows=300)
    remote = small_files_table(catalog, "artemis.remote", appends=6, rows=300)
    assert layout(local) == layout(remote)
    ran_local = local.compaction.run(strategy, min_age_seconds=0, **options)  # type: ignore[arg-type]
    ran_spark = remote.compaction.run(strategy, engine="spark", spark=spark, min_age_seconds=0,  # type: ignore[arg-type]
                                      **options)
    assert ran_spark.groups_committed == ran_local.groups_committed > 0
    assert ran_spark.files_after == ran_local.files_after < ran_local.files_before
    assert layout(remote, keys) == layout(local, keys)
    assert [g.method for g in ran_spark.groups] == [g.method for g in ran_local.groups]
    assert remote.check().ok and no_garbage(remote)


def test_a_failing_rewrite_task_fails_its_group_only(spark: Any, catalog: lakefmt.Catalog) -> None:
    """SPARK-21, COMPACT-19: the task's error reaches the driver unretried; nothing is committed for it."""
    t = small_files_table(catalog, appends=4, rows=200)
    before = layout(t)
    rewriter = SparkRewriter(spark, t.io)
    broken = [True]

    def rewrite_once_broken(task: Any) -> Any:
        if broken[0]:
            broken[0] = False
            wrong = replace(task.files[0], record_count=1)  # the rewrite's own row check fails (COMPACT-17)
            task = replace(task, files=(wrong, *task.files[1:]))
        return rewriter(task)

    result = t.compaction.run("binpack", engine=rewrite_once_broken, min_age_seconds=0, min_input_files=2,
                              max_concurrent_groups=1)
    assert result.groups_failed == 1 and result.groups_committed == result.groups_planned - 1
    failed = next(g for g in result.groups if g.status == "failed")
    assert "CompactionError" in (failed.error or "") and "manifest entries say" in (failed.error or "")
    assert sorted(r for f in layout(t) for r in f[4]) == sorted(r for f in before for r in f[4])
    assert no_garbage(t)
