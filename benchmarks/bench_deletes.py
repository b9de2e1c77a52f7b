"""Benchmark: row-level deletes and upserts of format version 2 (issue 12).

Three benchmarks, each on both datasets of :mod:`loop_data` (``telemetry``, the hard one, first).
Competitors run interleaved in one process, the order flipped every sample; medians; the load
average is recorded with every sample; data generation and table building are outside every
timing. Tables are partitioned by ``day(ts)`` and written in files of about the dataset's
compaction target (telemetry 320,000 rows, ~32 MiB; artemis 1,200,000 rows, ~16 MiB), as a
compacted table is.

1. **Delete 0.1% of rows spread over a ~1 GB partition.** One day of 1,000 ingest windows
   (telemetry 10,000,000 rows, artemis 75,000,000). Three tables over hard links to the same
   Parquet files: lakefmt with ``write.delete.mode = merge-on-read``, lakefmt with
   ``copy-on-write``, and a Delta table (``convert_to_deltalake``). Sample ``i`` deletes a new 0.1%
   from each with one predicate, rows in every file: telemetry ``payload_id IN (2i, 2i+1)`` (2 of
   2,000 payloads), artemis ``payload_id = i AND sensor_kind = 'imu'`` (1 of 200 x 1 of 5).
   Measured: ``t.delete(predicate)`` / ``DeltaTable.delete(predicate)``, wall and CPU time, and
   bytes written (sizes of the files new in the table's folder afterwards). Goals: merge-on-read
   writes < 1% of copy-on-write's bytes and takes <= 0.1x its time.
2. **Scan overhead with 10% of rows deleted.** 200 windows over 2 days; one merge-on-read delete
   of 10% (telemetry ``payload_id >= 1800``, artemis ``payload_id >= 180``), against a table
   written fresh with the same live rows in the same file layout (what compaction leaves,
   without also changing the file count). Full scan (``t.scan().to_arrow()``) and the dataset's
   selective query; one untimed scan of each table first, then the manifest and
   deletion-vector caches are cleared before every scan, so vectors are read and decoded each
   time. Goal: <= 1.3x.
3. **Upsert 10,000 rows into a 10,000,000-row table** (1,000 windows over 10 days): half the
   keys exist (drawn uniformly from the whole table; ``value`` changed), half are new. Keys:
   telemetry ``(ts, payload_id)``, artemis ``seq``. lakefmt ``t.upsert(source, on=keys)``;
   delta-rs ``dt.merge(source, "t.k = s.k", source_alias="s", target_alias="t")
   .when_matched_update_all().when_not_matched_insert_all().execute()`` on a Delta table over the
   same files; PyIceberg ``table.upsert(source, join_cols=keys)`` (its own copy, written by
   PyIceberg) when pyiceberg is installed, else skipped with a note. Goal: lakefmt <= 0.5x
   delta-rs's time.

delta-rs writes with ZSTD level 1, lakefmt's default level (``WriterProperties``), so the bytes
compare.

Usage:
    python benchmarks/bench_deletes.py                       # both datasets, ~15 minutes on 2 cores
    python benchmarks/bench_deletes.py --dataset telemetry --only delete upsert
    python benchmarks/bench_deletes.py --quick               # smoke run: 8-window partitions, 100k-row upserts
Results: benchmarks/results/deletes-<UTC time>.json (quick runs: deletes-quick-latest.json)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from core_common import Run, add_run_arguments, loadavg, markdown_table, median, ms, work_dir
from loop_data import Dataset, add_dataset_argument, selected, with_day
from telemetry_data import PAYLOADS

import lakefmt
from lakefmt import deletion_vectors, manifest_cache
from lakefmt.commit import FileChange

DELETE_MODE = "write.delete.mode"
FILE_ROWS = {"telemetry": 320_000, "artemis": 1_200_000}  # rows per data file: ~the compaction target
WINDOW_ROWS = {"telemetry": 10_000, "artemis": 75_000}  # rows per ingest window (delete and scan tables)
SCAN_DELETED_FROM = {"telemetry": 1_800, "artemis": 180}  # scan table: delete payload_id >= this (10%)
UPSERT_KEYS = {"telemetry": ["ts", "payload_id"], "artemis": ["seq"]}
GOALS = {"delete_bytes": 0.01, "delete_time": 0.1, "scan": 1.3, "upsert": 0.5}


def delete_predicate(dataset: str, i: int) -> str:
    """Sample ``i``'s 0.1% of rows, spread over every file; the same text for lakefmt and delta-rs."""
    if dataset == "telemetry":
        return f"payload_id IN ({2 * i}, {2 * i + 1})"
    return f"payload_id = {i} AND sensor_kind = 'imu'"


def delta_writer_properties() -> Any:
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD", compression_level=1)


# -- tables -------------------------------------------------------------------------------------------

def build_table(cat: lakefmt.Catalog, name: str, ds: Dataset, *, windows: int, days: int, window_rows: int,
                keep: pc.Expression | None = None,
                visit: Callable[[int, pa.Table], None] | None = None) -> lakefmt.Table:
    """A table of ``windows`` ingest windows over ``days`` days, one commit, ~target-size files per day.

    ``visit(first_row, rows)`` sees every chunk before ``keep`` filters it (rows are numbered
    over the whole table in window order).
    """
    t = cat.create_table(name, ds.schema, partition_by=["day(ts)"])
    per_day = windows // days
    step = max(1, FILE_ROWS[ds.name] // window_rows)
    chunks = [range(s, min(s + step, (d + 1) * per_day))
              for d in range(days) for s in range(d * per_day, (d + 1) * per_day, step)]

    def write(chunk: range) -> list[Any]:
        rows = pa.concat_tables(ds.rows(i, files=windows, rows=window_rows, days=days) for i in chunk)
        if visit is not None:
            visit(chunk.start * window_rows, rows)
        if keep is not None:
            rows = rows.filter(keep)
        return t.write_data_files(rows)

    with ThreadPoolExecutor(max_workers=2) as pool:
        files = [f for fs in pool.map(write, chunks) for f in fs]
    t.commit_change(FileChange("append", added=files), cleanup_on_failure=files)
    t.release_write_token()
    return t


def link_lakefmt(cat: lakefmt.Catalog, src: lakefmt.Table, name: str, ds: Dataset) -> lakefmt.Table:
    """A second lakefmt table over hard links to ``src``'s data files."""
    t = cat.create_table(name, ds.schema, partition_by=["day(ts)"])
    files = src.plan_files()
    for f in files:
        os.makedirs(os.path.dirname(f"{t.location}/{f.path}"), exist_ok=True)
        os.link(f"{src.location}/{f.path}", f"{t.location}/{f.path}")
    t.commit_change(FileChange("append", added=files))
    t.release_write_token()
    return t


def link_delta(src: lakefmt.Table, path: Path) -> Any:
    """A Delta table (partitioned by a ``day`` date column) over hard links to ``src``'s data files."""
    from deltalake import DeltaTable, Schema, convert_to_deltalake

    for f in src.plan_files():
        day = date(1970, 1, 1) + timedelta(days=int(f.partition[0]))
        os.makedirs(path / f"day={day.isoformat()}", exist_ok=True)
        os.link(f"{src.location}/{f.path}", path / f"day={day.isoformat()}" / os.path.basename(f.path))
    convert_to_deltalake(str(path), partition_by=Schema.from_arrow(pa.schema([("day", pa.date32())])),
                         partition_strategy="hive")
    return DeltaTable(str(path))


def table_info(t: lakefmt.Table) -> dict[str, Any]:
    files = t.plan_files()
    return {"files": len(files), "rows": sum(f.record_count for f in files),
            "bytes": sum(f.file_size_bytes for f in files),
            "files_with_vectors": sum(getattr(f, "deletion_vector", None) is not None for f in files)}


# -- measuring ----------------------------------------------------------------------------------------

def files_under(root: str | Path) -> dict[str, int]:
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            p = os.path.join(folder, n)
            out[p] = os.path.getsize(p)
    return out


def measure(fn: Callable[[], Any], folder: str | Path | None) -> tuple[dict[str, Any], Any]:
    """Wall and process CPU time (all threads) of ``fn()``, and the files it left new in ``folder``."""
    before = files_under(folder) if folder else {}
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    new = [size for p, size in files_under(folder).items() if p not in before] if folder else []
    return {"wall_s": wall, "cpu_s": cpu, "files_written": len(new), "bytes_written": sum(new),
            "load": loadavg().split(" ")[0]}, out


def clear_caches() -> None:
    """Forget cached manifests and deletion vectors: the next scan reads and decodes them."""
    manifest_cache.clear()
    deletion_vectors.clear_cache()


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"wall_s": median([s["wall_s"] for s in samples]), "cpu_s": median([s["cpu_s"] for s in samples]),
            "bytes_written": median([s["bytes_written"] for s in samples]),
            "files_written": median([s["files_written"] for s in samples]),
            "load": load_range(samples), "samples": samples}


def load_range(samples: list[dict[str, Any]]) -> str:
    """The 1-minute load averages seen during ``samples``, as ``low-high``."""
    loads = sorted(float(s["load"]) for s in samples)
    return f"{loads[0]:.1f}" if f"{loads[0]:.1f}" == f"{loads[-1]:.1f}" else f"{loads[0]:.1f}-{loads[-1]:.1f}"


def run_interleaved(sides: dict[str, tuple[Callable[[int], Any], str | Path]], samples: int,
                    count: Callable[[str, Any], int | None]) -> dict[str, dict[str, Any]]:
    """``samples`` rounds of every side's ``fn(i)``, order flipped each round; affected rows must agree."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for i in range(samples):
        names = list(sides) if i % 2 == 0 else list(sides)[::-1]
        rows = {}
        for name in names:
            fn, folder = sides[name]
            sample, result = measure(lambda fn=fn, i=i: fn(i), folder)
            sample["rows"] = rows[name] = count(name, result)
            out[name].append(sample)
            print(f"    sample {i} {name}: {ms(sample['wall_s'])} ms, {sample['bytes_written']:,} bytes, "
                  f"{sample['rows']} rows (load {sample['load']})", flush=True)
        if len({r for r in rows.values() if r is not None}) > 1:
            raise RuntimeError(f"the competitors disagree on the rows of sample {i}: {rows}")
    return {name: summarize(s) for name, s in out.items()}


def net_deleted(snap: Any) -> int:
    """Rows a lakefmt delete removed: ``deleted-records`` minus the rows a copy-on-write rewrite kept."""
    if snap is None:
        return 0
    return int(snap.summary.get("deleted-records", 0)) - int(snap.summary.get("added-records", 0))


# -- 1. delete 0.1% -----------------------------------------------------------------------------------

def bench_delete(ds: Dataset, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    folder = root / f"delete-{ds.name}"
    cat = lakefmt.Catalog(str(folder / "lakefmt"), create=True)
    started = time.perf_counter()
    mor = build_table(cat, "bench.mor", ds, windows=args.delete_windows, days=1, window_rows=WINDOW_ROWS[ds.name])
    mor.set_property(DELETE_MODE, "merge-on-read")
    cow = link_lakefmt(cat, mor, "bench.cow", ds)
    cow.set_property(DELETE_MODE, "copy-on-write")
    dt = link_delta(mor, folder / "delta")
    info = {**table_info(mor), "build_s": time.perf_counter() - started}
    print(f"[{ds.name}] delete: {info['files']} files, {info['rows']:,} rows, {info['bytes'] / 2**20:,.0f} MiB "
          f"in one partition (built in {info['build_s']:.0f} s)", flush=True)
    wp = delta_writer_properties()
    sides = {"merge-on-read": (lambda i: mor.delete(delete_predicate(ds.name, i)), mor.location),
             "copy-on-write": (lambda i: cow.delete(delete_predicate(ds.name, i)), cow.location),
             "delta-rs": (lambda i: dt.delete(delete_predicate(ds.name, i), writer_properties=wp), folder / "delta")}
    res = run_interleaved(sides, args.samples,
                          lambda name, out: out["num_deleted_rows"] if name == "delta-rs" else net_deleted(out))
    after = table_info(mor)
    if after["files"] != info["files"] or not after["files_with_vectors"]:
        raise RuntimeError(f"the merge-on-read delete rewrote files or wrote no vectors: {after}")
    mor_, cow_, delta_ = res["merge-on-read"], res["copy-on-write"], res["delta-rs"]
    out = {"dataset": ds.name, "table": info, "after_mor": after, "sides": res,
           "mor_vs_cow_time": mor_["wall_s"] / cow_["wall_s"], "mor_vs_cow_cpu": mor_["cpu_s"] / cow_["cpu_s"],
           "mor_vs_cow_bytes": mor_["bytes_written"] / cow_["bytes_written"],
           "mor_vs_delta_time": mor_["wall_s"] / delta_["wall_s"],
           "cow_vs_delta_time": cow_["wall_s"] / delta_["wall_s"]}
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- 2. scan overhead ---------------------------------------------------------------------------------

def bench_scan(ds: Dataset, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    folder = root / f"scan-{ds.name}"
    cat = lakefmt.Catalog(str(folder / "lakefmt"), create=True)
    shape = {"windows": args.scan_windows, "days": 2, "window_rows": WINDOW_ROWS[ds.name]}
    started = time.perf_counter()
    mor = build_table(cat, "bench.mor", ds, **shape)
    mor.set_property(DELETE_MODE, "merge-on-read")
    threshold = SCAN_DELETED_FROM[ds.name]
    deleted = net_deleted(mor.delete(f"payload_id >= {threshold}"))
    ref = build_table(cat, "bench.compacted", ds, keep=pc.field("payload_id") < threshold, **shape)
    info = {"merge_on_read": table_info(mor), "compacted": table_info(ref), "deleted_rows": deleted,
            "build_s": time.perf_counter() - started}
    print(f"[{ds.name}] scan: {info['merge_on_read']['files']} files, {info['merge_on_read']['rows']:,} rows, "
          f"{deleted:,} deleted ({info['merge_on_read']['files_with_vectors']} files with vectors); "
          f"compacted: {info['compacted']['rows']:,} rows in {info['compacted']['files']} files", flush=True)
    cases = {"full scan": lambda t: t.scan().to_arrow(), "selective query": lambda t: t.scan(ds.query).to_arrow()}
    out: dict[str, Any] = {"dataset": ds.name, "tables": info, "cases": {}}
    for case, scan in cases.items():
        samples: dict[str, list[dict[str, Any]]] = {"merge-on-read": [], "compacted": []}
        rows: set[int] = set()
        for t in (mor, ref):  # untimed: the first scan of a process also pays for warming up
            rows.add(scan(t).num_rows)
        for i in range(args.scan_samples):
            order = [("merge-on-read", mor), ("compacted", ref)]
            for name, t in order if i % 2 == 0 else order[::-1]:
                clear_caches()
                sample, table = measure(lambda t=t, scan=scan: scan(t), None)
                rows.add(table.num_rows)
                samples[name].append(sample)
                del table
        if len(rows) != 1:
            raise RuntimeError(f"{case}: merge-on-read and compacted tables disagree on the rows: {rows}")
        res = {name: summarize(s) for name, s in samples.items()}
        res["rows"] = rows.pop()
        res["ratio"] = res["merge-on-read"]["wall_s"] / res["compacted"]["wall_s"]
        res["cpu_ratio"] = res["merge-on-read"]["cpu_s"] / res["compacted"]["cpu_s"]
        out["cases"][case] = res
        print(f"[{ds.name}] {case}: merge-on-read {ms(res['merge-on-read']['wall_s'])} ms, compacted "
              f"{ms(res['compacted']['wall_s'])} ms: {res['ratio']:.2f}x ({res['rows']:,} rows)", flush=True)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- 3. upsert ----------------------------------------------------------------------------------------

def pyiceberg_table(folder: Path, ds: Dataset, src: lakefmt.Table) -> Any:
    """A PyIceberg table (SQL catalog, partitioned by day(ts)) holding ``src``'s rows, written by PyIceberg."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.transforms import DayTransform

    folder.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}")
    catalog.create_namespace("bench")
    tbl = catalog.create_table("bench.upsert", schema=ds.schema)
    with tbl.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    for batch in src.scan().to_batches():
        tbl.append(pa.Table.from_batches([batch]))
    return tbl


def upsert_sources(ds: Dataset, picks: dict[tuple[int, str], list[pa.Table]], samples: int, half: int,
                   total: int) -> list[pa.Table]:
    """Per sample: ``half`` existing rows with ``value`` + 1 and ``half`` rows under new keys, shuffled."""
    rng = np.random.default_rng(23)
    out = []
    for s in range(samples):
        upd = pa.concat_tables(picks[(s, "update")])
        upd = upd.set_column(upd.schema.get_field_index("value"), "value", pc.add(upd["value"], 1.0))
        new = pa.concat_tables(picks[(s, "new")])
        if ds.name == "telemetry":  # payload ids outside the data's 0..1999: keys no row has
            key = pc.add(new["payload_id"], PAYLOADS * (s + 1))
            new = new.set_column(new.schema.get_field_index("payload_id"), "payload_id", key)
        else:
            key = pa.array(range(total + s * half, total + (s + 1) * half), pa.int64())
            new = new.set_column(new.schema.get_field_index("seq"), "seq", key)
        source = pa.concat_tables([upd, new])
        source = source.take(pa.array(rng.permutation(source.num_rows)))
        keys = UPSERT_KEYS[ds.name]
        if source.group_by(keys).aggregate([]).num_rows != source.num_rows:
            raise RuntimeError(f"sample {s}: the upsert source has duplicate keys")
        out.append(source)
    return out


def upserted_rows(name: str, out: Any) -> int:
    """Rows updated plus rows inserted, as each competitor reports them."""
    if name == "delta-rs":
        return int(out["num_target_rows_updated"]) + int(out["num_target_rows_inserted"])
    if name == "pyiceberg":  # counts only rows whose values changed: not comparable, not checked
        return None
    return int(out.summary.get("added-records", 0)) if out is not None else 0


def bench_upsert(ds: Dataset, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    folder = root / f"upsert-{ds.name}"
    cat = lakefmt.Catalog(str(folder / "lakefmt"), create=True)
    windows, days = 1000, 10
    window_rows = max(1, args.upsert_rows // windows)
    total, half = windows * window_rows, args.upsert_source // 2
    rng = np.random.default_rng(17)
    chosen = {}
    for s in range(args.samples):
        idx = rng.choice(total, size=2 * half, replace=False)
        chosen[(s, "update")], chosen[(s, "new")] = np.sort(idx[:half]), np.sort(idx[half:])
    picks: dict[tuple[int, str], list[pa.Table]] = {k: [] for k in chosen}
    lock = threading.Lock()

    def visit(first: int, rows: pa.Table) -> None:
        for k, idx in chosen.items():
            lo, hi = np.searchsorted(idx, [first, first + rows.num_rows])
            if hi > lo:
                taken = rows.take(pa.array(idx[lo:hi] - first))
                with lock:
                    picks[k].append(taken)

    started = time.perf_counter()
    t = build_table(cat, "bench.upsert", ds, windows=windows, days=days, window_rows=window_rows, visit=visit)
    t.set_property(DELETE_MODE, "merge-on-read")
    dt = link_delta(t, folder / "delta")
    keys = UPSERT_KEYS[ds.name]
    sources = upsert_sources(ds, picks, args.samples, half, total)
    delta_sources = [with_day(s) for s in sources]
    wp = delta_writer_properties()
    predicate = " AND ".join(f"t.{k} = s.{k}" for k in keys)
    sides: dict[str, tuple[Callable[[int], Any], str | Path]] = {
        "lakefmt": (lambda i: t.upsert(sources[i], on=keys), t.location),
        "delta-rs": (lambda i: dt.merge(delta_sources[i], predicate, source_alias="s", target_alias="t",
                                        writer_properties=wp).when_matched_update_all()
                     .when_not_matched_insert_all().execute(), folder / "delta")}
    note = None
    if importlib.util.find_spec("pyiceberg") is None:
        note = "pyiceberg is not installed: PyIceberg upsert skipped"
    else:
        ice = pyiceberg_table(folder / "pyiceberg", ds, t)
        sides["pyiceberg"] = (lambda i: ice.upsert(sources[i], join_cols=keys), folder / "pyiceberg")
    info = {**table_info(t), "build_s": time.perf_counter() - started, "source_rows": 2 * half}
    print(f"[{ds.name}] upsert: {info['files']} files, {info['rows']:,} rows over {days} days, sources of "
          f"{2 * half:,} rows (built in {info['build_s']:.0f} s){'; ' + note if note else ''}", flush=True)
    res = run_interleaved(sides, args.samples, upserted_rows)
    expected = total + args.samples * half
    live = {"lakefmt": t.scan().count(), "delta-rs": dt.count()}
    if set(live.values()) != {expected}:
        raise RuntimeError(f"rows after the upserts: {live}, expected {expected:,}")
    out = {"dataset": ds.name, "table": info, "keys": keys, "sides": res, "note": note, "rows_after": expected,
           "ratio": res["lakefmt"]["wall_s"] / res["delta-rs"]["wall_s"],
           "cpu_ratio": res["lakefmt"]["cpu_s"] / res["delta-rs"]["cpu_s"]}
    if "pyiceberg" in res:
        out["pyiceberg_ratio"] = res["lakefmt"]["wall_s"] / res["pyiceberg"]["wall_s"]
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- report -------------------------------------------------------------------------------------------

def verdict(value: float, goal: float, strict: bool = False) -> str:
    return "met" if (value < goal if strict else value <= goal) else "**missed**"


def mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    parts, goals = [], []
    if results.get("delete"):
        rows = []
        for r in results["delete"]:
            for name, s in r["sides"].items():
                rows.append([r["dataset"], name, f"{r['table']['files']} / {r['table']['rows']:,}",
                             f"{s['samples'][0]['rows']:,}", ms(s["wall_s"]), ms(s["cpu_s"]),
                             mib(s["bytes_written"]), f"{s['files_written']:g}", s["load"]])
            goals.append([r["dataset"], "delete 0.1%: merge-on-read bytes < 1% of copy-on-write",
                          f"{r['mor_vs_cow_bytes'] * 100:.3f}%", verdict(r["mor_vs_cow_bytes"], 0.01, True)])
            goals.append([r["dataset"], "delete 0.1%: merge-on-read time <= 0.1x copy-on-write",
                          (f"{r['mor_vs_cow_time']:.3f}x (CPU {r['mor_vs_cow_cpu']:.3f}x; vs delta-rs "
                           f"{r['mor_vs_delta_time']:.3f}x; copy-on-write vs delta-rs {r['cow_vs_delta_time']:.2f}x)"),
                          verdict(r["mor_vs_cow_time"], GOALS["delete_time"])])
        parts.append("Delete 0.1% of one partition (medians):\n\n" + markdown_table(
            ["dataset", "competitor", "files / rows", "rows deleted (sample 0)", "wall ms", "CPU ms",
             "bytes written", "files written", "load"], rows))
    if results.get("scan"):
        rows = []
        for r in results["scan"]:
            for case, c in r["cases"].items():
                rows.append([r["dataset"], case, f"{c['rows']:,}", ms(c["merge-on-read"]["wall_s"]),
                             ms(c["compacted"]["wall_s"]), f"{c['ratio']:.2f}x", f"{c['cpu_ratio']:.2f}x",
                             f"{c['merge-on-read']['load']} / {c['compacted']['load']}"])
                goals.append([r["dataset"], f"{case} with 10% deleted <= 1.3x compacted", f"{c['ratio']:.2f}x",
                              verdict(c["ratio"], GOALS["scan"])])
        parts.append("Scans with 10% of rows deleted, against the same live rows compacted (medians):\n\n"
                     + markdown_table(["dataset", "scan", "rows", "merge-on-read ms", "compacted ms", "ratio",
                                       "CPU ratio", "load"], rows))
    if results.get("upsert"):
        rows = []
        for r in results["upsert"]:
            for name, s in r["sides"].items():
                vs = s["wall_s"] / r["sides"]["delta-rs"]["wall_s"]
                rows.append([r["dataset"], name, f"{r['table']['files']} / {r['table']['rows']:,}",
                             f"{r['table']['source_rows']:,}", ms(s["wall_s"]), ms(s["cpu_s"]), mib(s["bytes_written"]),
                             f"{vs:.2f}x", s["load"]])
            goals.append([r["dataset"], "upsert: lakefmt <= 0.5x delta-rs merge",
                          f"{r['ratio']:.2f}x (CPU {r['cpu_ratio']:.2f}x)", verdict(r["ratio"], GOALS["upsert"])])
        notes = sorted({r["note"] for r in results["upsert"] if r["note"]})
        parts.append("Upserts, half existing keys and half new (medians):\n\n" + markdown_table(
            ["dataset", "competitor", "files / rows", "source rows", "wall ms", "CPU ms", "bytes written",
             "vs delta-rs", "load"], rows) + "".join(f"\n\n{n}" for n in notes))
    parts.append("Goals:\n\n" + markdown_table(["dataset", "goal", "measured", ""], goals))
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser)
    parser.add_argument("--only", nargs="+", choices=["delete", "scan", "upsert"], default=["delete", "scan", "upsert"])
    add_run_arguments(parser, quick="small tables and 2 samples: a smoke run")
    parser.add_argument("--delete-windows", type=int, help="windows in the delete partition (default 1000; quick 8)")
    parser.add_argument("--scan-windows", type=int, help="windows of the scan tables, over 2 days (default 200; quick 8)")
    parser.add_argument("--upsert-rows", type=int, help="rows of the upsert target (default 10,000,000; quick 100,000)")
    parser.add_argument("--upsert-source", type=int, default=10_000, help="rows per upsert (default 10,000)")
    parser.add_argument("--samples", type=int, help="deletes and upserts per competitor (default 3; quick 2)")
    parser.add_argument("--scan-samples", type=int, help="scans per table and case (default 7; quick 2)")
    args = parser.parse_args()
    args.delete_windows = args.delete_windows or (8 if args.quick else 1000)
    args.scan_windows = 2 * max(1, (args.scan_windows or (8 if args.quick else 200)) // 2)
    args.upsert_rows = args.upsert_rows or (100_000 if args.quick else 10_000_000)
    args.samples = args.samples or (2 if args.quick else 3)
    args.scan_samples = args.scan_samples or (2 if args.quick else 7)
    benchmark = Run("deletes", args)
    benches = {"delete": bench_delete, "scan": bench_scan, "upsert": bench_upsert}
    results: dict[str, list[dict[str, Any]]] = {}
    with work_dir(args.dir, prefix="lakefmt-bench-deletes-", keep=args.keep) as root:
        for ds in selected(args.dataset):
            for name in args.only:
                results.setdefault(name, []).append(benches[name](ds, args, root))
    command = ("python benchmarks/bench_deletes.py " + " ".join(sys.argv[1:])).strip()
    text = report(results) + "\n\n" + benchmark.load_note() + f"\n\ncommand: `{command}`"
    benchmark.publish(text, results, command=command)


if __name__ == "__main__":
    main()
