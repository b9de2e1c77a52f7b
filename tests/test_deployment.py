"""The setup of docs/deployment.md, simulated on one host by separate processes that share only the catalog
server's URL (with its token) and the S3 store (a moto server on loopback):

* machine A: ``lakefmt serve``, which owns the catalog file, serves the catalog over HTTP and is the
  compaction service (compaction and snapshot expiry on a schedule);
* machine B: a Spark job writing and reading with ``format("lakefmt")`` and the ``catalog`` option set to
  the URL (its own test, as a SparkSession costs ~20 s to start);
* machine C: a Python ingest process, idempotent appends with ``lakefmt.Catalog(URL)``;
* machine D: the command line (``lakefmt --warehouse URL append``) and a Python reader.

Each process has its own working directory; none sees the catalog file. Run as
``python -m tests.test_deployment <role> <json spec>`` this module is the worker.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from tests.test_catalog_client import (
    TOKEN,
    Worker,
    _await,
    _emit,
    assert_linear_history,
    clean_env,
    servers,
    storage_args,
)

__all__ = ["servers"]  # the fixture, used below
SCHEMA = pa.schema([pa.field("source", pa.string()), pa.field("batch", pa.int64()), pa.field("k", pa.int32())])
ROWS = 3
MODULE = "tests.test_deployment"


def batch(source: str, i: int) -> pa.Table:
    return pa.table({"source": [source] * ROWS, "batch": [i] * ROWS, "k": list(range(ROWS))}, schema=SCHEMA)


def model(batches: dict[str, int]) -> Counter[tuple[str, int, int]]:
    return Counter((s, i, k) for s, n in batches.items() for i in range(n) for k in range(ROWS))


def table_rows(t: lakefmt.Table) -> Counter[tuple[str, int, int]]:
    got = t.scan().to_arrow()
    return Counter(zip(got.column("source").to_pylist(), got.column("batch").to_pylist(),
                       got.column("k").to_pylist()))


# -- the processes on machines B, C and D ---------------------------------------------------------------
def worker_main(role: str, spec: dict[str, Any]) -> None:
    """Opens the catalog by URL only; the token comes from $LAKEFMT_CATALOG_TOKEN."""
    if role == "spark":
        spark_job(spec)
        return
    catalog = lakefmt.Catalog(spec["url"], storage_options=spec["storage_options"])
    table = catalog.load_table(spec["table"])
    _emit(ready=True)
    _await("go")
    if role == "ingest":  # batches of one source, each committed exactly once (PROGRESS-3)
        for i in range(spec["count"]):
            while True:
                try:
                    table.append(batch("ingest", i), idempotency=("ingest-c", i))
                except lakefmt.AlreadyCommittedError:
                    pass  # an earlier attempt whose outcome was unknown did commit
                except lakefmt.CommitStateUnknownError:
                    table.refresh()
                    continue  # the same batch again: the catalog refuses it if it was committed
                break
            _emit(batch=i)
    elif role == "read":  # reads until it sees every row; the count never goes down
        seen: list[int] = []
        while not seen or seen[-1] < spec["expected"]:
            count = table.refresh().scan().count()
            assert not seen or count >= seen[-1], (seen[-1], count)
            if not seen or count != seen[-1]:
                seen.append(count)
                _emit(count=count)
            time.sleep(0.2)
    else:
        raise SystemExit(f"unknown role {role}")


def spark_job(spec: dict[str, Any]) -> None:
    """Machine B: a Spark application appending one DataFrame per job, then reading the table back."""
    from pyspark.sql import SparkSession

    import lakefmt.spark

    spark = (SparkSession.builder.master("local[2]").appName("deployment-spark-job")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    lakefmt.spark.register(spark)
    options = {"catalog": spec["url"], "storage-options": json.dumps(spec["storage_options"])}
    _emit(ready=True)
    _await("go")
    for i in range(spec["count"]):
        spark.createDataFrame(batch("spark", i)).write.format("lakefmt").options(**options).mode("append") \
            .save(spec["table"])
        _emit(batch=i)
    rows = spark.read.format("lakefmt").options(**options).load(spec["table"]).filter("source = 'spark'").count()
    _emit(spark_rows=rows)
    spark.stop()


# -- the setup ------------------------------------------------------------------------------------------
pytestmark = [pytest.mark.service, pytest.mark.multiprocess, pytest.mark.s3, pytest.mark.timeout(900)]
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def machine_a(tmp_path: Path, s3_server: dict[str, Any], servers: Any) -> tuple[Any, dict[str, Any]]:
    """The catalog server and compaction service: catalog file on its own disk, data in S3."""
    options = dict(s3_server["options"])
    prefix = f"s3://{s3_server['bucket']}/{uuid.uuid4().hex}"
    catalog_path = str(tmp_path / "server" / "catalog.duckdb")
    lakefmt.Catalog(prefix, catalog_path=catalog_path, storage_options=options, create=True)  # once, on A
    server = servers(tmp_path, prefix, catalog_path=catalog_path, storage_options=options, args=(), env={
        "LAKEFMT_COMPACTION_SCHEDULE": "*/2 * * * * *", "LAKEFMT_EXPIRE_ENABLED": "true",
        "LAKEFMT_EXPIRE_SCHEDULE": "*/3 * * * * *", "LAKEFMT_EXPIRE_OLDER_THAN": "0s",
        "LAKEFMT_EXPIRE_RETAIN_LAST": "5"})
    return server, options


def test_ingest_cli_reader_and_compaction_service_share_only_the_url_and_s3(tmp_path: Path,
                                                                             s3_server: dict[str, Any],
                                                                             servers: Any):
    server, options = machine_a(tmp_path, s3_server, servers)
    admin = lakefmt.Catalog(server.url, token=TOKEN, storage_options=options)
    admin.create_table("ops.events", schema=SCHEMA, partition_by=["source"],
                       properties={"compaction.min-age-seconds": "0", "compaction.min-input-files": "2"})
    env = {"LAKEFMT_CATALOG_TOKEN": TOKEN}
    spec = {"url": server.url, "table": "ops.events", "storage_options": options}
    ingest = Worker("ingest", {**spec, "count": 40}, tmp_path / "machine-c", env, module=MODULE)
    reader = Worker("read", {**spec, "expected": (40 + 5) * ROWS}, tmp_path / "machine-d", env, module=MODULE)
    for w in (ingest, reader):
        w.wait_for("ready")
    for w in (ingest, reader):
        w.send("go")
    machine_d = tmp_path / "machine-d"
    for i in range(5):  # the command line on machine D appends Parquet files through the server
        path = machine_d / f"cli-{i}.parquet"
        pq.write_table(batch("cli", i), path)
        done = subprocess.run([sys.executable, "-m", "lakefmt.cli", "--warehouse", server.url,
                               *storage_args(options), "append", "ops.events", str(path)],
                              check=False, cwd=machine_d, env=clean_env(env), capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
    ingest.finish()
    counts = [line["count"] for line in reader.finish() if "count" in line]
    assert counts[-1] == 45 * ROWS and counts == sorted(counts)

    deadline = time.monotonic() + 180  # the service's schedule compacts and expires the table
    while not {"replace", "expire-snapshots"} <= {r.operation for r in admin.commit_log("ops.events")}:
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.5)
    t = admin.load_table("ops.events")
    assert table_rows(t) == model({"ingest": 40, "cli": 5})
    assert_linear_history(t)
    assert t.last_committed_batch("ingest-c") == 39
    status, history = server.request("GET", "/api/v1/history?kind=compaction", token=TOKEN, prefix="")
    assert status == 200 and any(j["groups_committed"] for j in history["jobs"])
    assert not list((tmp_path / "machine-c").glob("*.duckdb*")) and not list(machine_d.glob("*.duckdb*"))


@pytest.mark.spark
@pytest.mark.slow
def test_spark_job_and_python_ingest_through_the_server(tmp_path: Path, s3_server: dict[str, Any], servers: Any):
    """Machine B's Spark job writes and reads through the server's URL while machine C ingests."""
    pytest.importorskip("pyspark", minversion="4.0")
    if not shutil.which("java"):
        pytest.skip("Spark needs Java")
    server, options = machine_a(tmp_path, s3_server, servers)
    admin = lakefmt.Catalog(server.url, token=TOKEN, storage_options=options)
    admin.create_table("ops.events", schema=SCHEMA, partition_by=["source"],
                       properties={"compaction.min-age-seconds": "0", "compaction.min-input-files": "2"})
    env = {"LAKEFMT_CATALOG_TOKEN": TOKEN, "SPARK_LOCAL_IP": "127.0.0.1"}
    spec = {"url": server.url, "table": "ops.events", "storage_options": options}
    spark = Worker("spark", {**spec, "count": 3}, tmp_path / "machine-b", env, module=MODULE)
    ingest = Worker("ingest", {**spec, "count": 20}, tmp_path / "machine-c", env, module=MODULE)
    for w in (spark, ingest):
        w.wait_for("ready")
    for w in (spark, ingest):
        w.send("go")
    ingest.finish()
    lines = spark.finish(timeout=800)
    assert [line["spark_rows"] for line in lines if "spark_rows" in line] == [3 * ROWS]
    t = admin.load_table("ops.events")
    assert table_rows(t) == model({"ingest": 20, "spark": 3})
    assert_linear_history(t)


if __name__ == "__main__":
    worker_main(sys.argv[1], json.loads(sys.argv[2]))
