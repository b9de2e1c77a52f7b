"""Benchmark: commits per second from 4 processes appending to one table, against delta-rs (issue 11, goal 2).

On each dataset (:mod:`loop_data`) ``--processes`` processes (default 4, ``multiprocessing``
spawn context) start together from a barrier and each append ``--commits`` batches of
``--rows`` rows (one ingest window each) to one table:

* ``lakefmt``: ``Table.append`` on a table partitioned by ``day(ts)``, all processes committing
  through one DuckDB catalog file; a process that lost the race rebuilds its commit on the new
  base under the catalog lock;
* ``delta-rs``: ``write_deltalake(mode="append", partition_by=["day"])`` on a Delta table on
  local disk. delta-rs needs no lock provider on a local file system: a commit creates
  ``_delta_log/<version>.json`` with an atomic rename that fails if the file exists, and a
  blind append that lost the race re-reads the log and retries at the next version
  (``CommitProperties(max_commit_retries=...)``, raised here to 100). A write that still fails
  is retried by the worker and counted.

Throughput = commits / wall time from the barrier to the last commit. Rounds (``--rounds``,
default 3) alternate lakefmt and delta-rs so both see the same machine load; the median of the
rounds and the ratio lakefmt / delta-rs are reported. One round of bare catalog
compare-and-swap sessions (``cas only``: no table files) gives the ceiling the catalog allows.
Goal: lakefmt's commits/s at least delta-rs's.

Usage:
    python benchmarks/bench_catalog.py                        # both datasets, ~3 minutes on 2 cores
    python benchmarks/bench_catalog.py --quick                # smoke run
Results: benchmarks/results/catalog-<UTC time>.json
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_common import (
    Run,
    add_run_arguments,
    commit_path_breakdown,
    loadavg,
    markdown_table,
    median,
    work_dir,
)
from loop_data import DATASETS, Dataset, add_dataset_argument, selected, with_day

import lakefmt

STREAM_FILES = 100_000  # ingest windows over 10 days, as in bench_append


def batch(ds: Dataset, proc: int, i: int, rows: int, commits: int) -> Any:
    return ds.rows(proc * commits + i, files=STREAM_FILES, rows=rows, days=10)


def lakefmt_worker(spec: dict[str, Any], proc: int, barrier: Any, results: Any) -> None:
    try:
        ds, commits, rows = DATASETS[spec["dataset"]], spec["commits"], spec["rows"]
        batches = [batch(ds, proc, i, rows, commits) for i in range(commits)]
        breakdown = commit_path_breakdown()
        t = lakefmt.Catalog(spec["target"]).load_table("bench.commits")
        t.write_token()  # take the write lease before the clock starts
        barrier.wait(timeout=300)
        breakdown.take()
        start = time.perf_counter()
        for b in batches:
            t.append(b)
        end = time.perf_counter()
        builds = breakdown.take_calls().get("manifests + manifest list", 0)
        results.put(("ok", proc, {"start": start, "end": end, "parts_s": breakdown.take(), "builds": builds,
                                  "failed_writes": 0}))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(("error", proc, traceback.format_exc()))


def delta_worker(spec: dict[str, Any], proc: int, barrier: Any, results: Any) -> None:
    try:
        from deltalake import CommitProperties, write_deltalake

        ds, commits, rows = DATASETS[spec["dataset"]], spec["commits"], spec["rows"]
        batches = [with_day(batch(ds, proc, i, rows, commits)) for i in range(commits)]
        props = CommitProperties(max_commit_retries=100)
        failed = 0
        barrier.wait(timeout=300)
        start = time.perf_counter()
        for b in batches:
            while True:
                try:
                    write_deltalake(spec["target"], b, mode="append", partition_by=["day"], commit_properties=props)
                    break
                except Exception:
                    failed += 1
                    if failed > 10 * commits:
                        raise
        end = time.perf_counter()
        results.put(("ok", proc, {"start": start, "end": end, "failed_writes": failed}))
    except BaseException:  # noqa: BLE001
        results.put(("error", proc, traceback.format_exc()))


def cas_worker(spec: dict[str, Any], proc: int, barrier: Any, results: Any) -> None:
    """Move the pointer of a table with bare CAS calls (no table files): the catalog's own cost."""
    try:
        cat = lakefmt.Catalog(spec["target"])
        barrier.wait(timeout=300)
        start = time.perf_counter()
        done = lost = 0
        while done < spec["commits"]:
            with cat.session() as s:
                current = s.current_location("bench", "commits")
                new = f"{current.split('#')[0]}#{proc}-{done}"
                if s.compare_and_swap("bench", "commits", current, new, operation="append", snapshot_id=None,
                                      summary={}):
                    done += 1
                else:
                    lost += 1
        results.put(("ok", proc, {"start": start, "end": time.perf_counter(), "lost": lost, "failed_writes": 0}))
    except BaseException:  # noqa: BLE001
        results.put(("error", proc, traceback.format_exc()))


WORKERS = {"lakefmt": lakefmt_worker, "delta-rs": delta_worker, "cas only": cas_worker}


def prepare(kind: str, ds: Dataset, target: str) -> None:
    """An empty table to append to (delta-rs: created by a first, uncounted append)."""
    if kind == "delta-rs":
        from deltalake import write_deltalake

        write_deltalake(target, with_day(ds.rows(STREAM_FILES - 1, files=STREAM_FILES, rows=1, days=10)),
                        mode="append", partition_by=["day"])
    else:
        lakefmt.Catalog(target, create=True).create_table("bench.commits", schema=ds.schema,
                                                         partition_by=["day(ts)"])


def check(kind: str, ds: Dataset, target: str, total: int, rows: int) -> None:
    """Every commit landed, once."""
    if kind == "delta-rs":
        from deltalake import DeltaTable

        dt = DeltaTable(target)
        assert dt.version() == total, (dt.version(), total)
        assert dt.to_pyarrow_dataset().count_rows() == total * rows + 1
    elif kind == "lakefmt":
        t = lakefmt.Catalog(target).load_table("bench.commits")
        assert len(t.snapshots()) == total, (len(t.snapshots()), total)
        assert t.scan().count() == total * rows


def run(kind: str, ds: Dataset, processes: int, commits: int, rows: int, target: str) -> dict[str, Any]:
    prepare(kind, ds, target)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
    spec = {"dataset": ds.name, "commits": commits, "rows": rows, "target": target}
    procs = [ctx.Process(target=WORKERS[kind], args=(spec, p, barrier, results)) for p in range(processes)]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    load = loadavg()
    reports = [results.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    errors = [r for r in reports if r[0] != "ok"]
    if errors:
        raise RuntimeError("\n".join(str(e[2]) for e in errors))
    stats = [r[2] for r in reports]
    total = processes * commits
    wall = max(s["end"] for s in stats) - min(s["start"] for s in stats)
    check(kind, ds, target, total, rows)
    out: dict[str, Any] = {"kind": kind, "dataset": ds.name, "processes": processes, "total_commits": total,
                           "wall_s": wall, "commits_per_s": total / wall, "load_average": load,
                           "failed_writes": sum(s["failed_writes"] for s in stats)}
    if kind == "lakefmt":
        parts: dict[str, float] = {}
        for s in stats:
            for k, v in s["parts_s"].items():
                parts[k] = parts.get(k, 0.0) + v
        out["per_commit_ms"] = {k: 1000 * v / total for k, v in sorted(parts.items())}
        out["builds_per_commit"] = sum(s["builds"] for s in stats) / total
    print(f"[{ds.name}] {kind:8s} x {processes}: {total} commits in {wall:.1f}s = {total / wall:.1f} commits/s "
          f"(load {load})", flush=True)
    return out


def bench_dataset(ds: Dataset, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"lakefmt": [], "delta-rs": []}
    for r in range(args.rounds):
        for kind in ("lakefmt", "delta-rs") if r % 2 == 0 else ("delta-rs", "lakefmt"):
            if kind == "delta-rs" and args.no_delta:
                continue
            target = str(root / f"{ds.name}-{kind}-{r}")
            runs[kind].append(run(kind, ds, args.processes, args.commits, args.rows, target))
            shutil.rmtree(target, ignore_errors=True)
    cas = run("cas only", ds, args.processes, args.commits, args.rows, str(root / f"{ds.name}-cas"))
    out: dict[str, Any] = {"dataset": ds.name, "runs": runs, "cas_only": cas,
                           "median_commits_per_s": {k: median([x["commits_per_s"] for x in v])
                                                    for k, v in runs.items() if v}}
    med = out["median_commits_per_s"]
    if "delta-rs" in med:
        out["ratio"] = med["lakefmt"] / med["delta-rs"]
    return out


def report(results: list[dict[str, Any]], processes: int) -> str:
    rows = []
    for res in results:
        med = res["median_commits_per_s"]

        def per_round(kind: str, res: dict[str, Any] = res) -> str:
            return ", ".join(f"{x['commits_per_s']:.1f}" for x in res["runs"].get(kind, []))

        ratio = res.get("ratio")
        rows.append([res["dataset"], f"{med['lakefmt']:.1f} ({per_round('lakefmt')})",
                     f"{med['delta-rs']:.1f} ({per_round('delta-rs')})" if "delta-rs" in med else "-",
                     f"{ratio:.2f}x" if ratio else "-",
                     ("met" if ratio >= 1 else "**missed**") if ratio else "-",
                     f"{res['cas_only']['commits_per_s']:.1f}",
                     ", ".join(x["load_average"].split(" ")[0] for v in res["runs"].values() for x in v)])
    text = markdown_table([f"dataset ({processes} processes)", "lakefmt commits/s (rounds)",
                           "delta-rs commits/s (rounds)", "lakefmt / delta-rs", "goal >= 1.0x",
                           "bare CAS commits/s", "load per run"], rows)
    for res in results:
        lake = res["runs"]["lakefmt"]
        labels = sorted({k for x in lake for k in x["per_commit_ms"]}, key=lambda k: (k.startswith(" "), k))
        text += (f"\n\n[{res['dataset']}] lakefmt: ms per commit summed over processes, median of rounds "
                 f"({median([x['builds_per_commit'] for x in lake]):.2f} builds per commit; delta-rs writes "
                 f"retried after running out of commit retries: "
                 f"{sum(x['failed_writes'] for x in res['runs'].get('delta-rs', []))}):\n\n")
        part_ms = {k: median([x["per_commit_ms"].get(k, 0.0) for x in lake]) for k in labels}
        text += markdown_table(["part", "ms"], [[k.replace("  ", "- "), f"{v:.1f}"] for k, v in part_ms.items()])
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser)
    add_run_arguments(parser, quick="10 commits per process, one round")
    parser.add_argument("--commits", type=int, help="commits per process (default 50; quick 10)")
    parser.add_argument("--rounds", type=int, help="rounds of lakefmt and delta-rs (default 3; quick 1)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--no-delta", action="store_true")
    args = parser.parse_args()
    args.commits = args.commits or (10 if args.quick else 50)
    args.rounds = args.rounds or (1 if args.quick else 3)
    benchmark = Run("catalog", args)
    with work_dir(args.dir, prefix="lakefmt-bench-catalog-", keep=args.keep) as root:
        results = [bench_dataset(ds, args, root) for ds in selected(args.dataset)]
    benchmark.publish(report(results, args.processes) + "\n\n" + benchmark.load_note(), results)


if __name__ == "__main__":
    main()
