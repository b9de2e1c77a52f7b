"""Benchmark: lakefmt compaction vs delta-rs ``optimize`` vs a plain pyarrow rewrite (issue 11, goals 3-5).

The same small-files data is registered twice: as a lakefmt table (written through
``Table.write_data_files`` and one append commit, partitioned by ``day(ts)``) and as a Delta
table (``deltalake.convert_to_deltalake`` over hard links to the very same Parquet files, in a
``day=YYYY-MM-DD/`` layout). Both compactors therefore read identical bytes.

Datasets (:mod:`loop_data`, ``--dataset``): ``telemetry`` (the hard one: 2,000 payloads, a
200-byte string per row; target file size 32 MiB) and ``artemis`` (narrow Artemis-like rows;
16 MiB). Shapes of each (``--quick`` shrinks them):

* ``1mb``: 1,000 files of ~1 MB over 10 day partitions (~1 GB);
* ``250kb``: 4,000 files of ~250 KB over 10 day partitions;
* ``tiny``: 240 tiny files in 3 day partitions (fixed costs);
* ``mem``: one ~1 GB day partition in 1 MB files, for peak memory with lakefmt's defaults
  (bin-pack, Z-order and sort; the goal is stated for Z-order).

Cases, each in a fresh process, timed inside it after imports (wall time and the CPU
time of all its threads), peak RSS from ``VmHWM``; the tables are reset to their
ingested state after every run:

* ``lakefmt binpack`` / ``sort`` / ``zorder``: ``t.compaction.run(...)`` with
  ``min_age_seconds=0`` and the dataset's target file size, verification included;
* ``delta compact`` / ``delta zorder``: ``DeltaTable.optimize.compact`` / ``.z_order``,
  same target size, ZSTD level 3 (lakefmt's level);
* ``pyarrow rewrite``: per partition, read every input, write once (``pq.write_table``,
  ZSTD 3), partitions one after another: the plain rewrite;
* with ``--references``: ``pyarrow zorder`` (a plain rank-and-interleave Z-order),
  ``lakefmt-binpack-noverify`` (outputs not read back, to price COMPACT-17) and
  ``duckdb rewrite`` (``COPY (SELECT * FROM read_parquet([...])) TO ...``).

Bin-pack cases run ``--runs`` times (default 3) on ``1mb``, ``--runs-250kb`` (1) on ``250kb`` and
``--tiny-runs`` (5) on ``tiny``, interleaved with delta-rs; the others once (``--binpack-only``
runs nothing but lakefmt's bin-pack and delta-rs's compact). Z-order and sort are over
``(payload_id, sensor_kind)``; lakefmt's sort is compared with delta-rs's Z-order (delta-rs has
no sort). The selective query (one payload, one sensor kind, one day) runs in a fresh process
before and after each compaction of ``1mb`` (after bin-pack on ``250kb``), through lakefmt's scan
(``t.scan(f).to_arrow()``) and through DuckDB over the planned files (``read_parquet([...])``),
alternating; both timings include lakefmt's planning.

Usage:
    python benchmarks/bench_compaction.py                        # telemetry, ~10 minutes on 2 cores
    python benchmarks/bench_compaction.py --dataset artemis      # the other dataset, ~8 minutes
    python benchmarks/bench_compaction.py --quick --dataset both  # smoke run, ~2 minutes
    python benchmarks/bench_compaction.py --binpack-only --runs-250kb 3  # goal 4's bin-pack rows only
    python benchmarks/bench_compaction.py --report benchmarks/results/compaction-....json

Results go to ``benchmarks/results/compaction-<dataset>-<UTC time>.json`` (quick runs to
``compaction-quick-latest.json``; ``--json PATH`` to choose); Markdown tables of medians,
ratios and the goals are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from loop_data import CLUSTER_COLUMNS as COLUMNS
from loop_data import DATASETS, CompactionShape, add_dataset_argument, loadavg, selected

TABLE = "bench.downlinks"
ZSTD_LEVEL = 3
MiB = 1024 * 1024


# -- data -------------------------------------------------------------------------------------------

def build_dataset(folder: str, dataset: str, shape: CompactionShape, with_delta: bool) -> dict[str, Any]:
    """Write the lakefmt table (and the Delta table over the same files) under ``folder``."""
    import lakefmt
    from lakefmt.commit import FileChange

    ds = DATASETS[dataset]
    started = time.perf_counter()
    catalog = lakefmt.Catalog(f"{folder}/lakefmt", create=True)
    t = catalog.create_table(TABLE, ds.schema, partition_by=["day(ts)"])

    def write(i: int) -> Any:
        return t.write_data_files(ds.rows(i, files=shape.files, rows=shape.rows, days=shape.days))

    with ThreadPoolExecutor(max_workers=2) as pool:
        data_files = [f for fs in pool.map(write, range(shape.files)) for f in fs]
    t.commit_change(FileChange("append", added=data_files), cleanup_on_failure=data_files)
    t.release_write_token()
    lakefmt_s = time.perf_counter() - started
    info: dict[str, Any] = {
        "files": len(data_files), "rows": sum(f.record_count for f in data_files),
        "bytes": sum(f.file_size_bytes for f in data_files), "partitions": shape.days, "lakefmt_build_s": lakefmt_s}
    if with_delta:
        from deltalake import Schema, convert_to_deltalake

        started = time.perf_counter()
        delta = f"{folder}/delta"
        for f in data_files:
            day = date(1970, 1, 1) + timedelta(days=int(f.partition[0]))
            os.makedirs(f"{delta}/day={day.isoformat()}", exist_ok=True)
            os.link(f"{t.location}/{f.path}", f"{delta}/day={day.isoformat()}/{os.path.basename(f.path)}")
        convert_to_deltalake(delta, partition_by=Schema.from_arrow(pa.schema([("day", pa.date32())])),
                             partition_strategy="hive")
        info["delta_build_s"] = time.perf_counter() - started
    info["mean_file_bytes"] = info["bytes"] / max(1, info["files"])
    return info


# -- resetting a table to its ingested state between runs --------------------------------------------

class DirState:
    """The files under a folder; :meth:`restore` deletes files added since and restores changed ones."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.files = self._scan()
        self.backup = tempfile.mkdtemp(prefix="bench-compaction-backup-")
        for rel, (size, _) in self.files.items():
            if not rel.endswith(".parquet") and size < 64 * MiB:  # catalog file, Delta log
                os.makedirs(os.path.dirname(f"{self.backup}/{rel}"), exist_ok=True)
                shutil.copy2(f"{root}/{rel}", f"{self.backup}/{rel}")

    def _scan(self) -> dict[str, tuple[int, int]]:
        out = {}
        for folder, _, names in os.walk(self.root):
            for n in names:
                p = os.path.join(folder, n)
                st = os.stat(p)
                out[os.path.relpath(p, self.root)] = (st.st_size, st.st_mtime_ns)
        return out

    def restore(self) -> None:
        now = self._scan()
        for rel, stat in now.items():
            if rel not in self.files:
                os.remove(f"{self.root}/{rel}")
            elif stat != self.files[rel]:
                if not os.path.exists(f"{self.backup}/{rel}"):
                    raise RuntimeError(f"{rel} changed during a run and has no backup")
                shutil.copy2(f"{self.backup}/{rel}", f"{self.root}/{rel}")
        missing = set(self.files) - set(now)
        if missing:
            raise RuntimeError(f"files disappeared during a run: {sorted(missing)[:5]}")

    def close(self) -> None:
        shutil.rmtree(self.backup, ignore_errors=True)


# -- workers (each runs in its own process) -----------------------------------------------------------

def maxrss_mb() -> float:
    """Peak resident set size of this process image, in MiB.

    Linux's ``ru_maxrss`` carries the parent's peak across fork/exec into the child, so a
    worker started by a large parent would report the parent's size; ``VmHWM`` (the same
    high-water mark, for this image only) is read instead where available.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (Rust and C++ pools included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_query(t: Any, dataset: str, runs: int) -> dict[str, Any]:
    """Median seconds of the dataset's selective query: lakefmt's scan and DuckDB over the planned files.

    Both include lakefmt's planning (DuckDB reads the files lakefmt planned); the two alternate,
    the order flipped every run. ``plan_s`` is planning alone.
    """
    import duckdb

    ds = DATASETS[dataset]
    con = duckdb.connect()
    lake: list[float] = []
    duck: list[float] = []
    plan: list[float] = []
    rows: set[int] = set()
    planned = 0

    def run_lakefmt() -> None:
        started = time.perf_counter()
        rows.add(t.scan(ds.query).to_arrow().num_rows)
        lake.append(time.perf_counter() - started)

    def run_duckdb() -> None:
        nonlocal planned
        started = time.perf_counter()
        paths = [task.location for task in t.scan(ds.query).plan().tasks]
        plan.append(time.perf_counter() - started)
        rows.add(con.read_parquet(paths).filter(ds.query_sql).to_arrow_table().num_rows if paths else 0)
        duck.append(time.perf_counter() - started)
        planned = len(paths)

    for r in range(runs):
        for run in (run_lakefmt, run_duckdb) if r % 2 == 0 else (run_duckdb, run_lakefmt):
            run()
    if len(rows) != 1:
        raise RuntimeError(f"lakefmt and DuckDB disagree on the query's rows: {rows}")
    return {"lakefmt_s": statistics.median(lake), "duckdb_s": statistics.median(duck),
            "plan_s": statistics.median(plan), "lakefmt_best_s": min(lake), "duckdb_best_s": min(duck),
            "files_planned": planned, "rows": rows.pop(), "runs": runs}


def plain_zorder_indices(table: pa.Table, columns: list[str]) -> pa.Array:
    """The straightforward pyarrow rank-and-interleave Z-order (the reference, kept apart from lakefmt's).

    Dense rank per column (``pc.rank``), spread to ``64 // k`` bits, bits interleaved
    one kernel call at a time over every row, then a sort of the 64-bit keys.
    """
    k = len(columns)
    bits = 64 // k
    one = pa.scalar(1, pa.uint64())
    key = pa.repeat(pa.scalar(0, pa.uint64()), table.num_rows)
    for i, name in enumerate(columns):
        ranks = pc.rank(table.column(name).combine_chunks(), sort_keys=[("", "ascending", "at_end")],
                        tiebreaker="dense")
        ranks = pc.subtract(ranks.cast(pa.uint64()), one)
        width = int(pc.max(ranks).as_py()).bit_length()
        shift = bits - width
        for src in range(max(0, -shift), width):
            bit = pc.bit_wise_and(pc.shift_right(ranks, pa.scalar(src, pa.uint64())), one)
            key = pc.bit_wise_or(key, pc.shift_left(bit, pa.scalar((src + shift) * k + (k - 1 - i), pa.uint64())))
    return pc.sort_indices(key)


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one case; returns seconds, output size and peak RSS."""
    case, folder, target = spec["case"], spec["dir"], spec["target"]
    out: dict[str, Any] = {"case": case}
    if case.startswith("lakefmt"):
        import lakefmt
        import lakefmt.compaction

        t = lakefmt.Catalog(f"{folder}/lakefmt").load_table(TABLE)
        out["rss_before_mb"] = round(maxrss_mb(), 1)
        if case == "lakefmt-query":
            out.update(measure_query(t, spec["dataset"], spec["query_runs"]))
            return out
        strategy = case.split("-")[1]
        if case.endswith("-noverify"):  # to measure what reading the outputs back costs (COMPACT-17)
            from dataclasses import replace

            from lakefmt.compaction import runner

            make_task = runner.make_task
            runner.make_task = lambda *a: replace(make_task(*a), verify=False)
        kwargs: dict[str, Any] = {"sort_by": COLUMNS} if strategy == "sort" else (
            {"columns": COLUMNS} if strategy == "zorder" else {})
        options = {"min_age_seconds": 0, "target_file_size": target, **spec.get("options", {})}
        started, cpu = time.perf_counter(), cpu_seconds()
        result = t.compaction.run(strategy, **kwargs, **options)
        out["seconds"], out["cpu_seconds"] = time.perf_counter() - started, cpu_seconds() - cpu
        if result.groups_failed or result.groups_committed != result.groups_planned:
            raise RuntimeError(f"compaction did not commit every group:\n{result.summary()}")
        out.update(output_bytes=result.bytes_written, output_files=result.files_written,
                   input_files=result.files_rewritten, groups=result.groups_committed,
                   methods=sorted({g.method for g in result.groups if g.method}),
                   group_seconds=[round(g.seconds, 2) for g in result.groups])
    elif case.startswith("delta"):
        from deltalake import DeltaTable, WriterProperties

        dt = DeltaTable(f"{folder}/delta")
        props = WriterProperties(compression="ZSTD", compression_level=ZSTD_LEVEL)
        out["rss_before_mb"] = round(maxrss_mb(), 1)
        started, cpu = time.perf_counter(), cpu_seconds()
        if case == "delta-compact":
            metrics = dt.optimize.compact(target_size=target, writer_properties=props)
        else:
            metrics = dt.optimize.z_order(COLUMNS, target_size=target, writer_properties=props)
        out["seconds"], out["cpu_seconds"] = time.perf_counter() - started, cpu_seconds() - cpu
        added = json.loads(metrics["filesAdded"]) if isinstance(metrics["filesAdded"], str) else metrics["filesAdded"]
        out.update(output_bytes=int(added["totalSize"]), output_files=int(metrics["numFilesAdded"]),
                   input_files=int(metrics["numFilesRemoved"]))
    elif case.startswith(("pyarrow", "duckdb")):
        import duckdb

        groups: dict[str, list[str]] = spec["groups"]
        scratch = tempfile.mkdtemp(prefix="bench-rewrite-", dir=folder)
        con = duckdb.connect()
        out["rss_before_mb"] = round(maxrss_mb(), 1)
        total = 0
        started, cpu = time.perf_counter(), cpu_seconds()
        for i, paths in enumerate(groups.values()):
            dest = f"{scratch}/part-{i:05d}.parquet"
            if case.startswith("duckdb"):  # DuckDB as the engine: read every input, write once
                order = " ORDER BY payload_id, sensor_kind" if case == "duckdb-sort" else ""
                con.execute(f"COPY (SELECT * FROM read_parquet(?){order}) TO '{dest}' "
                            f"(FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL {ZSTD_LEVEL})", [paths])
            elif case == "pyarrow-stream":  # one batch at a time: memory bounded by a batch
                writer = None
                for p in paths:
                    for batch in pq.ParquetFile(p).iter_batches(batch_size=65_536):
                        if writer is None:
                            writer = pq.ParquetWriter(dest, batch.schema, compression="zstd",
                                                      compression_level=ZSTD_LEVEL)
                        writer.write_batch(batch)
                if writer is not None:
                    writer.close()
            else:  # the plain rewrite: read every input, (Z-order,) write once; pyarrow defaults otherwise
                table = pa.concat_tables([pq.ParquetFile(p).read() for p in paths])
                if case == "pyarrow-zorder":
                    table = table.take(plain_zorder_indices(table, COLUMNS))
                pq.write_table(table, dest, compression="zstd", compression_level=ZSTD_LEVEL)
                del table
            total += os.path.getsize(dest)
        out["seconds"], out["cpu_seconds"] = time.perf_counter() - started, cpu_seconds() - cpu
        out.update(output_bytes=total, output_files=len(groups), input_files=sum(len(v) for v in groups.values()))
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        raise ValueError(case)
    out.setdefault("peak_rss_mb", round(maxrss_mb(), 1))
    return out


def run_case(spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", f.name], capture_output=True, text=True,
                              timeout=timeout, check=False)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError(f"case {spec['case']} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def partition_groups(folder: str) -> dict[str, list[str]]:
    """The lakefmt table's files by partition (absolute paths), for the pyarrow rewrite."""
    import lakefmt

    t = lakefmt.Catalog(f"{folder}/lakefmt").load_table(TABLE)
    groups: dict[str, list[str]] = {}
    for task in t.scan().plan().tasks:
        groups.setdefault(repr(task.data_file.partition), []).append(task.location)
    return {k: sorted(v) for k, v in sorted(groups.items())}


# -- orchestration -----------------------------------------------------------------------------------

BINPACK_CASES = ("lakefmt-binpack", "delta-compact", "pyarrow-rewrite")
LAYOUT_CASES = ("lakefmt-zorder", "delta-zorder", "lakefmt-sort")
REFERENCE_CASES = ("pyarrow-zorder", "lakefmt-binpack-noverify", "duckdb-rewrite")
QUERY_CASES = ("lakefmt-binpack", "lakefmt-sort", "lakefmt-zorder")
ORDER = (*BINPACK_CASES, *LAYOUT_CASES, *REFERENCE_CASES)
DELTA_OF = {"lakefmt-binpack": "delta-compact", "lakefmt-binpack-noverify": "delta-compact",
            "pyarrow-rewrite": "delta-compact", "duckdb-rewrite": "delta-compact",
            "lakefmt-zorder": "delta-zorder", "pyarrow-zorder": "delta-zorder", "lakefmt-sort": "delta-zorder"}


def schedules(args: argparse.Namespace) -> dict[str, list[tuple[str, int]]]:
    """(case, runs) per shape; cases are interleaved run by run. ``--binpack-only``: lakefmt's
    bin-pack and delta-rs's compact alone (no pyarrow reference, Z-order, sort or queries)."""
    pair = ("lakefmt-binpack", "delta-compact")
    if args.binpack_only:
        return {"1mb": [(c, args.runs) for c in pair], "250kb": [(c, args.runs_250kb) for c in pair],
                "tiny": [(c, args.tiny_runs) for c in pair]}
    layout = [(c, args.layout_runs) for c in LAYOUT_CASES]
    if args.layout_only:
        return {"1mb": layout}
    references = [(c, 1) for c in REFERENCE_CASES] if args.references else []
    return {"1mb": [(c, args.runs) for c in BINPACK_CASES] + layout + references,
            "250kb": [(c, args.runs_250kb) for c in pair],
            "tiny": [(c, args.tiny_runs) for c in pair]}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bench_shape(root: str, dataset: str, shape_name: str, shape: CompactionShape, args: argparse.Namespace,
                schedule: list[tuple[str, int]]) -> dict[str, Any]:
    """Build one table, then run ``schedule`` (case, runs), interleaving the cases run by run."""
    name = f"{dataset}/{shape_name}"
    folder = f"{root}/{dataset}-{shape_name}"
    target = DATASETS[dataset].target_mib * MiB
    log(f"[{name}] writing {shape.files} files x {shape.rows} rows over {shape.days} day partitions ...")
    info = build_dataset(folder, dataset, shape, with_delta=any(c.startswith("delta") for c, _ in schedule))
    log(f"[{name}] {info['files']} files, {info['bytes'] / 1e6:.0f} MB, {info['rows']:,} rows "
        f"(lakefmt {info['lakefmt_build_s']:.0f} s, delta {info.get('delta_build_s', 0):.1f} s)")
    groups = partition_groups(folder)
    states = [DirState(f"{folder}/lakefmt")] + ([DirState(f"{folder}/delta")] if os.path.isdir(
        f"{folder}/delta") else [])
    base = {"dir": folder, "target": target, "groups": groups, "dataset": dataset}
    query_cases = () if args.binpack_only else QUERY_CASES if shape_name == "1mb" else (
        ("lakefmt-binpack",) if shape_name == "250kb" else ())
    out: dict[str, Any] = {"dataset": dataset, "shape": shape_name, "data": info, "target_file_size": target,
                           "runs": {c: [] for c, _ in schedule}, "load_average_at_start": loadavg()}
    try:
        if query_cases:
            out["query_before"] = run_case({**base, "case": "lakefmt-query", "query_runs": args.query_runs})
            q = out["query_before"]
            log(f"[{name}] query before: {q['files_planned']} files, lakefmt {q['lakefmt_s'] * 1000:.0f} ms, "
                f"duckdb {q['duckdb_s'] * 1000:.0f} ms, {q['rows']} rows")
        for r in range(max(n for _, n in schedule)):
            for case, runs in schedule:
                if r >= runs:
                    continue
                result = run_case({**base, "case": case})
                result["load_average"] = loadavg()
                if r == 0 and case in query_cases:  # in a fresh process, as the query before was
                    result["query"] = run_case({**base, "case": "lakefmt-query", "query_runs": args.query_runs})
                for s in states:
                    s.restore()
                out["runs"][case].append(result)
                log(f"[{name}] run {r + 1}/{runs} {case}: {result['seconds']:.2f} s "
                    f"(cpu {result['cpu_seconds']:.2f} s), {result['output_bytes'] / 1e6:.1f} MB in "
                    f"{result['output_files']} files, peak {result['peak_rss_mb']:.0f} MB, load "
                    f"{result['load_average'].split(' ')[0]}"
                    + (f"; query after: {result['query']['files_planned']} files, lakefmt "
                       f"{result['query']['lakefmt_s'] * 1000:.0f} ms, duckdb "
                       f"{result['query']['duckdb_s'] * 1000:.0f} ms" if "query" in result else ""))
    finally:
        for s in states:
            s.close()
    out["median"] = {c: {"seconds": statistics.median(r["seconds"] for r in rs),
                         "cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                         "output_bytes": statistics.median(r["output_bytes"] for r in rs),
                         "output_files": rs[0]["output_files"], "runs": len(rs),
                         "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs)}
                     for c, rs in out["runs"].items() if rs}
    return out


def bench_memory(root: str, dataset: str, shape: CompactionShape, args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of rewriting one ~1 GB partition with lakefmt's defaults: bin-pack, Z-order and sort."""
    folder = f"{root}/{dataset}-mem"
    log(f"[{dataset}/mem] writing one partition of {shape.files} files x {shape.rows} rows ...")
    info = build_dataset(folder, dataset, shape, with_delta=False)
    log(f"[{dataset}/mem] {info['files']} files, {info['bytes'] / 1e6:.0f} MB")
    groups = partition_groups(folder)
    state = DirState(f"{folder}/lakefmt")
    results = []
    try:
        for case in ("lakefmt-binpack", "lakefmt-zorder", "lakefmt-sort"):
            result = run_case({"dir": folder, "target": DATASETS[dataset].target_mib * MiB, "groups": groups,
                               "case": case, "dataset": dataset})
            state.restore()
            result["load_average"] = loadavg()
            results.append(result)
            log(f"[{dataset}/mem] {case}: peak RSS {result['peak_rss_mb']:.0f} MB "
                f"(after imports {result['rss_before_mb']:.0f} MB), {result['seconds']:.1f} s, "
                f"method {','.join(result.get('methods', []))}")
    finally:
        state.close()
    return {"dataset": dataset, "data": info, "results": results}


def same_runs(ds: dict[str, Any], case: str, runs: int) -> dict[str, float] | None:
    """Medians of ``case`` over its first ``runs`` runs: the runs made alongside a case run ``runs`` times.

    Cases are interleaved run by run, so a case run once is compared with the
    reference's first run, made minutes apart on the same machine, not with a median
    that includes runs made under other load.
    """
    rs = ds["runs"].get(case, [])[:runs]
    if not rs:
        return None
    return {k: statistics.median(r[k] for r in rs) for k in ("seconds", "cpu_seconds", "output_bytes")}


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def goals(results: dict[str, Any]) -> list[list[str]]:
    """Rows of the goal table (issue 11, goals 3-5): dataset, goal, measured, verdict."""
    rows: list[list[str]] = []

    def add(dataset: str, goal: str, measured: str, ok: bool | None) -> None:
        rows.append([dataset, goal, measured, "-" if ok is None else ("met" if ok else "**missed**")])

    for ds in results["shapes"].values():
        dataset, shape = ds["dataset"], ds["shape"]
        med = ds["median"]
        if "lakefmt-binpack" in med and "delta-compact" in med:
            m = med["lakefmt-binpack"]
            d = same_runs(ds, "delta-compact", m["runs"])
            w, c = m["seconds"] / d["seconds"], m["cpu_seconds"] / d["cpu_seconds"]
            add(dataset, f"bin-pack {shape} <= 0.8x delta-rs (wall, CPU)", f"{w:.2f}x, {c:.2f}x",
                w <= 0.8 and c <= 0.8)
        if "lakefmt-zorder" in med and "delta-zorder" in med:
            m = med["lakefmt-zorder"]
            d = same_runs(ds, "delta-zorder", m["runs"])
            w, c = m["seconds"] / d["seconds"], m["cpu_seconds"] / d["cpu_seconds"]
            add(dataset, f"Z-order {shape} <= 0.7x delta-rs (wall; CPU)", f"{w:.2f}x; {c:.2f}x", w <= 0.7)
        qb = ds.get("query_before")
        if not qb:
            continue
        queries = [("before compaction", qb)] + [(f"after {c.split('-')[1]}", ds["runs"][c][0]["query"])
                                                 for c in QUERY_CASES if ds["runs"].get(c) and
                                                 "query" in ds["runs"][c][0]]
        for label, q in queries:
            r = q["lakefmt_s"] / q["duckdb_s"]
            add(dataset, f"selective query {shape} {label}: lakefmt scan <= 1.2x DuckDB over the planned files",
                f"{r:.2f}x ({q['lakefmt_s'] * 1000:.0f} vs {q['duckdb_s'] * 1000:.0f} ms)", r <= 1.2)
        gains = {label: qb["lakefmt_s"] / q["lakefmt_s"] for label, q in queries[1:]}
        if shape == "1mb" and gains:
            best = max(gains.get("after sort", 0), gains.get("after zorder", 0))
            add(dataset, "query gain after sort or Z-order >= 20x (lakefmt's scan)",
                "; ".join(f"{k}: {v:.1f}x" for k, v in gains.items()), best >= 20)
    for dataset, mem in results.get("memory", {}).items():
        for r in mem["results"]:
            if r["case"] == "lakefmt-zorder":
                gigabytes = mem["data"]["bytes"] / 1e9  # the goal is stated for a 1 GB partition
                add(dataset, f"Z-order peak RSS < 600 MB for a 1 GB partition (this one: {gigabytes:.2f} GB)",
                    f"{r['peak_rss_mb']:.0f} MB", r["peak_rss_mb"] < 600 if gigabytes > 0.9 else None)
    return rows


def markdown(results: dict[str, Any]) -> str:
    """The tables for benchmarks/README.md."""
    lines = []
    for key, ds in results["shapes"].items():
        med, d = ds["median"], ds["data"]
        loads = sorted(float(r["load_average"].split(" ")[0]) for rs in ds["runs"].values() for r in rs)
        lines += [(f"**{key}**: {d['files']:,} files of {d['mean_file_bytes'] / 1e3:,.0f} KB on average, "
                   f"{d['bytes'] / 1e6:,.0f} MB, {d['rows']:,} rows, {d['partitions']} day partitions; "
                   f"target file size {ds['target_file_size'] // MiB} MiB; load average "
                   f"{loads[0]:.1f}-{loads[-1]:.1f}"), "",
                  ("| case | runs | wall s (median) | CPU s (median) | wall vs delta-rs | CPU vs delta-rs | "
                   "CPU vs pyarrow rewrite | output MB | files | peak RSS MB |"),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for case in ORDER:
            if case not in med:
                continue
            m = med[case]
            delta = same_runs(ds, DELTA_OF.get(case, case), m["runs"])
            ref = same_runs(ds, "pyarrow-rewrite", m["runs"])
            lines.append(
                f"| {case} | {m['runs']} | {m['seconds']:.2f} | {m['cpu_seconds']:.2f} | "
                f"{ratio(m['seconds'], delta['seconds']) if delta else ''} | "
                f"{ratio(m['cpu_seconds'], delta['cpu_seconds']) if delta else ''} | "
                f"{ratio(m['cpu_seconds'], ref['cpu_seconds']) if ref else ''} | {m['output_bytes'] / 1e6:.1f} | "
                f"{m['output_files']} | {m['peak_rss_mb']:.0f} |")
        qb = ds.get("query_before")
        if qb:
            lines += ["", (f"| selective query ({qb['rows']:,} rows; median of {qb['runs']}) | files planned | "
                           "lakefmt scan ms | gain | DuckDB over planned files ms | lakefmt / DuckDB |"),
                      "|---|---:|---:|---:|---:|---:|",
                      (f"| before compaction | {qb['files_planned']} | {qb['lakefmt_s'] * 1000:.1f} | | "
                       f"{qb['duckdb_s'] * 1000:.1f} | {ratio(qb['lakefmt_s'], qb['duckdb_s'])} |")]
            for case in QUERY_CASES:
                runs_ = ds["runs"].get(case)
                if not runs_ or "query" not in runs_[0]:
                    continue
                q = runs_[0]["query"]
                lines.append(
                    f"| after {case.split('-')[1]} | {q['files_planned']} | {q['lakefmt_s'] * 1000:.1f} | "
                    f"{ratio(qb['lakefmt_s'], q['lakefmt_s'])} | {q['duckdb_s'] * 1000:.1f} | "
                    f"{ratio(q['lakefmt_s'], q['duckdb_s'])} |")
        lines.append("")
    for dataset, mem in results.get("memory", {}).items():
        d = mem["data"]
        lines += [(f"**{dataset}/mem**: one partition of {d['bytes'] / 1e6:,.0f} MB in {d['files']:,} files "
                   f"({d['rows']:,} rows), lakefmt's defaults; peak RSS of a fresh process (VmHWM)"), "",
                  "| case | method | peak RSS MB | after imports MB | wall s | CPU s | load |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['case']} | {','.join(r.get('methods', []))} | {r['peak_rss_mb']:.0f} | "
                  f"{r['rss_before_mb']:.0f} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | "
                  f"{r['load_average'].split(' ')[0]} |" for r in mem["results"]]
        lines.append("")
    lines += ["**Goals**", "", "| dataset | goal | measured (same run) | |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in goals(results)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser, default="telemetry")
    parser.add_argument("--quick", action="store_true", help="small tables, one run each: a smoke run")
    parser.add_argument("--runs", type=int, help="runs of the bin-pack cases on 1mb (default 3; quick 1)")
    parser.add_argument("--layout-runs", type=int, default=1, help="runs of the Z-order and sort cases on 1mb")
    parser.add_argument("--tiny-runs", type=int, help="runs of the bin-pack cases on tiny (default 5; quick 2)")
    parser.add_argument("--runs-250kb", type=int, default=1, help="runs of the bin-pack cases on 250kb (default 1)")
    parser.add_argument("--binpack-only", action="store_true",
                        help="only lakefmt bin-pack and delta-rs compact (no references, layouts, queries or mem)")
    parser.add_argument("--layout-only", action="store_true",
                        help="only Z-order (lakefmt, delta-rs) and sort on 1mb, with the queries (and mem unless skipped)")
    parser.add_argument("--query-runs", type=int, help="repetitions of each query (default 7; quick 3)")
    parser.add_argument("--references", action="store_true",
                        help="also run pyarrow Z-order, bin-pack without verification and a DuckDB rewrite on 1mb")
    parser.add_argument("--skip", nargs="*", default=[], choices=["1mb", "250kb", "tiny", "mem"],
                        help="shapes to skip")
    parser.add_argument("--dir", help="work folder (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", help="write the results here instead of benchmarks/results/")
    parser.add_argument("--report", metavar="JSON", help="print the tables of an earlier results file and exit")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with open(args.worker) as f:
            print(json.dumps(worker(json.load(f))))
        return
    if args.report:
        print(markdown(json.loads(Path(args.report).read_text())))
        return
    args.runs = args.runs or (1 if args.quick else 3)
    args.tiny_runs = args.tiny_runs or (2 if args.quick else 5)
    args.query_runs = args.query_runs or (3 if args.quick else 7)
    root = args.dir or tempfile.mkdtemp(prefix="bench-compaction-")
    os.makedirs(root, exist_ok=True)
    started = time.perf_counter()
    import deltalake
    import duckdb

    results: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/bench_compaction.py", *sys.argv[1:]]),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "pyarrow": pa.__version__,
                    "deltalake": deltalake.__version__, "duckdb": duckdb.__version__,
                    "platform": platform.platform(), "loadavg_at_start": loadavg(),
                    "git": subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                                          capture_output=True, text=True, check=False).stdout.strip()},
        "shapes": {}, "memory": {}}
    try:
        for ds in selected(args.dataset):
            shapes = ds.quick_shapes if args.quick else ds.shapes
            for shape_name, schedule in schedules(args).items():
                if shape_name not in args.skip:
                    key = f"{ds.name}/{shape_name}"
                    results["shapes"][key] = bench_shape(root, ds.name, shape_name, shapes[shape_name], args,
                                                         schedule)
                    shutil.rmtree(f"{root}/{ds.name}-{shape_name}", ignore_errors=True)
            if "mem" not in args.skip and not args.binpack_only:
                results["memory"][ds.name] = bench_memory(root, ds.name, shapes["mem"], args)
                shutil.rmtree(f"{root}/{ds.name}-mem", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["machine"]["loadavg_at_end"] = loadavg()
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        path = Path(args.json)
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = REPO / "benchmarks" / "results" / (
            "compaction-quick-latest.json" if args.quick else f"compaction-{args.dataset}-{stamp}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str))
    print(markdown(results))
    log(f"results: {path} (total {results['total_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
