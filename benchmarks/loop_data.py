"""The two datasets every benchmark of the small-files loop runs on, side by side.

* ``artemis``: the original Artemis-like downlinks (:mod:`lakefmt.demo` schema): ``payload_id``
  with 200 values, ``sensor_kind`` with 5 short strings, a unique ``seq`` and a random ``value``;
  narrow rows (~13.5 bytes each as written).
* ``telemetry``: the hard dataset of :mod:`benchmarks.telemetry_data`: 2,000 payloads, 20 sensor
  kinds and a 200-byte ``payload`` string per row.

Both are partitioned by ``day(ts)``; file ``index`` of a run of ``files`` files over ``days`` days
is one ingest window in time order, a pure function of its arguments, so every competitor in a
run reads and writes the same rows. Each dataset names its selective query (one payload, one
sensor kind, one day) in lakefmt's filter syntax and as a DuckDB ``WHERE`` clause, and the columns
Z-order and sort cluster on.

Example:
    >>> from benchmarks.loop_data import DATASETS
    >>> DATASETS["telemetry"].rows(0, files=100, rows=10, days=10).num_rows
    10
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import telemetry_data
from benchmarks.core_common import loadavg  # noqa: F401 - scripts import it from here too
from lakefmt import demo

MiB = 1024 * 1024
CLUSTER_COLUMNS = ["payload_id", "sensor_kind"]  # Z-order columns and sort keys, both datasets


@dataclass(frozen=True)
class CompactionShape:
    """A small-files table for compaction: ``files`` files of ``rows`` rows over ``days`` day partitions."""

    files: int
    rows: int
    days: int


@dataclass(frozen=True)
class Dataset:
    """One dataset of the loop: its schema, its rows, its selective query and its compaction shapes."""

    name: str
    schema: pa.Schema
    make_rows: Callable[[int, int, int, int], pa.Table] = field(repr=False)
    query: str
    query_sql: str
    target_mib: int
    shapes: dict[str, CompactionShape]
    quick_shapes: dict[str, CompactionShape]

    def rows(self, index: int, *, files: int, rows: int, days: int) -> pa.Table:
        """The rows of ingest file ``index`` of ``files`` files of ``rows`` rows over ``days`` days."""
        return self.make_rows(index, files, rows, days)


def with_day(table: pa.Table) -> pa.Table:
    """``table`` plus a ``day`` date column from ``ts``: the partition column a Delta table needs."""
    return table.append_column("day", pc.cast(table.column("ts"), pa.date32()))


# -- artemis ------------------------------------------------------------------------------------------

ARTEMIS_DAY0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
ARTEMIS_PAYLOADS = 200


def artemis_rows(index: int, files: int, rows: int, days: int) -> pa.Table:
    """Artemis-like downlinks of one ingest window (files are in time order, ``files // days`` per day)."""
    per_day = max(1, files // days)
    day, slot = divmod(index, per_day)
    window_us = 86_400_000_000 // per_day
    start_us = int((ARTEMIS_DAY0 + timedelta(days=day)).timestamp() * 1_000_000) + slot * window_us

    def uniform(salt: int) -> pa.Array:
        return pc.random(rows, initializer=index * 1_000_003 + salt)

    def scaled(salt: int, n: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(uniform(salt), n)), pa.int64())

    return pa.table({
        "ts": pc.cast(pc.add(scaled(1, window_us), start_us), pa.timestamp("us", tz="UTC")),
        "mission_id": pc.cast(scaled(2, 8), pa.int32()),
        "payload_id": scaled(3, ARTEMIS_PAYLOADS),
        "sensor_kind": demo.SENSOR_KINDS.take(scaled(4, len(demo.SENSOR_KINDS))),
        "seq": pa.array(range(index * rows, (index + 1) * rows), pa.int64()),
        "value": pc.multiply(uniform(5), 100.0),
    }, schema=demo.SCHEMA)


def _artemis_query() -> tuple[str, str]:
    lo = (ARTEMIS_DAY0 + timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    hi = (ARTEMIS_DAY0 + timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S")
    where = "payload_id = 17 AND sensor_kind = 'imu'"
    return (f"ts >= TIMESTAMPTZ '{lo}' AND ts < TIMESTAMPTZ '{hi}' AND {where}",
            f"ts >= TIMESTAMPTZ '{lo}+00' AND ts < TIMESTAMPTZ '{hi}+00' AND {where}")


# -- telemetry ----------------------------------------------------------------------------------------

def telemetry_rows(index: int, files: int, rows: int, days: int) -> pa.Table:
    return telemetry_data.file_rows(index, telemetry_data.Shape("run", files, rows, days))


def _shape(s: telemetry_data.Shape) -> CompactionShape:
    return CompactionShape(s.files, s.rows_per_file, s.days)


DATASETS: dict[str, Dataset] = {
    "artemis": Dataset(
        "artemis", demo.SCHEMA, artemis_rows, *_artemis_query(), target_mib=16,
        shapes={"1mb": CompactionShape(1000, 75_000, 10), "250kb": CompactionShape(4000, 19_000, 10),
                "tiny": CompactionShape(240, 1_000, 3), "mem": CompactionShape(1000, 75_000, 1)},
        quick_shapes={"1mb": CompactionShape(60, 75_000, 3), "250kb": CompactionShape(240, 19_000, 3),
                      "tiny": CompactionShape(240, 1_000, 3), "mem": CompactionShape(64, 75_000, 1)}),
    "telemetry": Dataset(
        "telemetry", telemetry_data.SCHEMA, telemetry_rows, telemetry_data.QUERY, telemetry_data.QUERY_SQL,
        target_mib=32,
        shapes={**{k: _shape(v) for k, v in telemetry_data.SHAPES.items()},
                "mem": CompactionShape(1000, 10_000, 1)},
        quick_shapes={"1mb": CompactionShape(60, 10_000, 3), "250kb": CompactionShape(240, 2_500, 3),
                      "tiny": _shape(telemetry_data.SHAPES["tiny"]), "mem": CompactionShape(64, 10_000, 1)}),
}


def add_dataset_argument(parser: argparse.ArgumentParser, default: str = "both") -> None:
    parser.add_argument("--dataset", choices=["artemis", "telemetry", "both"], default=default,
                        help=f"which dataset(s) to run on (default: {default})")


def selected(choice: str) -> list[Dataset]:
    """The datasets named by a ``--dataset`` value, telemetry (the hard one) first."""
    names = ["telemetry", "artemis"] if choice == "both" else [choice]
    return [DATASETS[n] for n in names]

