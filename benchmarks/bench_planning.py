"""Benchmark: planning and full scans of a table of 10,000 small files (issue 11, goals 3 and 6).

On each dataset (:mod:`loop_data`) the script writes ``--files`` files (default 10,000) of
``--rows-per-file`` rows (default 250) over 10 days and registers them twice:

* as a lakefmt table partitioned by ``day(ts)``, filled like a streaming ingest: ``--files / 100``
  append commits of 100 files each (one manifest per commit, merged by size tier as appends go,
  COMMIT-22: 10 manifests at 10,000 files);
* as a Delta table over hard links to the **same files** (``day=YYYY-MM-DD/`` layout,
  ``convert_to_deltalake``), with a checkpoint, as delta-rs leaves a table every 100 commits.

Measured, interleaved (lakefmt, delta-rs, ... with the order flipped each run; medians of
``--runs``):

* planning with no filter, as a new reader pays it: lakefmt ``Catalog.load_table`` +
  ``scan().plan()`` with the manifest cache cleared, against delta-rs ``DeltaTable(path)`` +
  ``file_uris()``; and on an already open table (lakefmt ``plan()`` with a warm cache, delta-rs
  ``file_uris()``). Goal: lakefmt no slower than delta-rs's listing. Planning decodes a file's
  column statistics only when they are asked for; the same plan followed by reading every planned
  file's statistics is measured too, as the price a consumer of all statistics pays;
* lakefmt's planning of the selective query and of one day, for reference;
* a full scan into Arrow of every planned file: lakefmt ``scan().to_arrow()``,
  ``pyarrow.dataset.dataset(paths).to_table()`` and DuckDB ``read_parquet(paths)`` (Arrow
  result), wall and CPU time (all threads; less noisy on a shared machine). Goal: lakefmt
  ahead of pyarrow.dataset.

Usage:
    python benchmarks/bench_planning.py                      # both datasets, ~6 minutes on 2 cores
    python benchmarks/bench_planning.py --quick              # 1,000 files: smoke run
    python benchmarks/bench_planning.py --planning-only      # no full scans: ~2 minutes
Results: benchmarks/results/planning-<UTC time>.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
import pyarrow.dataset as pads
from core_common import Run, add_run_arguments, loadavg, markdown_table, median, work_dir
from loop_data import Dataset, add_dataset_argument, selected

import lakefmt
from lakefmt import manifest_cache
from lakefmt.commit import FileChange

FILES_PER_COMMIT = 100
DAYS = 10


def build(ds: Dataset, root: Path, files: int, rows: int) -> tuple[lakefmt.Catalog, str]:
    """The lakefmt table (commits of 100 files) and a Delta table over the same files."""
    from deltalake import DeltaTable, Schema, convert_to_deltalake

    cat = lakefmt.Catalog(str(root / "lakefmt"), create=True)
    t = cat.create_table("bench.planning", schema=ds.schema, partition_by=["day(ts)"])

    def write(i: int) -> list[Any]:
        return t.write_data_files(ds.rows(i, files=files, rows=rows, days=DAYS))

    data_files = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for start in range(0, files, FILES_PER_COMMIT):
            added = [f for fs in pool.map(write, range(start, min(files, start + FILES_PER_COMMIT))) for f in fs]
            t.commit_change(FileChange("append", added=added), cleanup_on_failure=added)
            data_files += added
    t.release_write_token()
    delta = str(root / "delta")
    for f in data_files:
        day = date(1970, 1, 1) + timedelta(days=int(f.partition[0]))
        os.makedirs(f"{delta}/day={day.isoformat()}", exist_ok=True)
        os.link(f"{t.location}/{f.path}", f"{delta}/day={day.isoformat()}/{os.path.basename(f.path)}")
    convert_to_deltalake(delta, partition_by=Schema.from_arrow(pa.schema([("day", pa.date32())])),
                         partition_strategy="hive")
    DeltaTable(delta).create_checkpoint()
    return cat, delta


def interleaved(cases: dict[str, Callable[[], Any]], runs: int,
                cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Run every case ``runs`` times, the order reversed every other run; wall seconds per case.

    ``cpu``, if given, receives the CPU seconds (user + system, all threads) of each run.
    """
    names = list(cases)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(runs):
        for n in names if r % 2 == 0 else names[::-1]:
            start, start_cpu = time.perf_counter(), time.process_time()
            cases[n]()
            out[n].append(time.perf_counter() - start)
            if cpu is not None:
                cpu.setdefault(n, []).append(time.process_time() - start_cpu)
    return out


def bench_dataset(ds: Dataset, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import duckdb
    from deltalake import DeltaTable

    started = time.perf_counter()
    cat, delta = build(ds, root / ds.name, args.files, args.rows_per_file)
    built = time.perf_counter() - started
    t = cat.load_table("bench.planning")
    dt = DeltaTable(delta)
    full_plan = t.scan().plan()
    paths = [task.location for task in full_plan.tasks]
    assert len(paths) == args.files and len(dt.file_uris()) == args.files, (len(paths), len(dt.file_uris()))
    print(f"[{ds.name}] built {len(paths):,} files in {args.files // FILES_PER_COMMIT} commits in {built:.0f}s, "
          f"{full_plan.manifests_total} manifests (load {loadavg()})", flush=True)

    def lakefmt_open_plan() -> None:
        manifest_cache.clear()
        assert len(cat.load_table("bench.planning").scan().plan().tasks) == args.files

    def lakefmt_plan_cold() -> None:
        manifest_cache.clear()
        t.scan().plan()

    def lakefmt_open_plan_stats() -> None:
        manifest_cache.clear()
        files = cat.load_table("bench.planning").scan().plan_files()
        assert sum(len(f.lower_bounds) for f in files) > 0  # decodes every file's statistics

    planning_cpu: dict[str, list[float]] = {}
    planning = interleaved({
        "lakefmt: load_table + plan (cold)": lakefmt_open_plan,
        "delta-rs: DeltaTable() + file_uris()": lambda: DeltaTable(delta).file_uris(),
        "lakefmt: plan on an open table (cold cache)": lakefmt_plan_cold,
        "lakefmt: plan on an open table (warm cache)": lambda: t.scan().plan(),
        "delta-rs: file_uris() on an open table": dt.file_uris,
        "lakefmt: load_table + plan + every file's statistics (cold)": lakefmt_open_plan_stats,
    }, args.runs, planning_cpu)
    lo = (date(2026, 1, 1) if ds.name == "telemetry" else date(2026, 3, 1)) + timedelta(days=DAYS // 2)
    filters = {"selective query": ds.query, "one day": f"ts >= '{lo}' AND ts < '{lo + timedelta(days=1)}'"}
    filtered = {}
    for label, text in filters.items():
        scan = t.scan(filter=text)
        cold_cpu: dict[str, list[float]] = {}
        cold = interleaved({"plan": lambda s=scan: (manifest_cache.clear(), s.plan())}, args.runs, cold_cpu)["plan"]
        filtered[label] = {"filter": text, "files_planned": len(scan.plan().tasks), "cold_median_s": median(cold),
                           "cold_median_cpu_s": median(cold_cpu["plan"])}
    load_planning = loadavg()

    con = duckdb.connect()
    rows: dict[str, int] = {}

    def count(name: str, fn: Callable[[], pa.Table]) -> Callable[[], None]:
        return lambda: rows.__setitem__(name, fn().num_rows)

    scan_cpu: dict[str, list[float]] = {}
    scans = {} if args.planning_only else interleaved({
        "lakefmt scan().to_arrow()": count("lakefmt", lambda: t.scan().to_arrow()),
        "pyarrow.dataset over the planned files": count("pyarrow", lambda: pads.dataset(paths,
                                                                                        format="parquet").to_table()),
        "DuckDB read_parquet(planned files)": count("duckdb", lambda: con.read_parquet(paths).to_arrow_table()),
    }, args.scan_runs, scan_cpu)
    if args.planning_only:
        rows["lakefmt"] = sum(task.data_file.record_count for task in full_plan.tasks)
    assert len(set(rows.values())) == 1, rows
    med = {k: median(v) for k, v in {**planning, **scans}.items()}
    out = {"dataset": ds.name, "files": args.files, "rows": rows["lakefmt"], "build_s": built,
           "manifests": full_plan.manifests_total,
           "planning_s": planning, "planning_cpu_s": planning_cpu,
           "median_cpu_s": {k: median(v) for k, v in {**planning_cpu, **scan_cpu}.items()},
           "scans_s": scans, "median_s": med, "filtered": filtered,
           "load_average_planning": load_planning, "load_average_scans": loadavg(),
           "planning_ratio": med["lakefmt: load_table + plan (cold)"] / med["delta-rs: DeltaTable() + file_uris()"],
           "open_table_ratio": (med["lakefmt: plan on an open table (warm cache)"]
                                / med["delta-rs: file_uris() on an open table"]),
           "scan_vs_pyarrow": (med["lakefmt scan().to_arrow()"] / med["pyarrow.dataset over the planned files"]
                               if scans else None),
           "scan_vs_duckdb": (med["lakefmt scan().to_arrow()"] / med["DuckDB read_parquet(planned files)"]
                              if scans else None)}
    print(f"[{ds.name}] planning {out['planning_ratio']:.2f}x delta-rs" + (
        f", full scan {out['scan_vs_pyarrow']:.2f}x pyarrow.dataset, {out['scan_vs_duckdb']:.2f}x DuckDB" if scans
        else ""), flush=True)
    return out


def report(results: list[dict[str, Any]]) -> str:
    text = ""
    for r in results:
        med, cpu = r["median_s"], r["median_cpu_s"]
        text += (f"**{r['dataset']}**: {r['files']:,} files, {r['rows']:,} rows, {r['manifests']} manifests; "
                 "load average "
                 f"{r['load_average_planning'].split(' ')[0]} (planning), {r['load_average_scans'].split(' ')[0]} "
                 "(scans)\n\n")
        def ms(name: str, med: dict[str, float] = med) -> str:
            return f"{med[name] * 1000:.1f}"

        def ms_cpu(name: str, cpu: dict[str, float] = cpu) -> str:
            return f"{cpu[name] * 1000:.1f}"

        text += markdown_table(["case", "median ms", "CPU ms", "vs delta-rs / vs pyarrow.dataset"], [
            ["lakefmt: load_table + plan (cold)", ms("lakefmt: load_table + plan (cold)"),
             ms_cpu("lakefmt: load_table + plan (cold)"),
             f"{r['planning_ratio']:.2f}x (goal <= 1.0x: {'met' if r['planning_ratio'] <= 1 else '**missed**'})"],
            ["delta-rs: DeltaTable() + file_uris()", ms("delta-rs: DeltaTable() + file_uris()"),
             ms_cpu("delta-rs: DeltaTable() + file_uris()"), ""],
            *[[name, ms(name), ms_cpu(name), ""] for name in (
                "lakefmt: load_table + plan + every file's statistics (cold)",
                "lakefmt: plan on an open table (cold cache)")],
            ["lakefmt: plan on an open table (warm cache)", ms("lakefmt: plan on an open table (warm cache)"),
             ms_cpu("lakefmt: plan on an open table (warm cache)"), f"{r['open_table_ratio']:.2f}x"],
            ["delta-rs: file_uris() on an open table", ms("delta-rs: file_uris() on an open table"),
             ms_cpu("delta-rs: file_uris() on an open table"), ""],
            *[[f"lakefmt: plan {label} ({f['files_planned']:,} files, cold cache)",
               f"{f['cold_median_s'] * 1000:.1f}", f"{f['cold_median_cpu_s'] * 1000:.1f}", ""]
              for label, f in r["filtered"].items()],
            *([["full scan: lakefmt scan().to_arrow()", f"{med['lakefmt scan().to_arrow()'] * 1000:.0f}",
                ms_cpu("lakefmt scan().to_arrow()"),
                (f"{r['scan_vs_pyarrow']:.2f}x (goal < 1.0x: {'met' if r['scan_vs_pyarrow'] < 1 else '**missed**'}); "
                 f"{r['scan_vs_duckdb']:.2f}x DuckDB")],
               ["full scan: pyarrow.dataset over the planned files",
                f"{med['pyarrow.dataset over the planned files'] * 1000:.0f}",
                ms_cpu("pyarrow.dataset over the planned files"), ""],
               ["full scan: DuckDB read_parquet(planned files)",
                f"{med['DuckDB read_parquet(planned files)'] * 1000:.0f}",
                ms_cpu("DuckDB read_parquet(planned files)"), ""]] if r["scans_s"] else []),
        ]) + "\n\n"
    return text.rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser)
    add_run_arguments(parser, quick="1,000 files, 3 runs: a smoke run",
                      runs_help="runs of each planning case (default 7; quick 3)")
    parser.add_argument("--files", type=int, help="data files (a multiple of 100; default 10,000; quick 1,000)")
    parser.add_argument("--rows-per-file", type=int, default=250)
    parser.add_argument("--scan-runs", type=int, help="runs of each full scan (default 3; quick 1)")
    parser.add_argument("--planning-only", action="store_true", help="measure planning only (no full scans)")
    args = parser.parse_args()
    args.files = args.files or (1000 if args.quick else 10_000)
    args.runs = args.runs or (3 if args.quick else 7)
    args.scan_runs = args.scan_runs or (1 if args.quick else 3)
    benchmark = Run("planning", args)
    with work_dir(args.dir, prefix="lakefmt-bench-planning-", keep=args.keep) as root:
        results = [bench_dataset(ds, args, root) for ds in selected(args.dataset)]
    benchmark.publish(report(results) + "\n\n" + benchmark.load_note(), results)


if __name__ == "__main__":
    main()
