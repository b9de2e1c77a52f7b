"""Benchmark: reachability, orphan listing and snapshot expiry on a table with a long history.

Builds a table of ``--snapshots`` snapshots and ``--files`` data files (default 10,000
and 100,000), then times each maintenance phase in a fresh process and reports its wall
time and peak memory (growth of the process's peak RSS during the phase, and the
Python-heap peak under ``tracemalloc`` in a second run of the non-destructive phases).

How the table is built (fast, and through the public commit API):

* history in blocks of ``B`` snapshots: ``B - 1`` appends of ``k`` data files each, then
  one ``replace`` (a compaction) that removes the block's appended files and adds ``k``
  compacted ones — so most files end up referenced only by old snapshots, as after
  weeks of ingestion plus compaction;
* each append writes one manifest of ADDED entries; each replace one manifest of
  DELETED entries and one of ADDED entries; each snapshot's manifest list holds the
  compacted manifests of earlier blocks and the manifests of its own block (what fast
  append with ML-6 produces). Manifests and lists are written with
  ``lakefmt.manifest_io``, in threads;
* every data file exists (16 bytes; the table's metadata records its real size), plus
  1% extra unreferenced files two days old (orphans);
* all snapshots go in with ONE commit, ``Table.commit_build`` returning ``AddSnapshot``
  updates, instead of 10,000 commits that would each rewrite a growing metadata file.

Phases (each in its own process): ``reachability`` (all files reachable from the
retained snapshots), ``orphans`` (list the location, classify, dry run), ``expire-dry``
and ``expire`` (retain the newest block), then ``orphans-after``.

Usage:
    python benchmarks/bench_maintenance.py                         # 10,000 snapshots, 100,000 files
    python benchmarks/bench_maintenance.py --snapshots 1000 --files 100000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_common import add_run_arguments, environment, work_dir, write_results

import lakefmt
from lakefmt.manifest import DataFile, EntryStatus, ManifestEntry, ManifestFile
from lakefmt.manifest_io import write_manifest, write_manifest_list
from lakefmt.metadata import Snapshot
from lakefmt.updates import AddSnapshot, SetCurrentSnapshot

SCHEMA = pa.schema([pa.field("id", pa.int64())])
PHASES = ("reachability", "orphans", "expire-dry", "expire", "orphans-after")
TABLE = "bench.history"


def build(folder: str, snapshots: int, files: int, block: int) -> dict[str, float]:
    """Create the table under ``folder``; returns build timings."""
    started = time.perf_counter()
    catalog = lakefmt.Catalog(f"{folder}/wh", create=True)
    t = catalog.create_table(TABLE, SCHEMA)
    io, loc, spec, schema = t.io, t.location, t.metadata.spec, t.metadata.schema
    blocks = snapshots // block
    per_append = files // (blocks * block)  # k: files per append and per compaction
    now_ms = int(time.time() * 1000)
    first_ms = now_ms - snapshots * 1000
    jobs: list[tuple[str, list[ManifestEntry], int, int]] = []  # manifests to write
    lists: list[tuple[str, list[ManifestFile]]] = []
    snaps: list[Snapshot] = []
    data_paths: list[str] = []
    compacted: list[ManifestFile] = []
    parent, seq, total = None, 0, 0

    def manifest(entries: list[ManifestEntry], snapshot_id: int, sequence: int) -> ManifestFile:
        rel = f"metadata/m-{snapshot_id:016x}-{len(jobs):08d}.manifest.parquet"
        jobs.append((rel, entries, snapshot_id, sequence))
        added = sum(e.status == EntryStatus.ADDED for e in entries)
        deleted = sum(e.status == EntryStatus.DELETED for e in entries)
        return ManifestFile(rel, 0, 0, snapshot_id, sequence, added, 0, deleted, added, 0, deleted)

    for b in range(blocks):
        block_manifests: list[ManifestFile] = []
        block_files: list[tuple[DataFile, int]] = []  # with the sequence number that added each
        for i in range(block):
            seq += 1
            sid = seq
            compacting = i == block - 1
            kind = "compact" if compacting else "part"
            names = [f"data/{kind}-{sid:08d}-{j:05d}.parquet" for j in range(per_append)]
            new = [DataFile(p, (), 1, 16) for p in names]
            data_paths += names
            if compacting:
                gone = [ManifestEntry(EntryStatus.DELETED, f, sid, added_seq) for f, added_seq in block_files]
                compacted.append(manifest([ManifestEntry(EntryStatus.ADDED, f) for f in new], sid, seq))
                rows = [*compacted, manifest(gone, sid, seq)]
                total += len(new) - len(block_files)
                op = "replace"
            else:
                block_manifests.append(manifest([ManifestEntry(EntryStatus.ADDED, f) for f in new], sid, seq))
                block_files += [(f, seq) for f in new]
                rows = [*compacted, *block_manifests]
                total += len(new)
                op = "append"
            list_rel = f"metadata/snap-{sid}-{sid:016x}.manifest-list.parquet"
            lists.append((list_rel, rows))
            summary = {k: "0" for k in ("added-data-files", "deleted-data-files", "added-records",
                                        "deleted-records", "added-files-size", "removed-files-size")}
            summary.update({"total-data-files": str(total), "total-records": str(total),
                            "total-files-size": str(16 * total)})
            snaps.append(Snapshot(sid, parent, seq, first_ms + (sid - 1) * 1000, op, list_rel, 0, summary))
            parent = sid
    described = time.perf_counter()

    def write_one(job: tuple[str, list[ManifestEntry], int, int]) -> tuple[str, int]:
        rel, entries, sid, sequence = job
        m = write_manifest(io, f"{loc}/{rel}", rel, entries, spec, schema, snapshot_id=sid,
                           sequence_number=sequence)
        return rel, m.length

    with ThreadPoolExecutor(max_workers=8) as pool:
        lengths = dict(pool.map(write_one, jobs))
        lists = [(rel, [replace(m, length=lengths[m.path]) for m in rows]) for rel, rows in lists]
        list(pool.map(lambda item: write_manifest_list(io, f"{loc}/{item[0]}", item[1]), lists))
        metadata_written = time.perf_counter()
        os.makedirs(f"{loc}/data", exist_ok=True)
        orphans = [f"data/orphan-{i:06d}.bin" for i in range(max(1, files // 100))]
        two_days_ago = time.time() - 2 * 86400

        def touch(rel: str) -> None:
            with open(f"{loc}/{rel}", "wb") as f:
                f.write(b"0123456789abcdef")
            if rel.startswith("data/orphan-"):
                os.utime(f"{loc}/{rel}", (two_days_ago, two_days_ago))

        list(pool.map(touch, data_paths + orphans, chunksize=1000))
    files_written = time.perf_counter()

    def add_all(base: lakefmt.TableMetadata) -> tuple[list, list[str]]:
        return [*(AddSnapshot(s) for s in snaps), SetCurrentSnapshot(snaps[-1].snapshot_id)], []

    t.commit_build(add_all, operation="append")
    t.release_write_token()
    done = time.perf_counter()
    return {"describe_s": described - started, "manifests_and_lists_s": metadata_written - described,
            "data_files_s": files_written - metadata_written, "commit_s": done - files_written,
            "manifests": len(jobs), "manifest_lists": len(lists), "data_files": len(data_paths),
            "orphans": len(orphans), "cutoff_ms": first_ms + (snapshots - block) * 1000 - 500}


class RssSampler:
    """The peak resident set size of this process while running, sampled every 5 ms (Linux)."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.start = self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> float:
        """Peak growth over the starting RSS, in MiB."""
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())
        return round((self.peak - self.start) / 2**20, 1)


def run_phase(folder: str, phase: str, cutoff_ms: int, trace: bool) -> dict[str, float]:
    """One phase in this process: wall time and memory."""
    catalog = lakefmt.Catalog(f"{folder}/wh")
    t = catalog.load_table(TABLE)
    cutoff = datetime.fromtimestamp(cutoff_ms / 1000, timezone.utc)
    sampler = None if trace else RssSampler()
    if trace:
        tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    out: dict[str, float] = {}
    if phase == "reachability":
        r = t.maintenance.reachable_files()
        out.update(files=r.file_count, data_files=len(r.data_files), manifests=len(r.manifests))
    elif phase in ("orphans", "orphans-after"):
        r = t.maintenance.remove_orphan_files(older_than=timedelta(days=1))
        out.update(listed=r.listed_files, orphans=len(r.orphan_files))
    elif phase in ("expire-dry", "expire"):
        r = t.maintenance.expire_snapshots(older_than=cutoff, dry_run=phase == "expire-dry")
        out.update(expired=len(r.expired_snapshot_ids), data_files=len(r.data_files),
                   manifests=len(r.manifests),
                   manifest_lists=len(r.manifest_lists), metadata_files=len(r.metadata_files),
                   mb_freed=round(r.bytes_freed / 2**20, 1))
    out["seconds"] = round(time.perf_counter() - started, 2)
    out["cpu_seconds"] = round(time.process_time() - cpu_started, 2)  # all threads; robust to a busy machine
    if trace:
        out["python_heap_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    elif sampler is not None:
        out["peak_rss_growth_mb"] = sampler.stop()
        out["arrow_pool_peak_mb"] = round(pa.default_memory_pool().max_memory() / 2**20, 1)
    return out


def child(folder: str, phase: str, cutoff_ms: int, trace: bool) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--phase", phase, "--dir", folder, "--cutoff-ms", str(cutoff_ms)]
    if trace:
        cmd.append("--trace")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--snapshots", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--block", type=int, default=100,
                        help="snapshots per block of appends ending in a replace")
    add_run_arguments(parser, work="temporary", json_out=False)
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--cutoff-ms", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(run_phase(args.dir, args.phase, args.cutoff_ms, args.trace)))
        return
    payload: dict[str, object] = {"environment": environment(), "snapshots": args.snapshots, "files": args.files}
    with work_dir(args.dir, prefix="lakefmt-bench-maint-") as root:
        folder = str(root)
        info = build(folder, args.snapshots, args.files, args.block)
        payload["build"] = {k: round(v, 1) if isinstance(v, float) else v for k, v in info.items()
                            if k != "cutoff_ms"}
        print(json.dumps({"snapshots": args.snapshots, "files": args.files, "build": payload["build"]}))
        phases = []
        for phase in PHASES:
            result = child(folder, phase, info["cutoff_ms"], trace=False)
            if phase != "expire":  # expire deletes: a second run would find nothing left to do
                result["python_heap_peak_mb"] = child(folder, phase, info["cutoff_ms"], trace=True)[
                    "python_heap_peak_mb"]
            phases.append({"phase": phase, **result})
            print(json.dumps(phases[-1]), flush=True)
        payload["phases"] = phases
        print(f"results: {write_results(f'maintenance-{args.snapshots}x{args.files}', payload)}")


if __name__ == "__main__":
    main()
