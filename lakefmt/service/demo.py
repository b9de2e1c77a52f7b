"""``lakefmt serve --demo``: a streaming writer making small files, and a service compacting them.

The writer appends a few hundred Artemis-like rows to ``demo.events`` every second
(one small file per mission), as a streaming ingest does. The demo table compacts
eagerly (``compaction.min-age-seconds = 0``, 1 MiB target) and the demo schedule runs
compaction every 20 seconds, so within a minute the API (``/api/v1/candidates``,
``/api/v1/history``), ``/metrics`` and ``lakefmt report demo.events`` show small files
piling up and being compacted. Real tables wait for sealed partitions (COMPACT-5).

A demo left running must not fill the disk with history (spec/service.md SERVICE-30):
the demo schedule also compacts manifests every minute, expires snapshots every 15
seconds keeping the newest :data:`RETAIN_SNAPSHOTS`, and removes orphans (among them
the metadata files that fell out of the table's short metadata log) every minute, with a
one-minute grace. Only the live data grows, by the rows the writer appends.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING

import pyarrow as pa

from lakefmt.errors import LakefmtError
from lakefmt.service.logs import LOGGER_NAME, log_event

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog
    from lakefmt.service.daemon import CompactionService

TABLE = "demo.events"
RETAIN_SNAPSHOTS = 30  # about half a minute of time travel at one append a second
DEMO_ENVIRON = {"LAKEFMT_COMPACTION_SCHEDULE": "*/20 * * * * *",
                "LAKEFMT_MANIFESTS_ENABLED": "true", "LAKEFMT_MANIFESTS_SCHEDULE": "10 * * * * *",
                "LAKEFMT_EXPIRE_ENABLED": "true", "LAKEFMT_EXPIRE_SCHEDULE": "*/15 * * * * *",
                "LAKEFMT_EXPIRE_OLDER_THAN": "0s", "LAKEFMT_EXPIRE_RETAIN_LAST": str(RETAIN_SNAPSHOTS),
                "LAKEFMT_ORPHANS_ENABLED": "true", "LAKEFMT_ORPHANS_SCHEDULE": "30 * * * * *",
                "LAKEFMT_ORPHANS_OLDER_THAN": "1m",
                "LAKEFMT_SERVICE_GAUGE_REFRESH_SECONDS": "5"}
PROPERTIES = {"compaction.min-age-seconds": "0", "compaction.target-file-size-bytes": str(1 << 20),
              "write.target-file-size-bytes": str(1 << 20), "write.metadata.previous-versions-max": "10"}
SCHEMA = pa.schema([pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("mission_id", pa.int32()),
                    pa.field("payload_id", pa.int64()), pa.field("value", pa.float64())])
logger = logging.getLogger(LOGGER_NAME)


def batch(rows: int, rng: random.Random) -> pa.Table:
    now_us = time.time_ns() // 1000
    return pa.table({
        "ts": pa.array([now_us - rng.randrange(1_000_000) for _ in range(rows)], pa.timestamp("us", tz="UTC")),
        "mission_id": pa.array([rng.randrange(3) for _ in range(rows)], pa.int32()),
        "payload_id": pa.array([rng.randrange(12) for _ in range(rows)], pa.int64()),
        "value": pa.array([rng.random() * 100 for _ in range(rows)], pa.float64()),
    }, schema=SCHEMA)


def create_demo_table(catalog: Catalog) -> None:
    """Create ``demo.events`` unless it exists (a restarted demo keeps its table)."""
    if not catalog.table_exists(TABLE):
        catalog.create_table(TABLE, SCHEMA, partition_by=["mission_id"], sort_by=["payload_id"],
                             properties=PROPERTIES)


def start_demo_writer(service: CompactionService, *, interval: float = 1.0, rows: int = 300) -> threading.Thread:
    """Create ``demo.events`` if needed and append to it every ``interval`` seconds until the service stops."""
    catalog = service.catalog
    create_demo_table(catalog)

    def write() -> None:
        rng = random.Random(7)
        table = catalog.load_table(TABLE)
        appends = 0
        while not service.stopping:
            try:
                table.append(batch(rows, rng))
                appends += 1
            except (LakefmtError, OSError) as exc:
                log_event(logger, "demo.append-failed", level=logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            if appends % 30 == 1:
                log_event(logger, "demo.appended", table=TABLE, appends=appends)
            time.sleep(interval)

    thread = threading.Thread(target=write, name="lakefmt-demo-writer", daemon=True)
    thread.start()
    log_event(logger, "demo.started", table=TABLE, interval_seconds=interval, rows_per_append=rows)
    return thread
