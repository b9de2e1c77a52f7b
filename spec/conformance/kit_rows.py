"""Deterministic rows for the kit: every type, with the edge values readers get wrong."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa

UTC = dt.timezone.utc
EPOCH = dt.datetime(2026, 1, 1)

TYPES_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("b", pa.bool_()),
    pa.field("i", pa.int32()),
    pa.field("l", pa.int64()),
    pa.field("f", pa.float32()),
    pa.field("d", pa.float64()),
    pa.field("dec", pa.decimal128(9, 2)),
    pa.field("big", pa.decimal256(40, 4)),
    pa.field("day", pa.date32()),
    pa.field("tod", pa.time64("us")),
    pa.field("ts", pa.timestamp("us")),
    pa.field("tz", pa.timestamp("us", tz="UTC")),
    pa.field("s", pa.string()),
    pa.field("bin", pa.binary()),
])

# Row k of the edge rows sets each column to its k-th edge value (cycled).
EDGES = {
    "b": [True, False],
    "i": [-2**31, 2**31 - 1, 0, -1],
    "l": [-2**63, 2**63 - 1, 0, 1],
    "f": [float("nan"), -0.0, float("inf"), float("-inf"), 1.5],
    "d": [float("nan"), -0.0, 0.0, float("-inf"), 1e300, -2.5],
    "dec": [Decimal("-9999999.99"), Decimal("9999999.99"), Decimal("0.00"), Decimal("10.65")],
    "big": [Decimal("-" + "9" * 36 + ".9999"), Decimal("9" * 36 + ".9999"), Decimal("0.0001")],
    "day": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31), dt.date(1970, 1, 1)],
    "tod": [dt.time(0, 0), dt.time(23, 59, 59, 999999), dt.time(12, 0, 0, 1)],
    "ts": [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1969, 12, 31, 23, 59, 59, 999999)],
    "tz": [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
           dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
    "s": ["", "aé😀bc", "\u0000nul", "Z", "zzzz", "ab'quote"],
    "bin": [b"", b"\x00", b"\xff\xfe", b"\x00\x01\x02\x03"],
}


def typed_rows(n: int, rng: random.Random, *, first_id: int = 0, edges: int = 6) -> pa.Table:
    """``n`` rows of :data:`TYPES_SCHEMA`: ``edges`` rows of edge values, then random ones, a null every 7th."""
    cols: dict[str, list] = {name: [] for name in TYPES_SCHEMA.names}
    for k in range(n):
        cols["id"].append(first_id + k)
        edge = k < edges
        null = k % 7 == 6
        values = {
            "b": rng.random() < 0.5,
            "i": rng.randrange(-1000, 1000),
            "l": rng.randrange(-10**12, 10**12),
            "f": float(rng.randrange(-400, 400)) / 4,
            "d": rng.uniform(-100, 100),
            "dec": Decimal(rng.randrange(-100000, 100000)) / 100,
            "big": Decimal(rng.randrange(-10**20, 10**20)) / 10000,
            "day": dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(-400, 400)),
            "tod": dt.time(rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6)),
            "ts": EPOCH + dt.timedelta(microseconds=rng.randrange(-10**13, 10**13)),
            "tz": (EPOCH + dt.timedelta(microseconds=rng.randrange(-10**13, 10**13))).replace(tzinfo=UTC),
            "s": "".join(rng.choice("abcxyzé") for _ in range(rng.randrange(1, 6))),
            "bin": bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5))),
        }
        for name, value in values.items():
            if edge:
                value = EDGES[name][k % len(EDGES[name])]
            cols[name].append(None if null and not edge else value)
    return pa.Table.from_pydict(cols, schema=TYPES_SCHEMA)


EVENTS_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("kind", pa.string()),
    pa.field("n", pa.int32()),
    pa.field("v", pa.float64()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
])

KINDS = ["imu", "thermal", "rad", "cam"]


def events(n: int, rng: random.Random, *, first_id: int = 0, start: dt.datetime = EPOCH, step_minutes: int = 37,
           null_every: int = 0) -> pa.Table:
    """``n`` simple rows: ids from ``first_id``, a kind, a small int, a double and a UTC time."""
    rows = {"id": [], "kind": [], "n": [], "v": [], "ts": []}
    for k in range(n):
        null = null_every and k % null_every == null_every - 1
        rows["id"].append(first_id + k)
        rows["kind"].append(None if null else rng.choice(KINDS))
        rows["n"].append(None if null else rng.randrange(0, 50))
        rows["v"].append(None if null else round(rng.uniform(0, 100), 3))
        rows["ts"].append((start + dt.timedelta(minutes=step_minutes * (first_id + k))).replace(tzinfo=UTC))
    return pa.Table.from_pydict(rows, schema=EVENTS_SCHEMA)
