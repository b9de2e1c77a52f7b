"""``lakefmt demo``: the small-files problem and its fix, end to end, in about a minute.

It simulates the Artemis cold archive that spec/compaction.md is designed for: a downlink
pipeline commits every 30 simulated seconds, each commit writing one small file per
(day, mission) partition, until the table holds thousands of small files. It then
measures what every query pays (files planned, planning time, a selective query's
time), compacts the data files (sort or Z-order) and the manifests, measures again,
and shows that a reader pinned to the pre-compaction snapshot still reads exactly
the same rows.

Run by ``lakefmt demo`` (:mod:`lakefmt.cli.demo`) through :func:`run_demo`. Re-runnable: an
existing demo table is dropped (with its files).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.catalog import Catalog
from lakefmt.cli.progress import group_progress, progress_bar
from lakefmt.compaction import checksum, planning_seconds
from lakefmt.compaction.planner import format_bytes
from lakefmt.table import Table

SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("mission_id", pa.int32()),
    pa.field("payload_id", pa.int64()),
    pa.field("sensor_kind", pa.string()),
    pa.field("seq", pa.int64()),
    pa.field("value", pa.float64()),
])
SENSOR_KINDS = pa.array(["cam", "imu", "rad", "spectro", "thermal"])
COMMIT_SECONDS = 30
START = datetime(2026, 3, 15, 22, 30, tzinfo=timezone.utc)


def simulated_commit(index: int, *, rows: int, missions: int, payloads: int, seed: int) -> pa.Table:
    """The downlinks of one 30-second window: every mission, every payload, random sensors."""
    start_us = int(START.timestamp() * 1_000_000) + index * COMMIT_SECONDS * 1_000_000

    def uniform(salt: int) -> pa.Array:
        return pc.random(rows, initializer=seed * 1_000_003 + index * 17 + salt)

    def scaled(salt: int, n: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(uniform(salt), n)), pa.int64())

    ts = pc.add(scaled(1, COMMIT_SECONDS * 1_000_000), start_us)
    return pa.table({
        "ts": pc.cast(ts, pa.timestamp("us", tz="UTC")),
        "mission_id": pc.cast(scaled(2, missions), pa.int32()),
        "payload_id": scaled(3, payloads),
        "sensor_kind": SENSOR_KINDS.take(scaled(4, len(SENSOR_KINDS))),
        "seq": pa.array(range(index * rows, (index + 1) * rows), pa.int64()),
        "value": pc.multiply(uniform(5), 100.0),
    }, schema=SCHEMA)


def measure(table: Table, query: str, snapshot_id: int | None = None) -> dict[str, Any]:
    """Files, manifests and the cost of planning and running ``query``, as a new reader would pay it."""
    table.refresh()
    snap = table.metadata.current_snapshot if snapshot_id is None else table.snapshot(snapshot_id)
    assert snap is not None
    planning = planning_seconds(table, query)
    plan = table.scan(query, snapshot_id=snap.snapshot_id).plan()
    started = time.perf_counter()
    result = table.scan(query, snapshot_id=snap.snapshot_id).to_arrow()
    query_seconds = time.perf_counter() - started
    return {"files": int(snap.summary.get("total-data-files", 0)),
            "bytes": int(snap.summary.get("total-files-size", 0)),
            "manifests": plan.manifests_total, "planned": len(plan.tasks), "planning": planning,
            "query": query_seconds + planning, "rows": result.num_rows}


def _print_figures(title: str, m: dict[str, Any], query: str) -> None:
    print(f"  {title}")
    print(f"    data files        {m['files']:>8,}   ({format_bytes(m['bytes'])})")
    print(f"    manifests         {m['manifests']:>8,}")
    print(f"    query             {query}")
    print(f"    files planned     {m['planned']:>8,}")
    print(f"    planning time     {m['planning'] * 1000:>8.1f} ms (cold manifest cache)")
    print(f"    query time        {m['query'] * 1000:>8.1f} ms ({m['rows']:,} rows)")


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; returns 0 when the pinned reader and the compacted table read the same rows."""
    warehouse = getattr(args, "warehouse", None) or "warehouse"
    catalog = Catalog(warehouse, catalog_path=getattr(args, "catalog_path", None),
                      storage_options=getattr(args, "storage_options", None) or None, create=True)
    name = args.table
    if catalog.table_exists(name):
        catalog.drop_table(name, purge=True)
    table = catalog.create_table(name, schema=SCHEMA, partition_by=["day(ts)", "mission_id"],
                                 sort_by=["payload_id", "sensor_kind"])
    total_started = time.perf_counter()
    end = START.timestamp() + args.commits * COMMIT_SECONDS
    print(f"lakefmt demo: simulated Artemis ingest into {catalog.warehouse}")
    print(f"  table {name}: partitioned by day(ts), mission_id; sorted by payload_id, sensor_kind")
    print(f"[1/4] ingest: {args.commits} commits, one per {COMMIT_SECONDS} simulated seconds "
          f"({START:%Y-%m-%d %H:%M} -> {datetime.fromtimestamp(end, timezone.utc):%Y-%m-%d %H:%M} UTC), "
          f"{args.rows_per_commit:,} rows each")
    started = time.perf_counter()
    bar = progress_bar(args.commits, "commits")
    for i in range(args.commits):
        table.append(simulated_commit(i, rows=args.rows_per_commit, missions=args.missions,
                                      payloads=args.payloads, seed=args.seed))
        bar.update(1)
    bar.close()
    print(f"  ingest took {time.perf_counter() - started:.1f} s")
    query = f"mission_id = {min(3, args.missions - 1)} AND payload_id = {min(5, args.payloads - 1)} " \
            "AND sensor_kind = 'imu'"
    before = measure(table, query)
    pinned = table.metadata.current_snapshot_id
    print("[2/4] before compaction")
    _print_figures("the table as ingest left it:", before, query)
    all_before = checksum(table.scan().to_arrow())

    partitions = max(1, len({f.partition for f in table.plan_files()}))
    target = max(64 * 1024, before["bytes"] // partitions // 12)
    columns = ["payload_id", "sensor_kind"]
    print("[3/4] compacting manifests first (metadata only), then data files: "
          f"{args.strategy} by {', '.join(columns)}; target file size {format_bytes(target)} "
          "(scaled to this small table), min age 0 s (the data is simulated)")
    started = time.perf_counter()
    manifests = table.compaction.rewrite_manifests(probe_filter=query)
    print("  " + manifests.summary().replace("\n", "\n  "))
    bar = progress_bar(0, "groups")
    kwargs: dict[str, Any] = {"sort_by": columns} if args.strategy == "sort" else {"columns": columns}
    result = table.compaction.run(args.strategy, min_age_seconds=0, target_file_size=target,
                                  max_concurrent_groups=max(1, min(4, os.cpu_count() or 2)),
                                  progress=group_progress(bar), **kwargs)
    bar.close()
    print("  " + result.summary().replace("\n", "\n  "))
    print(f"  compaction took {time.perf_counter() - started:.1f} s")

    after = measure(table, query)
    print("[4/4] after compaction")
    _print_figures("the compacted table:", after, query)
    ratio = (lambda a, b: f"{a / b:.1f}x" if b > 0 else "n/a")
    print(f"  files {before['files']:,} -> {after['files']:,} ({ratio(before['files'], after['files'])} fewer); "
          f"files planned {before['planned']:,} -> {after['planned']:,}; "
          f"planning {ratio(before['planning'], after['planning'])} faster; "
          f"query {ratio(before['query'], after['query'])} faster")
    pinned_rows = checksum(table.scan(snapshot_id=pinned).to_arrow())
    current_rows = checksum(table.scan().to_arrow())
    same = pinned_rows == all_before == current_rows and before["rows"] == after["rows"]
    print(f"  reader pinned to snapshot {pinned} (before compaction): {pinned_rows.rows:,} rows, "
          f"{'the same multiset as before compaction' if pinned_rows == all_before else 'DIFFERENT ROWS'}; "
          f"current snapshot: {'same rows' if current_rows == all_before else 'DIFFERENT ROWS'}")
    print(f"done in {time.perf_counter() - total_started:.1f} s")
    return 0 if same else 1
