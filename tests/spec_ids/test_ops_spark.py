"""The Spark integration's task and discovery rules (spec/spark.md SPARK-1, SPARK-18).

SPARK-1 runs the very objects Spark would pickle to its executors — a read partition, a
batch writer, a compaction group's task — in a fresh process while the catalog file is
gone, without a JVM. SPARK-18's registration needs the shared SparkSession of tests/spark.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.0")  # before importing lakefmt.spark
from lakefmt.compaction.runner import make_task, plan_table
from lakefmt.spark.source import LakefmtDataSource
from tests.compaction.conftest import small_files_table
from tests.conftest import downlinks, rows
from tests.spark.conftest import spark  # noqa: F401 - the shared session fixture

REPO = Path(__file__).resolve().parents[2]

TASKS = """
import pickle, sys
import pyarrow as pa
from lakefmt.spark.compaction import rewrite_in_task

reader, partitions, writer, batches, io_args, task = pickle.load(open(sys.argv[1], "rb"))
read = pa.Table.from_batches([b for p in partitions for b in reader.read(p)])
message = writer.write(iter(batches))
rewritten = rewrite_in_task(io_args, task)
if isinstance(rewritten, BaseException):
    raise rewritten
pickle.dump((read, message, rewritten), open(sys.argv[2], "wb"))
"""


def files_under(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_tasks_need_no_catalog_and_touch_only_the_table_location(local_catalog, tmp_path):
    """SPARK-1: a read task, a write task and a compaction task, planned on the driver, run in
    another process with the catalog file moved away: they succeed, create no catalog, and write
    only under the table location; the driver then commits what the write task wrote."""
    t = small_files_table(local_catalog, appends=5, rows=300)
    t.delete("payload_id = 2")  # read and compaction tasks carry deletion vectors
    live = t.scan().to_arrow()
    names = live.column_names
    source = LakefmtDataSource({"catalog": local_catalog.warehouse, "path": "artemis.downlinks"})
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    writer = source.writer(source.schema(), overwrite=False)
    new_rows = downlinks(200, seed=77)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    group = plan.groups[0]
    task = make_task(t, plan, group)
    io_args = (t.io.location, dict(t.io.storage_options))
    work, done = tmp_path / "tasks.pkl", tmp_path / "done.pkl"
    work.write_bytes(pickle.dumps((reader, partitions, writer, new_rows.to_batches(), io_args, task)))

    warehouse, catalog_file = Path(local_catalog.warehouse), Path(local_catalog.catalog_path)
    away = tmp_path / "catalog-away.duckdb"
    catalog_file.rename(away)
    before = files_under(warehouse)
    try:
        run = subprocess.run([sys.executable, "-c", TASKS, str(work), str(done)], capture_output=True,
                             text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
        recreated = catalog_file.exists()
        after = files_under(warehouse)
    finally:
        if not catalog_file.exists():
            away.rename(catalog_file)
    assert run.returncode == 0, run.stderr
    assert not recreated  # no task opened (and so created) the catalog
    table_dir = str(Path(t.location).relative_to(warehouse))
    changed = {p for p, mtime in after.items() if before.get(p) != mtime} | (before.keys() - after.keys())
    assert all(p.startswith(table_dir + "/data/") for p in changed), sorted(changed)
    assert {Path(p).name.split("-")[0] for p in changed} == {"part", "compact"}  # the write's, the rewrite's

    read, message, rewritten = pickle.loads(done.read_bytes())
    assert read.num_rows == live.num_rows
    assert rows(read.select(["mission_id", "payload_id", "sensor_kind", "value"])) == \
        rows(live.select(["mission_id", "payload_id", "sensor_kind", "value"]))
    assert rewritten.rows == sum(f.live_record_count for f in group.files)
    assert all(Path(p).is_file() for p in rewritten.output_paths)
    writer.commit([message])
    t.refresh()
    assert t.scan().count() == live.num_rows + new_rows.num_rows
    expected = pa.concat_tables([live, new_rows.cast(live.schema)])
    assert rows(t.scan().to_arrow().select(names)) == rows(expected)


@pytest.mark.spark
def test_discovery_and_registration(spark: Any, local_catalog: lakefmt.Catalog) -> None:  # noqa: F811
    """SPARK-18: the top-level module pyspark_lakefmt exposes DefaultSource named ``lakefmt`` as Spark's
    lookup finds it; ``register`` registers the format and turns on Python filter pushdown."""
    from importlib import import_module
    from pkgutil import iter_modules

    from pyspark.sql.datasource import DataSource

    import lakefmt.spark

    found = {}
    for info in iter_modules():  # Spark's own lookup of Python data sources
        if info.name.startswith("pyspark_"):
            module = import_module(info.name)
            if hasattr(module, "DefaultSource") and issubclass(module.DefaultSource, DataSource):
                found[module.DefaultSource.name()] = module.DefaultSource
    assert found.get("lakefmt") is LakefmtDataSource

    spark.conf.set(lakefmt.spark.FILTER_PUSHDOWN_CONF, "false")
    lakefmt.spark.register(spark)
    assert spark.conf.get(lakefmt.spark.FILTER_PUSHDOWN_CONF) == "true"
    t = small_files_table(local_catalog, appends=2, rows=100)
    df = spark.read.format("lakefmt").option("catalog", local_catalog.warehouse).load("artemis.downlinks")
    assert df.filter("payload_id = 3").count() == t.scan("payload_id = 3").count() > 0
