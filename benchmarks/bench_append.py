"""Benchmark: append commit latency with 10, 1,000 and 10,000 prior commits (issue 2, Benchmarks).

One unpartitioned table receives small appends (``--rows`` rows, one data file each).
At each level of history the latency of ``--samples`` further appends is measured
one by one (write the data file, write manifest + manifest list, write the metadata
JSON, compare-and-swap in the catalog) and the median reported, with a breakdown of
where the time went. Goal: at most 2x from 10 to 10,000 prior commits.

History is built with real ``Table.append`` calls up to ``--real-up-to`` commits
(default 100). Beyond that it is built in bulk to keep the run short: the same
snapshot producer as ``append`` (one data file, manifest and manifest list per
snapshot, with manifest merging) chains 500 snapshots per catalog commit, so the
table's metadata, manifest lists and manifests look exactly as after real appends;
only the catalog's commit log has fewer rows (its size does not change the cost of
a swap; see benchmarks/README.md). ``--real-up-to 10000`` builds it all for real
(about 15 minutes on 2 busy cores); ``--real-up-to 1000`` gives the same medians as bulk.

delta-rs ``write_deltalake(mode="append")`` of the same batch is measured at
``--delta-levels`` (default 10 and 1,000 commits) for comparison.

``--fsync-cost`` measures only what durability costs (spec/commits.md COMMIT-20): appends
of 10 and of 10,000 rows to a table with 10 prior commits, with fsync (the default) and
without it (``FileIO.fsync = False``), alternating so both see the same machine load;
the median of ``--fsync-samples`` appends of each kind.

Usage:
    python benchmarks/bench_append.py                        # ~3-4 minutes on 2 cores
    python benchmarks/bench_append.py --levels 10,1000 --samples 10 --no-delta   # quick
    python benchmarks/bench_append.py --fsync-cost           # ~1 minute: cost of fsync per commit
Results: benchmarks/results/append-<UTC time>.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from core_common import (
    commit_path_breakdown,
    environment,
    markdown_table,
    median,
    ms,
    write_results,
)

import lakefmt
from lakefmt.commit import FileChange, SnapshotProducer
from lakefmt.updates import apply_updates

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("value", pa.float64()),
                    ("tag", pa.string())])
BULK_CHUNK = 500


def make_batch(i: int, rows: int) -> pa.Table:
    base = i * rows
    return pa.table({
        "id": pa.array(range(base, base + rows), pa.int64()),
        "ts": pa.array([1_767_225_600_000_000 + (base + r) * 1_000_000 for r in range(rows)],
                       pa.timestamp("us", tz="UTC")),
        "value": pa.array([float(base + r) / 7 for r in range(rows)]),
        "tag": [f"tag-{(base + r) % 13}" for r in range(rows)],
    }, schema=SCHEMA)


def commits(t: lakefmt.Table) -> int:
    return len(t.metadata.snapshots)


def build_real(t: lakefmt.Table, target: int, rows: int) -> None:
    while commits(t) < target:
        t.append(make_batch(commits(t), rows))


def build_bulk(t: lakefmt.Table, target: int, rows: int) -> None:
    """Chain snapshots with the append snapshot producer, many per catalog commit."""
    while commits(t) < target:
        start, k = commits(t), min(BULK_CHUNK, target - commits(t))

        def build(base: Any, start: int = start, k: int = k) -> tuple[list[Any], list[str]]:
            meta, updates, written = base, [], []
            for i in range(k):
                files = t.write_data_files(make_batch(start + i, rows))
                producer = SnapshotProducer(t.io, t.location, FileChange("append", added=files))
                step, files_written = producer.build(meta)
                meta = apply_updates(meta, step, timestamp_ms=int(time.time() * 1000), previous_location=None)
                updates += step
                written += files_written
            return updates, written

        t.commit_build(build, operation="append")


def measure_lakefmt(t: lakefmt.Table, samples: int, rows: int) -> dict[str, Any]:
    breakdown = commit_path_breakdown()
    latencies: list[float] = []
    parts: list[dict[str, float]] = []
    try:
        for _ in range(samples):
            batch = make_batch(commits(t), rows)
            breakdown.take()
            start = time.perf_counter()
            t.append(batch)
            latencies.append(time.perf_counter() - start)
            parts.append(breakdown.take())
    finally:
        breakdown.restore()
    labels = sorted({k for p in parts for k in p}, key=lambda k: (k.startswith(" "), k))
    manifests = len(lakefmt.manifest_cache.read_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}"))
    return {
        "median_s": median(latencies), "min_s": min(latencies), "max_s": max(latencies), "samples_s": latencies,
        "breakdown_median_s": {k: median([p.get(k, 0.0) for p in parts]) for k in labels},
        "metadata_json_bytes": Path(t.metadata_location).stat().st_size if "://" not in t.metadata_location else None,
        "manifests_in_list": manifests,
        "data_files": int(t.current_snapshot().summary.get("total-data-files", "0")),
    }


def bench_lakefmt(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    cat = lakefmt.Catalog(str(root / "lakefmt"), create=True)
    t = cat.create_table("bench.appends", schema=SCHEMA)
    out = []
    for level in args.levels:
        start = time.perf_counter()
        if commits(t) < level:
            if level <= args.real_up_to:
                build_real(t, level, args.rows)
                how = "real appends"
            else:
                build_real(t, min(level, args.real_up_to), args.rows)
                build_bulk(t, level, args.rows)
                how = f"real appends to {args.real_up_to}, then bulk"
        built = time.perf_counter() - start
        t = cat.load_table("bench.appends")  # a fresh handle, as a new writer would have
        result = measure_lakefmt(t, args.samples, args.rows)
        result.update(level=level, prior_commits=level, build_s=built, built_with=how if built > 0.001 else "-")
        print(f"lakefmt  {level:>6} prior commits: median {ms(result['median_s'])} ms "
              f"(build {built:.0f}s, metadata {result['metadata_json_bytes']} B, "
              f"{result['manifests_in_list']} manifests)", flush=True)
        out.append(result)
        # The measured appends added commits; the next level starts from there.
    return out


def bench_delta(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    try:
        from deltalake import DeltaTable, write_deltalake
    except ImportError:
        print("deltalake is not installed: skipping delta-rs", flush=True)
        return []
    path = str(root / "delta")
    out = []
    done = 0
    for level in args.delta_levels:
        start = time.perf_counter()
        while done < level:
            write_deltalake(path, make_batch(done, args.rows), mode="append")
            done += 1
        built = time.perf_counter() - start
        latencies = []
        for _ in range(args.samples):
            batch = make_batch(done, args.rows)
            t0 = time.perf_counter()
            write_deltalake(path, batch, mode="append")
            latencies.append(time.perf_counter() - t0)
            done += 1
        version = DeltaTable(path).version()
        checkpoints = len(list((Path(path) / "_delta_log").glob("*.checkpoint.parquet")))
        result = {"level": level, "prior_commits": level, "median_s": median(latencies), "samples_s": latencies,
                  "build_s": built, "final_version": version, "checkpoints": checkpoints}
        print(f"delta-rs {level:>6} prior commits: median {ms(result['median_s'])} ms (build {built:.0f}s, "
              f"{checkpoints} checkpoints)", flush=True)
        out.append(result)
    return out


def bench_fsync(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """Append latency with and without fsync, for small and large appends (COMMIT-20)."""
    out = []
    for rows in (10, 10_000):
        cat = lakefmt.Catalog(str(root / f"fsync-{rows}"), create=True)
        t = cat.create_table("bench.fsync", schema=SCHEMA)
        build_real(t, 10, rows)
        samples: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.fsync_samples):
            for fsync in (True, False) if i % 2 == 0 else (False, True):
                cat.io.fsync = fsync
                batch = make_batch(commits(t), rows)
                start = time.perf_counter()
                t.append(batch)
                samples[fsync].append(time.perf_counter() - start)
        cat.io.fsync = True
        result = {"rows": rows, "with_fsync_median_s": median(samples[True]),
                  "without_fsync_median_s": median(samples[False]), "with_fsync_s": samples[True],
                  "without_fsync_s": samples[False]}
        result["ratio"] = result["with_fsync_median_s"] / result["without_fsync_median_s"]
        print(f"{rows:>6}-row append: median {ms(result['with_fsync_median_s'])} ms with fsync, "
              f"{ms(result['without_fsync_median_s'])} ms without ({result['ratio']:.2f}x)", flush=True)
        out.append(result)
    return out


def fsync_report(results: list[dict[str, Any]], loadavg: str) -> str:
    text = markdown_table(
        ["rows per append", "with fsync (median ms)", "without fsync (median ms)", "with / without",
         "cost per commit (ms)"],
        [[f"{r['rows']:,}", ms(r["with_fsync_median_s"]), ms(r["without_fsync_median_s"]), f"{r['ratio']:.2f}x",
          ms(r["with_fsync_median_s"] - r["without_fsync_median_s"])] for r in results])
    return text + f"\n\nload average at the start (/proc/loadavg): {loadavg}"


def report(lake: list[dict[str, Any]], delta: list[dict[str, Any]]) -> str:
    by_level = {d["level"]: d for d in delta}
    rows = []
    for r in lake:
        d = by_level.get(r["level"])
        ratio = f"{d['median_s'] / r['median_s']:.1f}x" if d else "-"
        rows.append([f"{r['level']:,}", ms(r["median_s"]), ms(d["median_s"]) if d else "-", ratio,
                     f"{r['metadata_json_bytes']:,}", r["manifests_in_list"]])
    text = markdown_table(["prior commits", "lakefmt append (median ms)", "delta-rs append (median ms)",
                           "delta-rs / lakefmt", "metadata JSON bytes", "manifests in list"], rows)
    labels = list(lake[0]["breakdown_median_s"]) if lake else []
    text += "\n\nWhere an append's time goes (median ms per append):\n\n"
    text += markdown_table(["part"] + [f"{r['level']:,}" for r in lake],
                           [[label.replace("  ", "- ")] + [ms(r["breakdown_median_s"].get(label)) for r in lake]
                            for label in labels])
    if len(lake) >= 2:
        growth = lake[-1]["median_s"] / lake[0]["median_s"]
        text += (f"\n\nlakefmt growth from {lake[0]['level']:,} to {lake[-1]['level']:,} commits: {growth:.2f}x "
                 f"(goal <= 2x: {'met' if growth <= 2 else 'MISSED'})")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    levels = lambda s: [int(x) for x in s.split(",") if x]
    parser.add_argument("--levels", type=levels, default=[10, 1000, 10000])
    parser.add_argument("--delta-levels", type=levels, default=[10, 1000])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--rows", type=int, default=10, help="rows per append")
    parser.add_argument("--real-up-to", type=int, default=100)
    parser.add_argument("--no-delta", action="store_true")
    parser.add_argument("--fsync-cost", action="store_true", help="only compare appends with and without fsync")
    parser.add_argument("--fsync-samples", type=int, default=31)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", help="write results here instead of benchmarks/results/")
    args = parser.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lakefmt-bench-append-"))
    root.mkdir(parents=True, exist_ok=True)
    env = environment()
    if args.fsync_cost:
        loadavg = Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "-"
        try:
            fsync = bench_fsync(args, root)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        text = fsync_report(fsync, loadavg)
        print("\n" + text)
        path = write_results("append-fsync", {"benchmark": "append-fsync", "environment": env, "args": vars(args),
                                              "loadavg": loadavg, "results": fsync, "markdown": text}, args.json)
        print(f"\nresults: {path}")
        return
    try:
        lake = bench_lakefmt(args, root)
        delta = [] if args.no_delta else bench_delta(args, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    text = report(lake, delta)
    print("\n" + text)
    path = write_results("append", {"benchmark": "append", "environment": env, "args": vars(args),
                                    "lakefmt": lake, "delta_rs": delta, "markdown": text}, args.json)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
