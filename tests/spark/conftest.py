"""One local SparkSession for the whole Spark suite, and helpers (spec/spark.md).

The session is ``local[2, 4]``: two worker threads like ``local[2]``, and up to four
attempts per task (plain ``local[N]`` never retries a task, and the retry tests need
Spark's own retry). Spark's Python workers import lakefmt from this checkout through
PYTHONPATH. Every module here sets ``pytestmark = pytest.mark.spark``; the session
fixture skips cleanly when pyspark or Java is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakefmt

REPO = Path(__file__).resolve().parents[2]


def _java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (java_home and Path(java_home, "bin", "java").exists()))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The suite's SparkSession, with the ``lakefmt`` format registered and filter pushdown on."""
    pytest.importorskip("pyspark", minversion="4.0")
    if not _java_available():
        pytest.skip("Spark needs Java (java on PATH or JAVA_HOME)")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import lakefmt.spark

    session = (SparkSession.builder.master("local[2, 4]").appName("lakefmt-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "America/New_York")  # not UTC: timestamps must not shift
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    lakefmt.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def catalog(warehouse: str) -> lakefmt.Catalog:
    return lakefmt.Catalog(warehouse, create=True)


def read(spark: Any, catalog: lakefmt.Catalog, table: str, **options: str) -> Any:
    """``spark.read.format("lakefmt")`` of ``table`` in ``catalog``."""
    reader = spark.read.format("lakefmt").option("catalog", catalog.warehouse)
    for key, value in options.items():
        reader = reader.option(key.replace("_", "-"), value)
    return reader.load(table)


def writer(df: Any, catalog: lakefmt.Catalog, **options: str) -> Any:
    w = df.write.format("lakefmt").option("catalog", catalog.warehouse)
    for key, value in options.items():
        w = w.option(key, value)
    return w


def no_garbage(table: lakefmt.Table) -> bool:
    """No file under the table location is unreferenced by every snapshot, leased or not (MAINT-8)."""
    table.release_write_token()
    found = table.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=True)
    return not found.orphan_files and not found.in_flight_files


def sorted_rows(table: pa.Table, names: list[str] | None = None) -> list[tuple]:
    names = names or table.column_names
    return sorted((tuple(r[n] for n in names) for r in table.select(names).to_pylist()), key=repr)
