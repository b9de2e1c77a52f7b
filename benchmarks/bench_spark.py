"""Benchmark: lakefmt through Spark vs Spark's own Parquet source, and compaction on Spark vs local (issue 5).

One local SparkSession (``local[N]``, N = ``--cores``, default all cores) runs every case,
so every ratio comes from one run on one machine:

* ``read full``: ``spark.read.format("lakefmt")`` of the whole table into Spark's
  ``noop`` sink, vs ``spark.read.parquet(<the table's live data files>)`` into ``noop``:
  the same bytes, all columns.
* ``read selective``: one day and one payload (``ts`` range and ``payload_id = 3``) of
  the same two sources. lakefmt prunes files from manifests before Spark plans a task;
  Spark's Parquet source plans every file and skips row groups by footer statistics.
* ``write``: a cached DataFrame appended to a lakefmt table (partitioned by
  ``mission_id``) vs ``df.write.partitionBy("mission_id").parquet(...)`` with ZSTD
  level 3, lakefmt's codec.
* ``compaction``: two copies of a table of many small files, compacted with
  ``strategy="binpack"`` by the local engine (threads) and by ``engine="spark"``.

The table: ``--days`` daily appends of ``--rows`` rows in total, rows like Artemis
downlinks (``ts``, ``mission_id`` (3), ``payload_id`` (8), ``sensor_kind``, ``value``).
Each case runs once to warm up, then ``--runs`` times; medians are reported.

Usage:
    python benchmarks/bench_spark.py                      # ~5 minutes on 2 cores
    python benchmarks/bench_spark.py --rows 20000000 --days 30 --runs 5
    python benchmarks/bench_spark.py --quick              # ~1 minute smoke run

Results go to ``benchmarks/results/spark-<UTC time>.json``; a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from core_common import add_run_arguments, command_line, git_commit, local_spark, median, publish, work_dir

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks

DAY_US = 86_400_000_000
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def median_seconds(fn: Callable[[], Any], runs: int, reset: Callable[[], None] | None = None) -> float:
    """Median wall time of ``fn`` over ``runs`` runs after one warm-up (``reset`` runs untimed before each)."""
    times = []
    for i in range(runs + 1):
        if reset is not None:
            reset()
        started = time.perf_counter()
        fn()
        if i:
            times.append(time.perf_counter() - started)
    return median(times)


def build_table(catalog: lakefmt.Catalog, name: str, rows: int, days: int) -> lakefmt.Table:
    t = catalog.create_table(name, schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    per_day = rows // days
    for day in range(days):
        t.append(downlinks(per_day, seed=day, start_us=START_US + day * DAY_US, step_us=DAY_US // per_day))
    t.release_write_token()
    return t


def small_files_table(catalog: lakefmt.Catalog, name: str, files: int, rows: int) -> lakefmt.Table:
    t = catalog.create_table(name, schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    for i in range(files):
        t.append(downlinks(rows, seed=i, start_us=START_US + i * rows * 60_000_000))
    t.release_write_token()
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--small-files", type=int, default=120, help="appends of the compaction table")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    add_run_arguments(parser, quick="1M rows, 1 run: a smoke test", runs=3, work="temporary", json_out=False)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.runs, args.small_files = 1_000_000, 1, 40
    with work_dir(args.dir, prefix="bench-spark-") as work:
        results = run(args, work)
    publish("spark", markdown(results), results)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    spark = local_spark("lakefmt-bench", args.cores, driver_memory="4g", shuffle_partitions=args.cores)
    catalog = lakefmt.Catalog(str(work / "warehouse"), create=True)
    started = time.perf_counter()
    t = build_table(catalog, "bench.downlinks", args.rows, args.days)
    build_s = time.perf_counter() - started
    files = [f"{t.location}/{f.path}" for f in t.plan_files()]
    data_bytes = sum(f.file_size_bytes for f in t.plan_files())

    def lake() -> Any:
        return spark.read.format("lakefmt").option("catalog", catalog.warehouse).load("bench.downlinks")

    def native() -> Any:
        return spark.read.parquet(*files)

    selective = ("ts >= timestamp'2026-01-05 00:00:00Z' AND ts < timestamp'2026-01-06 00:00:00Z' "
                 "AND payload_id = 3")
    noop = lambda df: df.write.format("noop").mode("overwrite").save()
    cases: dict[str, dict[str, float]] = {}
    cases["read full"] = {"lakefmt": median_seconds(lambda: noop(lake()), args.runs),
                          "native": median_seconds(lambda: noop(native()), args.runs)}
    assert lake().filter(selective).count() == native().filter(selective).count()
    selective_files = len(t.plan_files("ts >= '2026-01-05T00:00:00Z' AND ts < '2026-01-06T00:00:00Z' AND payload_id = 3"))
    cases["read selective"] = {"lakefmt": median_seconds(lambda: noop(lake().filter(selective)), args.runs),
                               "native": median_seconds(lambda: noop(native().filter(selective)), args.runs)}

    source = native().cache()
    source.count()
    sink = catalog.create_table("bench.sink", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    sink.release_write_token()

    def write_lakefmt() -> None:
        source.write.format("lakefmt").option("catalog", catalog.warehouse).mode("overwrite").save("bench.sink")

    def write_native() -> None:
        (source.write.mode("overwrite").option("compression", "zstd").partitionBy("mission_id")
         .parquet(str(work / "native-out")))

    cases["write"] = {"lakefmt": median_seconds(write_lakefmt, args.runs),
                      "native": median_seconds(write_native, args.runs)}
    source.unpersist()

    rows_per_file = max(1, args.rows // 20 // args.small_files)
    timings: dict[str, list[float]] = {"local": [], "spark": []}
    for engine in ("local", "spark"):
        for i in range(args.runs + 1):
            table = small_files_table(catalog, f"bench.small_{engine}_{i}", args.small_files, rows_per_file)
            began = time.perf_counter()
            result = table.compaction.run("binpack", engine=engine, spark=spark if engine == "spark" else None,
                                          min_age_seconds=0)
            if i:
                timings[engine].append(time.perf_counter() - began)
            assert result.groups_failed == 0 and result.groups_committed > 0, result
    cases["compaction"] = {"spark": median(timings["spark"]), "local": median(timings["local"])}
    spark.stop()
    return {"rows": args.rows, "days": args.days, "files": len(files), "data_bytes": data_bytes,
            "selective_files_planned": selective_files, "load_average_after": os.getloadavg(),
            "git_commit": git_commit(),
            "small_files": args.small_files * 3, "runs": args.runs, "cores": args.cores, "build_s": build_s,
            "pyspark": __import__("pyspark").__version__, "pyarrow": pa.__version__,
            "python": platform.python_version(), "machine": platform.machine(), "cases": cases,
            "command": command_line()}


def markdown(results: dict[str, Any]) -> str:
    header = (f"{results['rows']:,} rows in {results['files']} files ({results['data_bytes'] / 2**20:.0f} MiB), "
              f"{results['cores']} cores, medians of {results['runs']} runs, pyspark {results['pyspark']}; "
              f"the selective read plans {results['selective_files_planned']} of {results['files']} files")
    lines = [header, "", "| case | lakefmt on Spark | reference | ratio |", "|---|---:|---:|---:|"]
    for name, case in results["cases"].items():
        ours, ref = (case["spark"], case["local"]) if name == "compaction" else (case["lakefmt"], case["native"])
        reference = "local engine" if name == "compaction" else "Spark Parquet"
        lines.append(f"| {name} | {ours:.2f} s | {ref:.2f} s ({reference}) | {ours / ref:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
