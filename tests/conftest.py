"""Shared fixtures: real catalogs on a local folder and on a moto S3 server on loopback."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import lakefmt
from lakefmt import parquet_pages
from lakefmt.cli import main

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, str]]:
    """A moto S3-compatible HTTP server on a free loopback port, for the whole session."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
               "client_kwargs": {"region_name": "us-east-1"}}
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="lakefmt-tests")
    yield {"endpoint_url": endpoint, "bucket": "lakefmt-tests", "options": options}  # type: ignore[dict-item]
    server.stop()


def make_catalog(kind: str, tmp_path: Path, s3: dict | None = None) -> lakefmt.Catalog:
    if kind == "local":
        return lakefmt.Catalog(str(tmp_path / "warehouse"), create=True)
    assert s3 is not None
    prefix = f"s3://{s3['bucket']}/{uuid.uuid4().hex}"
    return lakefmt.Catalog(prefix, catalog_path=str(tmp_path / "catalog.duckdb"),
                           storage_options=dict(s3["options"]), create=True)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> lakefmt.Catalog:
    """A fresh catalog, once on a local warehouse folder and once on the S3 server."""
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    return make_catalog(request.param, tmp_path, s3)


@pytest.fixture
def local_catalog(tmp_path: Path) -> lakefmt.Catalog:
    return make_catalog("local", tmp_path)


DOWNLINKS_SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("mission_id", pa.int32()),
    pa.field("payload_id", pa.int64()),
    pa.field("sensor_kind", pa.string()),
    pa.field("value", pa.float64()),
])


def downlinks(n: int, *, seed: int = 0, start_us: int = 1_767_225_600_000_000, missions: int = 3,
              payloads: int = 8, step_us: int = 60_000_000) -> pa.Table:
    """Deterministic Artemis-like rows: ``n`` rows starting 2026-01-01, one per ``step_us``."""
    import random

    rng = random.Random(seed)
    ts = [start_us + i * step_us for i in range(n)]
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "mission_id": pa.array([rng.randrange(missions) for _ in range(n)], pa.int32()),
        "payload_id": pa.array([rng.randrange(payloads) for _ in range(n)], pa.int64()),
        "sensor_kind": pa.array([rng.choice(["imu", "thermal", "rad", "cam"]) for _ in range(n)]),
        "value": pa.array([rng.random() * 100 for _ in range(n)], pa.float64()),
    }, schema=DOWNLINKS_SCHEMA)


def rows(table: pa.Table) -> list[tuple]:
    """A table's rows as a sorted list of tuples: compare tables as multisets."""
    names = table.column_names
    return sorted((tuple(r[n] for n in names) for r in table.to_pylist()), key=repr)


def data_files_on_disk(table: lakefmt.Table) -> set[str]:
    """Every Parquet file under the table's data folder, relative to the table location."""
    root = Path(table.location)
    return {str(p.relative_to(root)) for p in (root / "data").rglob("*.parquet")}


def live_paths(table: lakefmt.Table) -> set[str]:
    """The data files of the table's current snapshot, relative to its location."""
    table.refresh()
    return {f.path for f in table.plan_files()}


class Cli:
    """Runs ``lakefmt --warehouse <tmp> ...`` in-process and captures its output."""

    def __init__(self, warehouse: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.warehouse = warehouse
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(["--warehouse", str(self.warehouse), *argv])
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, err
        assert err == ""
        return out


@pytest.fixture
def replaced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the rows handed to the decoder in pages of nulls (READ-15)."""
    count = [0]
    null_page = parquet_pages._null_page

    def counting(n: int, slot: int) -> bytes | None:
        page = null_page(n, slot)
        count[0] += n if page is not None else 0
        return page

    monkeypatch.setattr(parquet_pages, "_null_page", counting)
    return count
