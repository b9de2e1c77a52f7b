"""Helpers for compaction tests: tables made of many small appends."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks

REPO = Path(__file__).resolve().parents[2]


def small_files_table(catalog: lakefmt.Catalog, name: str = "artemis.downlinks", *, appends: int = 8,
                      rows: int = 1200, partition_by: Sequence[str] = ("mission_id",),
                      sort_by: Sequence[str] = ("payload_id", "sensor_kind"),
                      properties: dict[str, str] | None = None) -> lakefmt.Table:
    """A table with ``appends`` small commits, each writing one file per mission."""
    t = catalog.create_table(name, schema=DOWNLINKS_SCHEMA, partition_by=list(partition_by),
                             sort_by=list(sort_by), properties=properties)
    for i in range(appends):
        t.append(downlinks(rows, seed=i, start_us=1_767_225_600_000_000 + i * rows * 60_000_000))
    return t


ALL_TYPES = pa.schema([
    pa.field("p", pa.int32()),
    pa.field("b", pa.bool_()),
    pa.field("i", pa.int32()),
    pa.field("l", pa.int64()),
    pa.field("f", pa.float32()),
    pa.field("d", pa.float64()),
    pa.field("dec", pa.decimal128(10, 2)),
    pa.field("wide", pa.decimal256(40, 4)),
    pa.field("day", pa.date32()),
    pa.field("t", pa.time64("us")),
    pa.field("ts", pa.timestamp("us")),
    pa.field("tstz", pa.timestamp("us", tz="UTC")),
    pa.field("s", pa.string()),
    pa.field("bin", pa.binary()),
])


def all_types_rows(n: int, seed: int) -> pa.Table:
    """Rows with every lakefmt type and nulls in every column but the partition column."""
    import random

    rng = random.Random(seed)

    def maybe(v: object) -> object:
        return None if rng.random() < 0.15 else v

    cols: dict[str, list] = {name: [] for name in ALL_TYPES.names}
    for _ in range(n):
        cols["p"].append(rng.randrange(2))
        cols["b"].append(maybe(rng.random() < 0.5))
        cols["i"].append(maybe(rng.randrange(-1000, 1000)))
        cols["l"].append(maybe(rng.randrange(-(2**62), 2**62)))
        cols["f"].append(maybe(rng.choice([-1.5, 0.0, 2.25, 1e30])))
        cols["d"].append(maybe(rng.uniform(-1e6, 1e6)))
        cols["dec"].append(maybe(decimal.Decimal(rng.randrange(-10**9, 10**9)).scaleb(-2)))
        cols["wide"].append(maybe(decimal.Decimal(rng.randrange(-10**35, 10**35)).scaleb(-4)))
        cols["day"].append(maybe(dt.date(1960, 1, 1) + dt.timedelta(days=rng.randrange(40000))))
        cols["t"].append(maybe(dt.time(rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6))))
        cols["ts"].append(maybe(dt.datetime(2026, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**12))))
        cols["tstz"].append(maybe(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
                                  + dt.timedelta(microseconds=rng.randrange(10**12))))
        cols["s"].append(maybe(rng.choice(["", "a", "é", "zz", "payload-" + str(rng.randrange(50))])))
        cols["bin"].append(maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(5)))))
    return pa.table(cols, schema=ALL_TYPES)


def run_python(code: str, *, env: dict[str, str] | None = None, wait: bool = True,
               timeout: float = 120) -> subprocess.Popen | subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python process with the repository importable."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **(env or {})}
    args = [sys.executable, "-c", code]
    if not wait:
        return subprocess.Popen(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout, check=False)
