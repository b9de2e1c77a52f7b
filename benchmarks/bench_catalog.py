"""Benchmark: catalog commits per second from 1 and 4 processes (issue 2, Benchmarks).

Two workloads, each run with 1 process and with ``--processes`` processes (default 4)
started together from a barrier (``multiprocessing`` spawn context), all committing
to one table through one DuckDB catalog file:

* ``append``: ``Table.append`` of a small batch (``--rows`` rows), the full commit
  path: data file, manifest, manifest list, metadata JSON, compare-and-swap; a
  process that lost the race rebuilds its commit on the new base under the lock;
* ``cas only``: the bare catalog session: lock, open DuckDB, read the pointer,
  compare-and-swap with a commit-log row, close. No table files. This is the
  ceiling the catalog design allows for any commit.

Throughput = commits / wall time from the barrier to the last commit. Each worker
also reports where its time went (instrumented with ``core_common.Breakdown``) and
how often it had to rebuild. Goal: at least 40 commits/s from 4 processes (append).

Usage:
    python benchmarks/bench_catalog.py                       # ~2 minutes on 2 cores
    python benchmarks/bench_catalog.py --commits 20          # quick
Results: benchmarks/results/catalog-<UTC time>.json
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from core_common import commit_path_breakdown, environment, markdown_table, write_results

import lakefmt

SCHEMA = pa.schema([("proc", pa.int32()), ("i", pa.int32()), ("value", pa.float64())])
TABLE = "bench.commits"


def batch(proc: int, i: int, rows: int) -> pa.Table:
    return pa.table({"proc": pa.array([proc] * rows, pa.int32()), "i": pa.array([i] * rows, pa.int32()),
                     "value": pa.array([float(r) for r in range(rows)])}, schema=SCHEMA)


def append_worker(warehouse: str, proc: int, commits: int, rows: int, barrier: Any, results: Any) -> None:
    try:
        breakdown = commit_path_breakdown()
        t = lakefmt.Catalog(warehouse).load_table(TABLE)
        t.write_token()  # take the write lease before the clock starts
        barrier.wait(timeout=300)
        breakdown.take()
        start = time.perf_counter()
        for i in range(commits):
            t.append(batch(proc, i, rows))
        elapsed = time.perf_counter() - start
        parts = breakdown.take()
        builds = breakdown.take_calls().get("manifests + manifest list", 0)
        results.put(("ok", proc, {"start": start, "end": time.perf_counter(), "elapsed_s": elapsed,
                                  "commits": commits, "parts_s": parts, "builds": builds}))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(("error", proc, traceback.format_exc()))


def cas_worker(warehouse: str, proc: int, commits: int, rows: int, barrier: Any, results: Any) -> None:
    """Move the pointer of a table with bare CAS calls (no table files): the catalog's own cost."""
    try:
        cat = lakefmt.Catalog(warehouse)
        ns, name = TABLE.split(".")
        barrier.wait(timeout=300)
        start = time.perf_counter()
        done = lost = 0
        while done < commits:
            with cat.session() as s:
                current = s.current_location(ns, name)
                new = f"{current.split('#')[0]}#{proc}-{done}"
                if s.compare_and_swap(ns, name, current, new, operation="append", snapshot_id=None, summary={}):
                    done += 1
                else:
                    lost += 1
        elapsed = time.perf_counter() - start
        results.put(("ok", proc, {"start": start, "end": time.perf_counter(), "elapsed_s": elapsed,
                                  "commits": commits, "lost": lost}))
    except BaseException:  # noqa: BLE001
        results.put(("error", proc, traceback.format_exc()))


def run(kind: str, processes: int, commits: int, rows: int, root: Path) -> dict[str, Any]:
    warehouse = str(root / f"{kind.replace(' ', '_')}-{processes}")
    cat = lakefmt.Catalog(warehouse, create=True)
    cat.create_table(TABLE, schema=SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
    target = append_worker if kind == "append" else cas_worker
    procs = [ctx.Process(target=target, args=(warehouse, p, commits, rows, barrier, results))
             for p in range(processes)]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    wall_start = time.perf_counter()
    reports = [results.get(timeout=1800) for _ in procs]
    wall = time.perf_counter() - wall_start
    for p in procs:
        p.join()
    errors = [r for r in reports if r[0] != "ok"]
    if errors:
        raise RuntimeError("\n".join(str(e[2]) for e in errors))
    total = processes * commits
    stats = [r[2] for r in reports]
    out: dict[str, Any] = {"kind": kind, "processes": processes, "commits_per_process": commits,
                           "total_commits": total, "wall_s": wall, "commits_per_s": total / wall,
                           "workers": stats}
    if kind == "append":
        t = cat.load_table(TABLE)
        assert len(t.snapshots()) == total, (len(t.snapshots()), total)
        assert t.scan().count() == total * rows
        parts: dict[str, float] = {}
        for s in stats:
            for k, v in s["parts_s"].items():
                parts[k] = parts.get(k, 0.0) + v
        out["per_commit_ms"] = {k: 1000 * v / total for k, v in sorted(parts.items())}
        held = parts.get("catalog session (lock+open+work+close)", 0.0) - parts.get("  waiting for the catalog lock", 0.0)
        out["per_commit_ms"]["  lock held (session - waiting)"] = 1000 * held / total
        out["builds_per_commit"] = sum(s["builds"] for s in stats) / total
    else:
        out["lost_races"] = sum(s["lost"] for s in stats)
    print(f"{kind:8s} x {processes} processes: {total} commits in {wall:.1f}s = {total / wall:.1f} commits/s",
          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=50, help="commits per process")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--dir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lakefmt-bench-catalog-"))
    env = environment()
    results = []
    try:
        for kind in ("cas only", "append"):
            for processes in (1, args.processes):
                commits = args.commits * (args.processes if processes == 1 else 1)  # same total work
                results.append(run(kind, processes, commits, args.rows, root))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    rows = [[r["kind"], r["processes"], r["total_commits"], f"{r['wall_s']:.1f}", f"{r['commits_per_s']:.1f}",
             f"{1000 / r['commits_per_s']:.1f}"] for r in results]
    text = markdown_table(["workload", "processes", "commits", "wall s", "commits/s", "ms per commit"], rows)
    appends = [r for r in results if r["kind"] == "append"]
    labels = sorted({k for r in appends for k in r["per_commit_ms"]}, key=lambda k: (k.startswith(" "), k))
    text += "\n\nAppend: time per commit summed over processes (ms), by part of the commit path:\n\n"
    text += markdown_table(["part"] + [f"{r['processes']} proc" for r in appends],
                           [[k.replace("  ", "- ")] + [f"{r['per_commit_ms'].get(k, 0.0):.1f}" for r in appends]
                            for k in labels]
                           + [["builds per commit (1 = no lost race)"] + [f"{r['builds_per_commit']:.2f}"
                                                                          for r in appends]])
    four = next((r for r in appends if r["processes"] == args.processes), None)
    if four:
        text += (f"\n\nGoal >= 40 commits/s from {args.processes} processes (append): "
                 f"{'met' if four['commits_per_s'] >= 40 else 'MISSED'} ({four['commits_per_s']:.1f}/s)")
    print("\n" + text)
    path = write_results("catalog", {"benchmark": "catalog", "environment": env, "args": vars(args),
                                     "results": results, "markdown": text}, args.json)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
