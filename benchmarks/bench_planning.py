"""Benchmark: planning selective filters on a table of 10,000 data files (issue 2, Benchmarks).

The table is partitioned by ``day(ts)`` and ``bucket(100, device_id)`` and filled like a
daily ingest: ``--days`` appends (default 100), each writing one day of rows into
``--buckets`` files (default 100): 10,000 files in 100 manifests. Planning reads only
the manifest list and manifests (READ-5); this benchmark measures it for filters of
different selectivity, cold (manifest cache cleared, as in a new process) and warm, and
counts the files planned. For scale, the same answer from data-file footers is timed
too: opening all 10,000 Parquet footers, which is what a planner without manifests
would have to do.

Usage:
    python benchmarks/bench_planning.py                     # ~1-2 minutes on 2 cores
    python benchmarks/bench_planning.py --days 20 --buckets 50   # quick
Results: benchmarks/results/planning-<UTC time>.json
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
import pyarrow.parquet as pq
from core_common import environment, markdown_table, median, write_results

import lakefmt
from lakefmt import manifest_cache

DAY_US = 86_400_000_000
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
ROWS_PER_DAY = 10_000
SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("device_id", pa.int64()), ("seq", pa.int64()),
                    ("value", pa.float64())])


def day_rows(day: int, rows: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    ts = sorted(START_US + day * DAY_US + rng.randrange(DAY_US) for _ in range(rows))
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "device_id": pa.array([rng.randrange(100_000) for _ in range(rows)], pa.int64()),
        "seq": pa.array(range(day * rows, (day + 1) * rows), pa.int64()),
        "value": pa.array([rng.random() for _ in range(rows)]),
    }, schema=SCHEMA)


def iso_day(day: int) -> str:
    import datetime as dt
    return (dt.date(2026, 1, 1) + dt.timedelta(days=day)).isoformat()


def build(cat: lakefmt.Catalog, days: int, buckets: int) -> lakefmt.Table:
    t = cat.create_table("bench.planning", schema=SCHEMA, partition_by=["day(ts)", f"bucket({buckets}, device_id)"])
    for day in range(days):
        t.append(day_rows(day, ROWS_PER_DAY, seed=day))
    return t


def queries(days: int, buckets: int) -> list[tuple[str, str, int | None]]:
    mid = days // 2
    device = 4242
    return [
        ("one day", f"ts >= '{iso_day(mid)}' AND ts < '{iso_day(mid + 1)}'", buckets),
        ("one device, all days", f"device_id = {device}", None),  # <= days: bounds prune some too
        ("one device, one day", f"device_id = {device} AND ts >= '{iso_day(mid)}' AND ts < '{iso_day(mid + 1)}'", 1),
        ("one hour of one day", f"ts >= '{iso_day(mid)}T10:00:00Z' AND ts < '{iso_day(mid)}T11:00:00Z'", buckets),
        ("seq point (column bounds only)", f"seq = {mid * ROWS_PER_DAY + 17}", None),
        ("no filter", "", days * buckets),
    ]


def measure(t: lakefmt.Table, text: str, runs: int) -> dict[str, Any]:
    scan = t.scan(filter=text or None)
    cold, warm = [], []
    plan = None
    for _ in range(runs):
        manifest_cache.clear()
        start = time.perf_counter()
        plan = scan.plan()
        cold.append(time.perf_counter() - start)
    for _ in range(runs):
        start = time.perf_counter()
        plan = scan.plan()
        warm.append(time.perf_counter() - start)
    assert plan is not None
    return {"files_planned": len(plan.tasks), "manifests_read": plan.manifests_read,
            "manifests_total": plan.manifests_total, "files_considered": plan.files_considered,
            "cold_median_s": median(cold), "warm_median_s": median(warm), "cold_s": cold, "warm_s": warm}


def footer_baseline(t: lakefmt.Table) -> dict[str, Any]:
    """What planning from data files would cost: list the data folder and read every footer."""
    root = Path(t.location) / "data"
    start = time.perf_counter()
    paths = [str(p) for p in root.rglob("*.parquet")]
    listed = time.perf_counter() - start
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(pq.read_metadata, paths))
    total = time.perf_counter() - start
    return {"files": len(paths), "list_s": listed, "list_and_footers_s": total,
            "us_per_footer": 1e6 * (total - listed) / max(len(paths), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=100)
    parser.add_argument("--buckets", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lakefmt-bench-planning-"))
    env = environment()
    try:
        cat = lakefmt.Catalog(str(root / "wh"), create=True)
        start = time.perf_counter()
        t = build(cat, args.days, args.buckets)
        built = time.perf_counter() - start
        t = cat.load_table("bench.planning")
        total_files = len(t.plan_files())
        print(f"built {total_files} files in {args.days} appends in {built:.0f}s", flush=True)
        results = []
        for label, text, expected in queries(args.days, args.buckets):
            r = measure(t, text, args.runs)
            if expected is not None and r["files_planned"] != expected:
                print(f"warning: {label}: planned {r['files_planned']} files, expected {expected}", flush=True)
            r.update(query=label, filter=text, expected_files=expected)
            results.append(r)
            print(f"{label:32s} {r['files_planned']:>6} files  cold {r['cold_median_s'] * 1000:7.1f} ms  "
                  f"warm {r['warm_median_s'] * 1000:7.1f} ms", flush=True)
        baseline = footer_baseline(t)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    rows = [[r["query"], f"`{r['filter']}`" if r["filter"] else "-", f"{r['files_planned']:,}",
             f"{r['manifests_read']}/{r['manifests_total']}", f"{r['cold_median_s'] * 1000:.1f}",
             f"{r['warm_median_s'] * 1000:.1f}"] for r in results]
    text = markdown_table(["query", "filter", "files planned", "manifests read", "plan cold (ms)", "plan warm (ms)"],
                          rows)
    text += (f"\n\nTable: {total_files:,} data files, {args.days} manifests. For scale, listing the data folder "
             f"and reading every footer took {baseline['list_and_footers_s'] * 1000:.0f} ms "
             f"({baseline['us_per_footer']:.0f} us per footer, 8 threads).")
    print("\n" + text)
    path = write_results("planning", {"benchmark": "planning", "environment": env, "args": vars(args),
                                      "build_s": built, "total_files": total_files, "results": results,
                                      "footer_baseline": baseline, "markdown": text}, args.json)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
