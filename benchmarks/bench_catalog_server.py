"""Benchmark: commits per second through the catalog server against the local DuckDB catalog (issue 14).

``--processes`` (default 1 and 4) processes (``multiprocessing`` spawn context) start together
from a barrier and each append ``--commits`` batches of ``--rows`` rows (artemis dataset, one
ingest window each) to one table partitioned by ``day(ts)``, on a local warehouse folder:

* ``local``: ``lakefmt.Catalog(<folder>)``: every process opens the DuckDB catalog file itself
  (flock, attach, one transaction, detach; a lost race is rebuilt under the lock);
* ``server``: ``lakefmt.Catalog("http://127.0.0.1:<port>", token=...)``: ``lakefmt serve
  --no-schedule`` (a real process, started before the clock and stopped after each run) owns the
  catalog file; the processes write the table's files to the same folder themselves and send the
  catalog operations over HTTP (a commit is a POST of the swap; under contention the writer first
  takes the table's commit turn, CATHTTP-25, and a lost race is rebuilt in the turn the refusal
  gives, CATHTTP-22). Each run also counts the requests per commit inside the writers.

Throughput = commits / wall time from the barrier to the last commit. Each round runs every
(kind, processes) pair; the order alternates between rounds, so both kinds see the same machine
load. The medians of the rounds and the ratio server / local are reported.
Goal: 4 processes through the server reach at least 0.8x the local catalog's commits/s.

Usage:
    python benchmarks/bench_catalog_server.py              # 3 rounds, ~2 minutes on 2 cores
    python benchmarks/bench_catalog_server.py --quick      # smoke run
Results: benchmarks/results/catalog-server-<UTC time>.json
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_common import environment, markdown_table, median, write_results
from loop_data import DATASETS, loadavg

import lakefmt

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-catalog-server-token"
STREAM_FILES = 100_000  # ingest windows over 10 days, as in bench_catalog
KINDS = ("local", "server")


def worker(spec: dict[str, Any], proc: int, barrier: Any, results: Any) -> None:
    try:
        ds, commits, rows = DATASETS["artemis"], spec["commits"], spec["rows"]
        batches = [ds.rows(proc * commits + i, files=STREAM_FILES, rows=rows, days=10) for i in range(commits)]
        catalog = lakefmt.Catalog(spec["target"], token=TOKEN) if spec["kind"] == "server" else \
            lakefmt.Catalog(spec["target"])
        t = catalog.load_table("bench.commits")
        t.write_token()  # take the write lease before the clock starts
        requests = count_requests(catalog)
        barrier.wait(timeout=300)
        start = time.perf_counter()
        for b in batches:
            t.append(b)
        results.put(("ok", proc, {"start": start, "end": time.perf_counter(), "requests": dict(requests)}))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(("error", proc, traceback.format_exc()))


def count_requests(catalog: Any) -> collections.Counter[str]:
    """Count a client's requests by kind (``commit``, ``commit-refused``, ``turn``, ``GET`` ...), to explain a
    run's throughput; an empty counter for a local catalog."""
    counts: collections.Counter[str] = collections.Counter()
    http = getattr(catalog, "_http", None)
    if http is None:
        return counts
    send = http.send

    def counted(method: str, path: str, body: Any = None) -> tuple[int, Any, bool]:
        answer = send(method, path, body)
        kind = path.rsplit("/", 1)[-1] if method == "POST" else method
        counts[kind + ("-refused" if answer[0] == 409 else "")] += 1
        if kind == "commit" and isinstance(answer[1], dict) and answer[1].get("turn"):
            counts["turn-given"] += 1
        return answer

    http.send = counted
    return counts


class Server:
    """``lakefmt serve --no-schedule`` on a free loopback port, serving ``warehouse``'s catalog file."""

    def __init__(self, warehouse: str, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFMT_")}
        env.update(LAKEFMT_SERVICE_TOKEN=TOKEN, LAKEFMT_LOG_LEVEL="warning",
                   PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
        self.url = f"http://127.0.0.1:{port}"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "lakefmt.cli", "serve", "--warehouse", warehouse,
                                          "--port", str(port), "--no-schedule"], env=env,
                                         stdout=subprocess.DEVNULL, stderr=out)
        deadline = time.monotonic() + 120
        while True:  # ready once /healthz answers
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lakefmt serve did not start:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=5):
                    return
            except OSError:
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def run(kind: str, processes: int, commits: int, rows: int, root: Path, label: str) -> dict[str, Any]:
    warehouse = str(root / label)
    lakefmt.Catalog(warehouse, create=True).create_table(
        "bench.commits", schema=DATASETS["artemis"].schema, partition_by=["day(ts)"])
    server = Server(warehouse, root / f"{label}.log") if kind == "server" else None
    try:
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
        spec = {"kind": kind, "commits": commits, "rows": rows, "target": server.url if server else warehouse}
        procs = [ctx.Process(target=worker, args=(spec, p, barrier, results)) for p in range(processes)]
        for p in procs:
            p.start()
        barrier.wait(timeout=300)
        load = loadavg()
        reports = [results.get(timeout=1800) for _ in procs]
        for p in procs:
            p.join()
    finally:
        if server is not None:
            server.stop()
    errors = [r for r in reports if r[0] != "ok"]
    if errors:
        raise RuntimeError("\n".join(str(e[2]) for e in errors))
    total = processes * commits
    wall = max(r[2]["end"] for r in reports) - min(r[2]["start"] for r in reports)
    t = lakefmt.Catalog(warehouse).load_table("bench.commits")
    assert len(t.snapshots()) == total and t.scan().count() == total * rows  # every commit landed, once
    shutil.rmtree(warehouse, ignore_errors=True)
    requests: collections.Counter[str] = collections.Counter()
    for r in reports:
        requests.update(r[2]["requests"])
    per_commit = ", ".join(f"{k} {v / total:.2f}" for k, v in sorted(requests.items()))
    print(f"{kind:6s} x {processes}: {total} commits in {wall:.1f}s = {total / wall:.1f} commits/s (load {load})"
          + (f"; requests per commit: {per_commit}" if per_commit else ""), flush=True)
    return {"kind": kind, "processes": processes, "total_commits": total, "wall_s": wall,
            "commits_per_s": total / wall, "load_average": load, "requests_per_commit":
            {k: v / total for k, v in sorted(requests.items())}}


def report(runs: list[dict[str, Any]], process_counts: list[int]) -> tuple[str, dict[str, Any]]:
    table, summary = [], {}
    for n in process_counts:
        med = {k: median([r["commits_per_s"] for r in runs if r["kind"] == k and r["processes"] == n])
               for k in KINDS}
        ratio = med["server"] / med["local"]
        summary[n] = {"median_commits_per_s": med, "ratio": ratio}
        rounds = {k: ", ".join(f"{r['commits_per_s']:.1f}" for r in runs if r["kind"] == k and r["processes"] == n)
                  for k in KINDS}
        loads = ", ".join(r["load_average"].split(" ")[0] for r in runs if r["processes"] == n)
        goal = ("met" if ratio >= 0.8 else "**missed**") if n == 4 else "-"
        table.append([n, f"{med['local']:.1f} ({rounds['local']})", f"{med['server']:.1f} ({rounds['server']})",
                      f"{ratio:.2f}x", goal, loads])
    text = markdown_table(["processes", "local catalog commits/s (rounds)", "through the server commits/s (rounds)",
                           "server / local", "goal >= 0.8x (4 processes)", "load per run"], table)
    return text, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 commits per process, one round")
    parser.add_argument("--commits", type=int, help="commits per process (default 50; quick 10)")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--dir")
    parser.add_argument("--json")
    args = parser.parse_args()
    args.commits = args.commits or (10 if args.quick else 50)
    args.rounds = args.rounds or (1 if args.quick else 3)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lakefmt-bench-catalog-server-"))
    root.mkdir(parents=True, exist_ok=True)
    started_load = loadavg()
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for n in args.processes:
                for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
                    runs.append(run(kind, n, args.commits, args.rows, root, f"r{r}-{kind}-{n}"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text, summary = report(runs, args.processes)
    text += f"\n\nload average at the start: {started_load}; at the end: {loadavg()}"
    print("\n" + text)
    path = write_results("catalog-server", {"benchmark": "catalog-server", "environment": environment(),
                                            "args": vars(args), "runs": runs, "summary": summary,
                                            "markdown": text}, args.json, quick=args.quick)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
