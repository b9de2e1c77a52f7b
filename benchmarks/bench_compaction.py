"""Benchmark: lakefmt compaction vs delta-rs ``optimize`` vs a plain pyarrow rewrite (issue 3, Benchmarks).

The same small-files data is registered twice: as a lakefmt table (written through
``Table.write_data_files`` and one append commit) and as a Delta table
(``deltalake.convert_to_deltalake`` over hard links to the very same Parquet files,
in a ``day=YYYY-MM-DD/`` layout). Both compactors therefore read identical bytes.

Data sets (the defaults; ``--quick`` shrinks them):

* ``1k``: 1,000 files of ~1 MB over 10 day partitions (~1 GB);
* ``4k``: 4,000 files of ~250 KB over 10 day partitions (~1 GB);
* ``mem``: one day partition of ~1 GB in 1 MB files, for peak memory.

Rows imitate Artemis downlinks (``lakefmt.demo``): ``ts`` (random within each file's
ingest window: high cardinality), ``mission_id`` (8 values), ``payload_id`` (200),
``sensor_kind`` (5 strings), ``seq`` (unique, increasing) and ``value`` (random double).

Cases, each in a fresh process, timed inside it after imports (wall time and the CPU
time of all its threads), peak RSS from ``VmHWM``; the tables are reset to their
ingested state after every run:

* ``lakefmt binpack`` / ``sort`` / ``zorder``: ``t.compaction.run(...)`` with
  ``min_age_seconds=0`` and target file size ``--target-mib``, verification included;
  ``lakefmt-binpack-noverify`` is the same without reading the outputs back (a
  reference, to price COMPACT-17; the inputs are still hashed);
* ``delta compact`` / ``delta zorder``: ``DeltaTable.optimize.compact`` / ``.z_order``,
  same target size, ZSTD level 3 (lakefmt's level);
* ``pyarrow rewrite``: per partition, read every input, write once (``pq.write_table``,
  ZSTD 3, pyarrow defaults otherwise), partitions one after another: the plain rewrite
  the issue names as the reference; ``pyarrow zorder`` adds a plain rank-and-interleave
  Z-order (:func:`plain_zorder_indices`) and a take;
* ``duckdb rewrite``: the same per partition with DuckDB, ``COPY (SELECT * FROM
  read_parquet([...])) TO ... (FORMAT parquet, COMPRESSION zstd)`` (an engine candidate).

Bin-pack cases run ``--runs`` times (default 3) on ``1k``, interleaved; the others once.
Z-order and sort are over ``(payload_id, sensor_kind)``. The selective query is one
payload and sensor kind on one day: through lakefmt's scan (``t.scan(f).to_arrow()``)
and through DuckDB over the planned files (``read_parquet([...])``), in a fresh process
before and after compaction; both timings include lakefmt's planning.

Usage:
    python benchmarks/bench_compaction.py                 # ~10 minutes on 2 quiet cores
    python benchmarks/bench_compaction.py --quick         # ~1 minute smoke run
    python benchmarks/bench_compaction.py --runs 5 --dir /tmp/bench-compaction --keep

Results go to ``benchmarks/results/compaction-<UTC time>.json`` (quick runs to
``compaction-quick-latest.json``; ``--json PATH`` to choose); a Markdown table of
medians and ratios is printed at the end.
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

from lakefmt.demo import SCHEMA, SENSOR_KINDS  # the same Artemis-like rows as the demo

TABLE = "bench.downlinks"
PAYLOADS = 200
DAY0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
COLUMNS = ["payload_id", "sensor_kind"]  # Z-order columns and sort keys
QUERY_DAY = 1
ZSTD_LEVEL = 3
MiB = 1024 * 1024

DATASETS = {  # name: (files, rows per file, day partitions); ~13.5 bytes per row as lakefmt writes them
    "1k": (1000, 75_000, 10),   # ~1 MB files
    "4k": (4000, 19_000, 10),   # ~250 KB files
    "mem": (1000, 75_000, 1),   # one ~1 GB partition
}
QUICK_DATASETS = {
    "1k": (60, 75_000, 3),
    "4k": (240, 19_000, 3),
    "mem": (64, 75_000, 1),
}


# -- data -------------------------------------------------------------------------------------------

def file_rows(index: int, files: int, rows: int, days: int) -> pa.Table:
    """The rows of ingest file ``index``: one time window of one day (files are in time order)."""
    per_day = files // days
    day, slot = divmod(index, per_day)
    window_us = 86_400_000_000 // per_day
    start_us = int((DAY0 + timedelta(days=day)).timestamp() * 1_000_000) + slot * window_us

    def uniform(salt: int) -> pa.Array:
        return pc.random(rows, initializer=index * 1_000_003 + salt)

    def scaled(salt: int, n: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(uniform(salt), n)), pa.int64())

    return pa.table({
        "ts": pc.cast(pc.add(scaled(1, window_us), start_us), pa.timestamp("us", tz="UTC")),
        "mission_id": pc.cast(scaled(2, 8), pa.int32()),
        "payload_id": scaled(3, PAYLOADS),
        "sensor_kind": SENSOR_KINDS.take(scaled(4, len(SENSOR_KINDS))),
        "seq": pa.array(range(index * rows, (index + 1) * rows), pa.int64()),
        "value": pc.multiply(uniform(5), 100.0),
    }, schema=SCHEMA)


def build_dataset(folder: str, name: str, files: int, rows: int, days: int, with_delta: bool) -> dict[str, Any]:
    """Write the lakefmt table (and the Delta table over the same files) under ``folder``."""
    import lakefmt
    from lakefmt.commit import FileChange

    started = time.perf_counter()
    catalog = lakefmt.Catalog(f"{folder}/lakefmt", create=True)
    t = catalog.create_table(TABLE, SCHEMA, partition_by=["day(ts)"])

    def write(i: int) -> Any:
        return t.write_data_files(file_rows(i, files, rows, days))

    with ThreadPoolExecutor(max_workers=2) as pool:
        data_files = [f for fs in pool.map(write, range(files)) for f in fs]
    t.commit_change(FileChange("append", added=data_files), cleanup_on_failure=data_files)
    t.release_write_token()
    lakefmt_s = time.perf_counter() - started
    info: dict[str, Any] = {
        "name": name, "files": len(data_files), "rows": sum(f.record_count for f in data_files),
        "bytes": sum(f.file_size_bytes for f in data_files), "partitions": days, "lakefmt_build_s": lakefmt_s}
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


def query_filter() -> tuple[str, str]:
    """The selective query: one payload and sensor kind on one day, in lakefmt and DuckDB syntax."""
    lo = (DAY0 + timedelta(days=QUERY_DAY)).strftime("%Y-%m-%d %H:%M:%S")
    hi = (DAY0 + timedelta(days=QUERY_DAY + 1)).strftime("%Y-%m-%d %H:%M:%S")
    where = "payload_id = 17 AND sensor_kind = 'imu'"
    return (f"ts >= TIMESTAMPTZ '{lo}' AND ts < TIMESTAMPTZ '{hi}' AND {where}",
            f"ts >= TIMESTAMPTZ '{lo}+00' AND ts < TIMESTAMPTZ '{hi}+00' AND {where}")


def measure_query(t: Any, runs: int) -> dict[str, Any]:
    """Median seconds of the selective query through lakefmt's scan and DuckDB over the planned files."""
    import duckdb

    lake_filter, duck_filter = query_filter()
    con = duckdb.connect()
    lake, duck, rows, planned = [], [], set(), 0
    for _ in range(runs):
        started = time.perf_counter()
        result = t.scan(lake_filter).to_arrow()
        lake.append(time.perf_counter() - started)
        rows.add(result.num_rows)
        started = time.perf_counter()
        paths = [task.location for task in t.scan(lake_filter).plan().tasks]
        got = con.read_parquet(paths).filter(duck_filter).to_arrow_table()
        duck.append(time.perf_counter() - started)
        rows.add(got.num_rows)
        planned = len(paths)
    if len(rows) != 1:
        raise RuntimeError(f"lakefmt and DuckDB disagree on the query's rows: {rows}")
    return {"lakefmt_s": statistics.median(lake), "duckdb_s": statistics.median(duck),
            "lakefmt_best_s": min(lake), "duckdb_best_s": min(duck),
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
        import lakefmt.compaction  # noqa: F401 - imported before the clock starts, as deltalake is

        t = lakefmt.Catalog(f"{folder}/lakefmt").load_table(TABLE)
        out["rss_before_mb"] = round(maxrss_mb(), 1)
        if case == "lakefmt-query":
            out.update(measure_query(t, spec["query_runs"]))
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
LAYOUT_CASES = ("lakefmt-zorder", "delta-zorder", "pyarrow-zorder", "lakefmt-sort")
REFERENCE_CASES = ("lakefmt-binpack-noverify", "duckdb-rewrite")
QUERY_CASES = ("lakefmt-binpack", "lakefmt-sort", "lakefmt-zorder")
ORDER = (*BINPACK_CASES, *LAYOUT_CASES, *REFERENCE_CASES)
DELTA_OF = {"lakefmt-binpack": "delta-compact", "lakefmt-binpack-noverify": "delta-compact",
            "pyarrow-rewrite": "delta-compact", "duckdb-rewrite": "delta-compact",
            "lakefmt-zorder": "delta-zorder", "pyarrow-zorder": "delta-zorder", "lakefmt-sort": "delta-zorder"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bench_dataset(root: str, name: str, shape: tuple[int, int, int], args: argparse.Namespace,
                  schedule: list[tuple[str, int]]) -> dict[str, Any]:
    """Build one data set, then run ``schedule`` (case, runs), interleaving the cases run by run."""
    folder = f"{root}/{name}"
    files, rows, days = shape
    log(f"[{name}] writing {files} files x {rows} rows over {days} day partitions ...")
    info = build_dataset(folder, name, files, rows, days, with_delta=any(c.startswith("delta") for c, _ in schedule))
    log(f"[{name}] {info['files']} files, {info['bytes'] / 1e6:.0f} MB, {info['rows']:,} rows "
        f"(lakefmt {info['lakefmt_build_s']:.0f} s, delta {info.get('delta_build_s', 0):.1f} s)")
    groups = partition_groups(folder)
    states = [DirState(f"{folder}/lakefmt")] + ([DirState(f"{folder}/delta")] if os.path.isdir(
        f"{folder}/delta") else [])
    base = {"dir": folder, "target": args.target_mib * MiB, "groups": groups}
    out: dict[str, Any] = {"data": info, "target_file_size": args.target_mib * MiB,
                           "runs": {c: [] for c, _ in schedule}}
    try:
        out["query_before"] = run_case({**base, "case": "lakefmt-query", "query_runs": args.query_runs})
        q = out["query_before"]
        log(f"[{name}] query before: {q['files_planned']} files, lakefmt {q['lakefmt_s'] * 1000:.0f} ms, "
            f"duckdb {q['duckdb_s'] * 1000:.0f} ms, {q['rows']} rows")
        for r in range(max(n for _, n in schedule)):
            for case, runs in schedule:
                if r >= runs:
                    continue
                result = run_case({**base, "case": case})
                if r == 0 and case in QUERY_CASES:  # in a fresh process, as the query before was
                    result["query"] = run_case({**base, "case": "lakefmt-query", "query_runs": args.query_runs})
                for s in states:
                    s.restore()
                out["runs"][case].append(result)
                log(f"[{name}] run {r + 1}/{runs} {case}: {result['seconds']:.2f} s "
                    f"(cpu {result['cpu_seconds']:.2f} s), {result['output_bytes'] / 1e6:.1f} MB in "
                    f"{result['output_files']} files, peak {result['peak_rss_mb']:.0f} MB"
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


def bench_memory(root: str, shape: tuple[int, int, int], args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of rewriting one large partition: by strategy and max group size."""
    folder = f"{root}/mem"
    files, rows, days = shape
    log(f"[mem] writing one partition of {files} files x {rows} rows ...")
    info = build_dataset(folder, "mem", files, rows, days, with_delta=False)
    log(f"[mem] {info['files']} files, {info['bytes'] / 1e6:.0f} MB")
    groups = partition_groups(folder)
    state = DirState(f"{folder}/lakefmt")
    sizes = [16] if args.quick else [128, 1024]
    cases: list[tuple[str, dict[str, Any]]] = [
        ("pyarrow-stream", {}), *([] if args.quick else [("pyarrow-rewrite", {})]),
        ("lakefmt-binpack", {}), *[("lakefmt-zorder", {"max_group_size": g * MiB}) for g in sizes]]
    results = []
    try:
        for case, options in cases:
            result = run_case({"dir": folder, "target": args.target_mib * MiB, "groups": groups, "case": case,
                               "options": options})
            state.restore()
            result["max_group_size"] = options.get("max_group_size")
            results.append(result)
            log(f"[mem] {case} {options or ''}: peak RSS {result['peak_rss_mb']:.0f} MB "
                f"(after imports {result['rss_before_mb']:.0f} MB), {result['seconds']:.1f} s")
    finally:
        state.close()
    return {"data": info, "results": results}


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


def markdown(results: dict[str, Any]) -> str:
    """The tables for benchmarks/README.md."""
    lines = []
    for name, ds in results["datasets"].items():
        med, d = ds["median"], ds["data"]
        lines += [(f"**{name}**: {d['files']:,} files of {d['mean_file_bytes'] / 1e3:,.0f} KB on average, "
                   f"{d['bytes'] / 1e6:,.0f} MB, {d['rows']:,} rows, {d['partitions']} day partitions; "
                   f"target file size {ds['target_file_size'] // MiB} MiB"), "",
                  ("| case | runs | wall s (median) | CPU s (median) | wall vs delta-rs | CPU vs delta-rs | "
                   "wall vs pyarrow rewrite | output MB | vs delta-rs | files | peak RSS MB |"),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
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
                f"{ratio(m['seconds'], ref['seconds']) if ref else ''} | {m['output_bytes'] / 1e6:.1f} | "
                f"{ratio(m['output_bytes'], delta['output_bytes']) if delta else ''} | {m['output_files']} | "
                f"{m['peak_rss_mb']:.0f} |")
        qb = ds["query_before"]
        lines += ["", (f"| selective query ({qb['rows']:,} rows; median / best of {qb['runs']}) | files planned | "
                       "lakefmt scan ms | speed-up | DuckDB over planned files ms | speed-up |"),
                  "|---|---:|---:|---:|---:|---:|",
                  (f"| before compaction | {qb['files_planned']} | {qb['lakefmt_s'] * 1000:.0f} / "
                   f"{qb['lakefmt_best_s'] * 1000:.0f} | | {qb['duckdb_s'] * 1000:.0f} / "
                   f"{qb['duckdb_best_s'] * 1000:.0f} | |")]
        for case in QUERY_CASES:
            runs_ = ds["runs"].get(case)
            if not runs_ or "query" not in runs_[0]:
                continue
            q = runs_[0]["query"]
            lines.append(
                f"| after {case.split('-')[1]} | {q['files_planned']} | {q['lakefmt_s'] * 1000:.0f} / "
                f"{q['lakefmt_best_s'] * 1000:.0f} | {ratio(qb['lakefmt_s'], q['lakefmt_s'])} / "
                f"{ratio(qb['lakefmt_best_s'], q['lakefmt_best_s'])} | {q['duckdb_s'] * 1000:.0f} / "
                f"{q['duckdb_best_s'] * 1000:.0f} | {ratio(qb['duckdb_s'], q['duckdb_s'])} / "
                f"{ratio(qb['duckdb_best_s'], q['duckdb_best_s'])} |")
        lines.append("")
    mem = results.get("memory")
    if mem:
        d = mem["data"]
        lines += [(f"**peak memory**: one partition of {d['bytes'] / 1e6:,.0f} MB in {d['files']:,} files "
                   f"({d['rows']:,} rows); peak RSS of a fresh process (VmHWM, i.e. its ru_maxrss)"), "",
                  "| case | max group size | peak RSS MB | after imports MB | wall s |", "|---|---:|---:|---:|---:|"]
        for r in mem["results"]:
            g = f"{r['max_group_size'] // MiB} MiB" if r.get("max_group_size") else (
                "1024 MiB (default)" if r["case"].startswith("lakefmt") else "-")
            lines.append(f"| {r['case']} | {g} | {r['peak_rss_mb']:.0f} | {r['rss_before_mb']:.0f} | "
                         f"{r['seconds']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, one run each: a ~1 minute smoke run")
    parser.add_argument("--runs", type=int, help="runs of the bin-pack cases on 1k (default 3; quick 1)")
    parser.add_argument("--layout-runs", type=int, default=1,
                        help="runs of the Z-order/sort and reference cases on 1k (default 1)")
    parser.add_argument("--query-runs", type=int, help="repetitions of each query (default 7; quick 3)")
    parser.add_argument("--target-mib", type=int, help="target file size in MiB (default 16; quick 4)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["1k", "4k", "mem"], help="data sets to skip")
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
    runs = args.runs or (1 if args.quick else 3)
    args.target_mib = args.target_mib or (4 if args.quick else 16)
    args.query_runs = args.query_runs or (3 if args.quick else 7)
    shapes = QUICK_DATASETS if args.quick else DATASETS
    if args.quick:
        schedules = {"1k": [(c, 1) for c in (*BINPACK_CASES, "lakefmt-zorder", "delta-zorder", "lakefmt-sort")],
                     "4k": [(c, 1) for c in ("lakefmt-binpack", "delta-compact", "lakefmt-sort")]}
    else:
        schedules = {"1k": [(c, runs) for c in BINPACK_CASES]
                     + [(c, args.layout_runs) for c in (*LAYOUT_CASES, *REFERENCE_CASES)],
                     "4k": [(c, 1) for c in (*BINPACK_CASES, "lakefmt-sort")]}
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
                    "platform": platform.platform(), "loadavg_at_start": os.getloadavg(),
                    "git": subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                                          capture_output=True, text=True, check=False).stdout.strip()},
        "query": query_filter()[0], "datasets": {}}
    try:
        for name in ("1k", "4k"):
            if name not in args.skip:
                results["datasets"][name] = bench_dataset(root, name, shapes[name], args, schedules[name])
                shutil.rmtree(f"{root}/{name}", ignore_errors=True)
        if "mem" not in args.skip:
            results["memory"] = bench_memory(root, shapes["mem"], args)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        path = Path(args.json)
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = REPO / "benchmarks" / "results" / (
            "compaction-quick-latest.json" if args.quick else f"compaction-{stamp}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str))
    print(markdown(results))
    log(f"results: {path} (total {results['total_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
