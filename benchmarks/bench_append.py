"""Benchmark: append latency against delta-rs, at 10, 1,000 and 10,000 prior commits (issue 11, goal 1).

On each dataset (:mod:`loop_data`: ``telemetry`` and ``artemis``) one lakefmt table partitioned
by ``day(ts)`` and one Delta table partitioned by a ``day`` date column receive the same batches,
one ingest window each. At each level of history the script measures, interleaved (lakefmt,
delta-rs, lakefmt without fsync, then the reverse order, so all share the machine's load):

* at 10 prior commits: ``--samples`` appends of 10,000 rows and of 10 rows;
* at 1,000 prior commits: ``--samples`` appends of 10 rows;
* at 10,000 prior commits (lakefmt only): ``--samples`` appends of 10 rows.

lakefmt is ``Table.append``; delta-rs is ``write_deltalake(path, batch, mode="append",
partition_by=["day"])``. Medians of wall time and of process CPU time (all threads), the ratio
lakefmt / delta-rs from the same run, lakefmt's growth from 10 to 10,000 commits (from paired samples: 10-row
appends alternating between a second table kept at 10 commits and the one at 10,000), and where a
lakefmt append's time goes. delta-rs makes no fsync call on a local append; lakefmt makes its
files durable before the swap (COMMIT-20), so lakefmt with ``FileIO.fsync = False`` is measured
too, as a reference for what durability costs (the goals are judged with fsync on). Goals: a 10,000-row append at most 1.5x delta-rs's time; a 10-row
append at most 1.0x at 10 commits and 0.5x at 1,000; growth at most 1.3x from 10 to 10,000.

History above ``--real-up-to`` commits (default 100) is built in bulk to keep the run short:
the append snapshot producer chains 500 snapshots per catalog commit, so metadata, manifest
lists and manifests look as after real appends. The commit that carries them moves the snapshots
beyond ``write.metadata.inline-snapshots-max`` (100) into history files in runs of 50, exactly
the runs real appends leave (spec/metadata.md META-17): the metadata file holds 100 snapshots
and one reference per 50 older ones. Only the catalog's commit log and the metadata-log have
fewer entries. delta-rs history is always built with real appends.

Before each level is measured, the files the build wrote are flushed to disk (``os.sync()``,
its time recorded as ``flush_s``): building 1,000 commits writes thousands of files, which the
kernel would otherwise write back ~30 seconds later, during the measurement, queueing lakefmt's
fsyncs (delta-rs makes none) behind them on the same disk.

``--fsync-cost`` measures only what durability costs (spec/commits.md COMMIT-20): appends of 10
and of 10,000 rows at 10 prior commits, with fsync and without (``FileIO.fsync = False``),
alternating; the median of ``--fsync-samples`` of each.

Usage:
    python benchmarks/bench_append.py                         # both datasets, ~5 minutes on 2 cores
    python benchmarks/bench_append.py --dataset telemetry     # one dataset
    python benchmarks/bench_append.py --quick                 # smoke run, ~1 minute
    python benchmarks/bench_append.py --fsync-cost            # cost of fsync per commit
Results: benchmarks/results/append-<UTC time>.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from core_common import (
    Run,
    add_run_arguments,
    commit_path_breakdown,
    loadavg,
    markdown_table,
    median,
    ms,
    work_dir,
)
from loop_data import Dataset, add_dataset_argument, selected, with_day

import lakefmt
from lakefmt.commit import FileChange, SnapshotProducer
from lakefmt.updates import apply_updates

BULK_CHUNK = 500
STREAM_FILES = 100_000  # ingest windows of the append stream: 8.6 s each over 10 days
SMALL, LARGE = 10, 10_000


class Stream:
    """The batches appended to one table: batch ``i`` is ingest window ``i`` of the dataset."""

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds
        self.next = 0

    def batch(self, rows: int) -> pa.Table:
        self.next += 1
        return self.ds.rows(self.next - 1, files=STREAM_FILES, rows=rows, days=10)


def commits(t: lakefmt.Table) -> int:
    return len(t.metadata.snapshots)


def build_real(t: lakefmt.Table, stream: Stream, target: int) -> None:
    while commits(t) < target:
        t.append(stream.batch(SMALL))


def build_bulk(t: lakefmt.Table, stream: Stream, target: int) -> None:
    """Chain snapshots with the append snapshot producer, many per catalog commit.

    ``apply_updates`` moves the oldest snapshots into pending history runs as each one is added
    (META-17), and the commit writes them as history files, so the table has the history files
    real appends would have left.
    """
    while commits(t) < target:
        k = min(BULK_CHUNK, target - commits(t))

        def build(base: Any, k: int = k) -> tuple[list[Any], list[str]]:
            meta, updates, written = base, [], []
            for _ in range(k):
                files = t.write_data_files(stream.batch(SMALL))
                step, files_written = SnapshotProducer(t.io, t.location, FileChange("append", added=files)).build(meta)
                meta = apply_updates(meta, step, timestamp_ms=int(time.time() * 1000), previous_location=None)
                updates += step
                written += files_written
            return updates, written

        t.commit_build(build, operation="append")


def delta_commits(path: str) -> int:
    log = Path(path) / "_delta_log"
    return len(list(log.glob("*.json"))) if log.exists() else 0


def delta_append(path: str, batch: pa.Table) -> None:
    from deltalake import write_deltalake

    write_deltalake(path, with_day(batch), mode="append", partition_by=["day"])


def timed_call(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and process CPU seconds (all threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


class Side:
    """One competitor's samples at one level: wall and CPU seconds per append."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def add(self, sample: tuple[float, float]) -> None:
        self.wall.append(sample[0])
        self.cpu.append(sample[1])

    def summary(self) -> dict[str, Any]:
        return {"median_s": median(self.wall), "cpu_median_s": median(self.cpu), "samples_s": self.wall,
                "cpu_samples_s": self.cpu}


def measure_level(t: lakefmt.Table, lake_stream: Stream, delta_path: str | None, delta_stream: Stream,
                  rows: int, samples: int) -> dict[str, Any]:
    """``samples`` appends of ``rows`` rows on each side, interleaved, lakefmt's broken down by part.

    A third side, lakefmt with ``FileIO.fsync`` off, prices durability: delta-rs 1.6.6 makes no
    fsync call on a local append (checked with ``strace -e trace=fsync,fdatasync``), lakefmt
    makes its new files and folder entries durable before the swap (COMMIT-20).
    """
    breakdown = commit_path_breakdown()
    lake, lake_nosync, delta, parts = Side(), Side(), Side(), []
    prior = {"lakefmt": commits(t), "delta": delta_commits(delta_path) if delta_path else None}
    try:
        for i in range(samples):
            lake_batch, delta_batch = lake_stream.batch(rows), delta_stream.batch(rows)
            nosync_batch = lake_stream.batch(rows)

            def run_lake(batch: pa.Table = lake_batch) -> None:
                breakdown.take()
                lake.add(timed_call(lambda: t.append(batch)))
                parts.append(breakdown.take())

            def run_delta(batch: pa.Table = delta_batch) -> None:
                if delta_path:
                    delta.add(timed_call(lambda: delta_append(delta_path, batch)))

            def run_lake_nosync(batch: pa.Table = nosync_batch) -> None:
                t.io.fsync = False
                try:
                    lake_nosync.add(timed_call(lambda: t.append(batch)))
                finally:
                    t.io.fsync = True

            order = (run_lake, run_delta, run_lake_nosync)
            for run in order if i % 2 == 0 else order[::-1]:
                run()
    finally:
        breakdown.restore()
    labels = sorted({k for p in parts for k in p}, key=lambda k: (k.startswith(" "), k))
    out: dict[str, Any] = {"rows": rows, "prior_commits": prior, "lakefmt": lake.summary(),
                           "lakefmt_no_fsync": lake_nosync.summary(),
                           "breakdown_median_s": {k: median([p.get(k, 0.0) for p in parts]) for k in labels}}
    if delta_path:
        out["delta"] = delta.summary()
        out["ratio"] = out["lakefmt"]["median_s"] / out["delta"]["median_s"]
        out["cpu_ratio"] = out["lakefmt"]["cpu_median_s"] / out["delta"]["cpu_median_s"]
        out["no_fsync_ratio"] = out["lakefmt_no_fsync"]["median_s"] / out["delta"]["median_s"]
    out["history_files"] = len(t.metadata.snapshot_history)
    if "://" not in t.metadata_location:
        out["metadata_json_bytes"] = Path(t.metadata_location).stat().st_size
    return out


def measure_growth(small: lakefmt.Table, large: lakefmt.Table, stream: Stream, samples: int) -> dict[str, Any]:
    """10-row appends alternating between a table at the first level and one at the last: growth from paired
    samples, so both tables see the same machine load (measured minutes apart, the levels' own medians also
    differ by the load)."""
    sides = {"small": Side(), "large": Side()}
    prior = {"small": commits(small), "large": commits(large)}
    for i in range(samples):
        order = [("small", small), ("large", large)]
        for label, table in order if i % 2 == 0 else order[::-1]:
            batch = stream.batch(SMALL)
            sides[label].add(timed_call(lambda table=table, batch=batch: table.append(batch)))
    out = {label: side.summary() for label, side in sides.items()}
    return {"prior_commits": prior, **out, "growth": out["large"]["median_s"] / out["small"]["median_s"],
            "cpu_growth": out["large"]["cpu_median_s"] / out["small"]["cpu_median_s"], "load_average": loadavg()}


def bench_dataset(ds: Dataset, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    cat = lakefmt.Catalog(str(root / f"lakefmt-{ds.name}"), create=True)
    t = cat.create_table(f"bench.{ds.name}", schema=ds.schema, partition_by=["day(ts)"])
    reference = cat.create_table(f"bench.{ds.name}_small", schema=ds.schema, partition_by=["day(ts)"])
    build_real(reference, Stream(ds), args.levels[0])  # stays near the first level, for paired growth samples
    delta_path = None if args.no_delta else str(root / f"delta-{ds.name}")
    lake_stream, delta_stream = Stream(ds), Stream(ds)
    levels: list[dict[str, Any]] = []
    for level in args.levels:
        started = time.perf_counter()
        build_real(t, lake_stream, min(level, args.real_up_to))
        build_bulk(t, lake_stream, level)
        with_delta = delta_path if level in args.delta_levels else None
        while with_delta and delta_commits(with_delta) < level:
            delta_append(with_delta, delta_stream.batch(SMALL))
        built = time.perf_counter() - started
        flush_started = time.perf_counter()
        os.sync()  # the build's writeback must not fall into the measurement (module docstring)
        flushed = time.perf_counter() - flush_started
        t = cat.load_table(f"bench.{ds.name}")  # a fresh handle, as a new writer would have
        sizes = [LARGE, SMALL] if level == args.levels[0] else [SMALL]
        for rows in sizes:
            r = measure_level(t, lake_stream, with_delta, delta_stream, rows, args.samples)
            r.update(level=level, build_s=built, flush_s=flushed, load_average=loadavg())
            levels.append(r)
            vs = (f", delta-rs {ms(r['delta']['median_s'])} ms: {r['ratio']:.2f}x wall, "
                  f"{r['cpu_ratio']:.2f}x CPU" if "delta" in r else "")
            print(f"[{ds.name}] {rows:>6}-row append at {level:>6} commits: lakefmt {ms(r['lakefmt']['median_s'])} ms"
                  f"{vs} (load {r['load_average']}; metadata file {r.get('metadata_json_bytes', 0):,} bytes, "
                  f"{r['history_files']} history files)", flush=True)
    small = [r for r in levels if r["rows"] == SMALL]
    unpaired = small[-1]["lakefmt"]["median_s"] / small[0]["lakefmt"]["median_s"] if len(small) > 1 else None
    paired = measure_growth(cat.load_table(reference.identifier), t, lake_stream, args.samples) \
        if len(small) > 1 else None
    if paired is not None:
        print(f"[{ds.name}] paired 10-row appends: {ms(paired['small']['median_s'])} ms at "
              f"{paired['prior_commits']['small']:,} commits, {ms(paired['large']['median_s'])} ms at "
              f"{paired['prior_commits']['large']:,}: growth {paired['growth']:.2f}x wall, "
              f"{paired['cpu_growth']:.2f}x CPU (load {paired['load_average']})", flush=True)
    return {"dataset": ds.name, "levels": levels, "growth": paired["growth"] if paired else None,
            "growth_unpaired": unpaired, "growth_paired": paired,
            "growth_span": [small[0]["level"], small[-1]["level"]] if small else None}


GOALS = {(LARGE, 10): 1.5, (SMALL, 10): 1.0, (SMALL, 1000): 0.5}


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def report(results: list[dict[str, Any]]) -> str:
    rows = []
    for res in results:
        for r in res["levels"]:
            goal = GOALS.get((r["rows"], r["level"]))
            ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "-"
            rows.append([res["dataset"], f"{r['rows']:,}", f"{r['prior_commits']['lakefmt']:,}",
                         ms(r["lakefmt"]["median_s"]), ms(r["lakefmt"]["cpu_median_s"]),
                         ms(r["delta"]["median_s"]) if "delta" in r else "-",
                         ms(r["delta"]["cpu_median_s"]) if "delta" in r else "-", ratio,
                         f"{r['cpu_ratio']:.2f}x" if "cpu_ratio" in r else "-",
                         ms(r["lakefmt_no_fsync"]["median_s"]),
                         f"{r['no_fsync_ratio']:.2f}x" if "no_fsync_ratio" in r else "-",
                         f"<= {goal}x: {verdict(r['ratio'] <= goal)}" if goal and "ratio" in r else "-",
                         r["load_average"].split(" ")[0]])
    text = markdown_table(["dataset", "rows", "prior commits", "lakefmt ms", "lakefmt CPU ms", "delta-rs ms",
                           "delta-rs CPU ms", "lakefmt / delta-rs", "CPU ratio", "lakefmt without fsync ms",
                           "without fsync / delta-rs", "goal", "load"], rows)
    for res in results:
        if res["growth"] is not None:
            lo, hi = res["growth_span"]
            text += (f"\n\n[{res['dataset']}] lakefmt 10-row append growth from {lo:,} to {hi:,} commits: "
                     f"{res['growth']:.2f}x (goal <= 1.3x: {verdict(res['growth'] <= 1.3)})")
    for res in results:
        small = [r for r in res["levels"] if r["rows"] == SMALL]
        labels = list(small[0]["breakdown_median_s"]) if small else []
        text += f"\n\n[{res['dataset']}] where a 10-row lakefmt append's time goes (median ms):\n\n"
        text += markdown_table(["part"] + [f"{r['level']:,}" for r in small],
                               [[label.replace("  ", "- ")] + [ms(r["breakdown_median_s"].get(label)) for r in small]
                                for label in labels])
    return text


def bench_fsync(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """Append latency with and without fsync, for small and large appends (COMMIT-20)."""
    ds = selected(args.dataset)[0]
    out = []
    for rows in (SMALL, LARGE):
        cat = lakefmt.Catalog(str(root / f"fsync-{rows}"), create=True)
        t = cat.create_table("bench.fsync", schema=ds.schema, partition_by=["day(ts)"])
        stream = Stream(ds)
        build_real(t, stream, 10)
        samples: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.fsync_samples):
            for fsync in (True, False) if i % 2 == 0 else (False, True):
                cat.io.fsync = fsync
                batch = stream.batch(rows)
                samples[fsync].append(timed_call(lambda b=batch, t=t: t.append(b))[0])
        cat.io.fsync = True
        result = {"dataset": ds.name, "rows": rows, "with_fsync_median_s": median(samples[True]),
                  "without_fsync_median_s": median(samples[False]), "with_fsync_s": samples[True],
                  "without_fsync_s": samples[False]}
        result["ratio"] = result["with_fsync_median_s"] / result["without_fsync_median_s"]
        print(f"{rows:>6}-row append: median {ms(result['with_fsync_median_s'])} ms with fsync, "
              f"{ms(result['without_fsync_median_s'])} ms without ({result['ratio']:.2f}x)", flush=True)
        out.append(result)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    levels = lambda s: [int(x) for x in s.split(",") if x]
    add_dataset_argument(parser)
    add_run_arguments(parser, quick="levels 10 and 200, 5 samples: a smoke run")
    parser.add_argument("--levels", type=levels, help="prior commits to measure at (default 10,1000,10000)")
    parser.add_argument("--delta-levels", type=levels, help="levels delta-rs is measured at (default 10,1000)")
    parser.add_argument("--samples", type=int, help="appends per level and side (default 15; quick 5)")
    parser.add_argument("--real-up-to", type=int, default=100)
    parser.add_argument("--no-delta", action="store_true")
    parser.add_argument("--fsync-cost", action="store_true", help="only compare appends with and without fsync")
    parser.add_argument("--fsync-samples", type=int, default=31)
    args = parser.parse_args()
    args.levels = args.levels or ([10, 200] if args.quick else [10, 1000, 10000])
    args.delta_levels = args.delta_levels or ([10, 200] if args.quick else [10, 1000])
    args.samples = args.samples or (5 if args.quick else 15)
    benchmark = Run("append", args)
    with work_dir(args.dir, prefix="lakefmt-bench-append-", keep=args.keep) as root:
        if args.fsync_cost:
            fsync = bench_fsync(args, root)
        else:
            results = [bench_dataset(ds, args, root) for ds in selected(args.dataset)]
    if args.fsync_cost:
        text = markdown_table(
            ["rows per append", "with fsync (median ms)", "without fsync (median ms)", "with / without"],
            [[f"{r['rows']:,}", ms(r["with_fsync_median_s"]), ms(r["without_fsync_median_s"]), f"{r['ratio']:.2f}x"]
             for r in fsync]) + f"\n\nload average at the start: {benchmark.started_load}"
        benchmark.publish(text, fsync, name="append-fsync", quick=False, loadavg=benchmark.started_load)
    else:
        benchmark.publish(report(results) + "\n\n" + benchmark.load_note(), results)


if __name__ == "__main__":
    main()
