"""The hard benchmark dataset: telemetry rows with high-cardinality keys and a wide string column.

Every benchmark that measures the small-files loop (small appends, compaction, selective
reads) runs on this dataset beside the original Artemis-like one, because a result that
holds only on easy data is not a result. Its columns:

==============  ==================  ==================================================
column          type                values
==============  ==================  ==================================================
``ts``          timestamp[us, UTC]  random within each file's ingest window, sorted
                                    within the file
``mission_id``  int32               8 values
``payload_id``  int64               2,000 values
``sensor_kind`` string              20 values
``value``       float64             normal(0, 1)
``payload``     string              200 bytes: a 40-byte template per sensor kind and
                                    160 random hex characters
==============  ==================  ==================================================

Shapes (:data:`SHAPES`): ``1mb`` is 1,000 files of 10,000 rows (about 1 MB each as
written by pyarrow with ZSTD) over 10 days; ``250kb`` is 4,000 files of 2,500 rows over
the same 10 days; ``tiny`` is 240 files of 250 rows in 3 day partitions. Files are ingest
windows in time order, so a ``day(ts)`` partitioning puts 100 (``1mb``) or 400 (``250kb``)
files in each day. Rows are a pure function of ``(seed, file index)``: every competitor in
a run gets the same bytes.

The selective query (:data:`QUERY`) asks for one payload, one sensor kind and one day:
about 19 rows of the ``1mb`` shape's 10 million.

Example:
    >>> from benchmarks.telemetry_data import SHAPES, file_rows
    >>> rows = file_rows(0, SHAPES["1mb"])
    >>> rows.num_rows
    10000
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAY_US = 86_400_000_000
MISSIONS = 8
PAYLOADS = 2_000
SENSOR_KINDS = [f"sensor_{i:02d}" for i in range(20)]
TEMPLATE_BYTES = 40
HEX_CHARS = 160

SCHEMA = pa.schema([
    ("ts", pa.timestamp("us", tz="UTC")),
    ("mission_id", pa.int32()),
    ("payload_id", pa.int64()),
    ("sensor_kind", pa.string()),
    ("value", pa.float64()),
    ("payload", pa.string()),
])


@dataclass(frozen=True)
class Shape:
    """How many files of how many rows, over how many days."""

    name: str
    files: int
    rows_per_file: int
    days: int

    @property
    def rows(self) -> int:
        return self.files * self.rows_per_file


SHAPES = {
    "1mb": Shape("1mb", 1_000, 10_000, 10),
    "250kb": Shape("250kb", 4_000, 2_500, 10),
    "tiny": Shape("tiny", 240, 250, 3),
}

# One payload, one sensor kind, one day (the second): ~19 rows of the 1mb shape.
QUERY = ("payload_id = 1234 AND sensor_kind = 'sensor_07' "
         "AND ts >= '2026-01-02T00:00:00+00:00' AND ts < '2026-01-03T00:00:00+00:00'")
QUERY_SQL = ("payload_id = 1234 AND sensor_kind = 'sensor_07' "
             "AND ts >= TIMESTAMPTZ '2026-01-02 00:00:00+00' AND ts < TIMESTAMPTZ '2026-01-03 00:00:00+00'")

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_TEMPLATES = np.frombuffer(b"".join(
    f"kind={kind};fmt=v2;unit=si;src=telemetry:".ljust(TEMPLATE_BYTES, "_")[:TEMPLATE_BYTES].encode()
    for kind in SENSOR_KINDS), dtype=np.uint8).reshape(len(SENSOR_KINDS), TEMPLATE_BYTES)


def _payloads(rng: np.random.Generator, kinds: np.ndarray) -> pa.Array:
    """200-byte strings: the sensor kind's template, then 160 random hex characters."""
    n = len(kinds)
    nibbles = rng.integers(0, 16, size=(n, HEX_CHARS), dtype=np.uint8)
    data = np.concatenate([_TEMPLATES[kinds], _HEX[nibbles]], axis=1)
    width = TEMPLATE_BYTES + HEX_CHARS
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


def file_rows(index: int, shape: Shape, *, seed: int = 7) -> pa.Table:
    """The rows of file ``index`` (0-based) of ``shape``: one ingest window, sorted by ``ts``."""
    rng = np.random.default_rng([seed, index])
    n = shape.rows_per_file
    window = shape.days * DAY_US // shape.files
    start = int(START.timestamp() * 1_000_000) + index * window
    ts = np.sort(rng.integers(start, start + window, size=n, dtype=np.int64))
    kinds = rng.integers(0, len(SENSOR_KINDS), size=n)
    return pa.Table.from_arrays([
        pa.array(ts, type=pa.timestamp("us", tz="UTC")),
        pa.array(rng.integers(0, MISSIONS, size=n, dtype=np.int32)),
        pa.array(rng.integers(0, PAYLOADS, size=n, dtype=np.int64)),
        pa.DictionaryArray.from_arrays(pa.array(kinds, pa.int32()), pa.array(SENSOR_KINDS)).cast(pa.string()),
        pa.array(rng.normal(0.0, 1.0, size=n)),
        _payloads(rng, kinds),
    ], schema=SCHEMA)


def all_rows(shape: Shape, *, seed: int = 7) -> pa.Table:
    """Every file's rows, in file order (for checking results, not for writing)."""
    return pa.concat_tables(file_rows(i, shape, seed=seed) for i in range(shape.files))
