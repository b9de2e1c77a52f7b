"""Spark through a catalog server (docs/spark.md, *A catalog server*; spec/catalog-http.md CATHTTP-14): the
``catalog`` option takes the server's URL and ``token`` its bearer token; ``read_native`` and
``write_native`` take a catalog opened on the URL. The server is the service's app on a loopback port
over a real catalog file; the driver's environment holds no token, so every request carries the one given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakefmt

pytest.importorskip("pyspark", minversion="4.1")  # before importing lakefmt.spark (arrow_udf is 4.1+)
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from lakefmt.catalog_client import TOKEN_ENV, RemoteCatalog
from lakefmt.spark import read_native, write_native
from tests.service.conftest import TOKEN
from tests.service.test_catalog_api import serve  # noqa: F401 - a fixture

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("at", pa.time64("us"))])  # `time`: written through format("lakefmt")


def test_spark_reads_and_writes_through_a_catalog_server(spark: Any, serve: Any, tmp_path: Path):  # noqa: F811
    """CATHTTP-14: format("lakefmt") with ``catalog`` = URL and ``token``; read_native and write_native with a
    RemoteCatalog, whose token also reaches the format("lakefmt") path write_native takes for a ``time`` column."""
    # spec: CATHTTP-14
    if TOKEN_ENV in os.environ:  # Spark's Python workers inherited it: the test would prove nothing
        pytest.skip(f"${TOKEN_ENV} is set: the token must come from the options and the catalog only")
    served = serve(lakefmt.Catalog(str(tmp_path / "wh"), create=True))
    url = served.http.url
    remote = RemoteCatalog(url, token=TOKEN)
    remote.create_table("ops.events", schema=SCHEMA)
    options = {"catalog": url, "token": TOKEN}

    spark.createDataFrame([(1, 10), (2, 20)], "id bigint, at bigint").write.format("lakefmt").options(
        **options).mode("append").save("ops.events")
    assert write_native(spark.createDataFrame([(3, 30)], "id bigint, at bigint"), "ops.events",
                        catalog=remote) is None  # a `time` column: through format("lakefmt"), with the token

    t = served.catalog.load_table("ops.events")
    assert [s.operation for s in t.snapshots()] == ["append", "append"]
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    read = spark.read.format("lakefmt").options(**options).load("ops.events")
    assert sorted((r.id, r.at) for r in read.collect()) == [(1, 10), (2, 20), (3, 30)]
    native = read_native(spark, "ops.events", catalog=remote, columns=["id"], filter="id >= 2")
    assert sorted(r.id for r in native.collect()) == [2, 3]
