"""Benchmark: Spark reads of a lakefmt table at native speed (issue 14): read_native vs Spark's own Parquet source.

One local SparkSession (``local[N]``, N = ``--cores``, default all cores) runs three readers of the same
table, interleaved in one run (the order rotates every round; one untimed warm-up round first):

* ``native``: ``spark.read.parquet(<the table's live data files>)``, Spark's own source on the same files;
* ``read_native``: ``lakefmt.spark.read_native(spark, table, ...)``: lakefmt plans (pinned snapshot, pruned
  files, field-id read schema), Spark's Parquet reader reads;
* ``format("lakefmt")``: the Python data source (Arrow batches from Python workers).

Cases, each into Spark's ``noop`` sink:

* ``full read``: every row and column. Goal: read_native <= 1.05x native.
* ``selective read``: the telemetry dataset's query (one payload, one sensor kind, one day; 19 rows of
  10,000,000). Native gets it as a DataFrame filter (row groups skipped by footer statistics), read_native as
  ``filter=`` (files pruned by lakefmt, then the same row-group skipping), ``format("lakefmt")`` as a pushed
  DataFrame filter. Goal: read_native faster than native.

The table: the telemetry dataset (:mod:`benchmarks.telemetry_data`, the hard one: 200-byte payload strings,
2,000 payloads) of the ``1mb`` shape, 1,000 ingest windows of 10,000 rows over 10 days, appended one day
at a time into a table partitioned by ``day(ts)`` with ``write.target-file-size-bytes`` = 32 MiB (the
dataset's compaction target, as a compacted table is): 10,000,000 rows, 2.45 GB uncompressed (Arrow),
923 MiB of ZSTD Parquet in 30 files. Building is outside every timing. Medians of ``--runs`` timed
rounds; the load average is recorded with every sample, and so is the CPU time of Spark's JVM (user + system, from
``/proc/<pid>/stat``): on a loaded machine it is the steadier figure for ``native`` vs ``read_native``, which
do all their work there (``format("lakefmt")`` also works in Python workers, which it does not count).

Usage:
    python benchmarks/bench_spark_native.py                 # ~7 minutes on 2 cores
    python benchmarks/bench_spark_native.py --runs 5 --cores 4
    python benchmarks/bench_spark_native.py --quick         # 100,000 rows over 2 days, 1 round: a smoke run

Results go to ``benchmarks/results/spark-native-<UTC time>.json``; a Markdown table is printed.
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
    add_run_arguments,
    command_line,
    environment,
    loadavg,
    local_spark,
    markdown_table,
    median,
    process_cpu_seconds,
    publish,
    work_dir,
)
from telemetry_data import QUERY, SCHEMA, Shape, file_rows

import lakefmt

TABLE = "bench.telemetry"
READERS = ("native", "read_native", "lakefmt")
QUERY_SPARK = ("payload_id = 1234 AND sensor_kind = 'sensor_07' AND ts >= timestamp'2026-01-02 00:00:00Z' "
               "AND ts < timestamp'2026-01-03 00:00:00Z'")  # QUERY in Spark SQL
GOALS = {"full read": 1.05, "selective read": 1.0}


def build(catalog: lakefmt.Catalog, shape: Shape, target_mib: int) -> tuple[lakefmt.Table, int]:
    """The table, one append per day; returns it and the rows' uncompressed (Arrow) size in bytes."""
    t = catalog.create_table(TABLE, schema=SCHEMA, partition_by=["day(ts)"],
                             properties={"write.target-file-size-bytes": str(target_mib * 2**20)})
    per_day = shape.files // shape.days
    raw = 0
    for day in range(shape.days):
        rows = pa.concat_tables(file_rows(i, shape) for i in range(day * per_day, (day + 1) * per_day))
        raw += rows.nbytes
        t.append(rows)
    t.release_write_token()
    return t, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=1000, help="ingest windows of 10,000 rows")
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--target-mib", type=int, default=32)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    add_run_arguments(parser, quick="10 windows over 2 days, 1 round: a smoke run", runs=3, work="temporary",
                      json_out=False)
    args = parser.parse_args()
    rows_per_window = 10_000
    if args.quick:
        args.windows, args.days, args.runs, rows_per_window = 10, 2, 1, 10_000
    with work_dir(args.dir, prefix="bench-spark-native-") as work:
        results = run(args, work, Shape("bench", args.windows, rows_per_window, args.days))
    publish("spark-native", markdown(results), results, quick=args.quick)


def run(args: argparse.Namespace, work: Path, shape: Shape) -> dict[str, Any]:
    import lakefmt.spark

    env = environment()
    catalog = lakefmt.Catalog(str(work / "warehouse"), create=True)
    started = time.perf_counter()
    t, raw_bytes = build(catalog, shape, args.target_mib)
    build_s = time.perf_counter() - started
    planned = t.plan_files()
    files = [f"{t.location}/{f.path}" for f in planned]
    spark = local_spark("lakefmt-bench-native", args.cores, driver_memory="4g", shuffle_partitions=args.cores)
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()

    frames: dict[str, dict[str, Callable[[], Any]]] = {
        "full read": {
            "native": lambda: spark.read.parquet(*files),
            "read_native": lambda: lakefmt.spark.read_native(spark, TABLE, catalog=catalog),
            "lakefmt": lambda: spark.read.format("lakefmt").option("catalog", catalog.warehouse).load(TABLE)},
        "selective read": {
            "native": lambda: spark.read.parquet(*files).filter(QUERY_SPARK),
            "read_native": lambda: lakefmt.spark.read_native(spark, TABLE, catalog=catalog, filter=QUERY),
            "lakefmt": lambda: spark.read.format("lakefmt").option("catalog", catalog.warehouse).load(TABLE)
            .filter(QUERY_SPARK)}}
    counts = {case: {r: make().count() for r, make in readers.items()} for case, readers in frames.items()}
    for case, by_reader in counts.items():
        assert len(set(by_reader.values())) == 1, (case, by_reader)
    selective_files = len(lakefmt.spark.read_native(spark, TABLE, catalog=catalog, filter=QUERY).inputFiles())

    samples: dict[str, dict[str, list[dict[str, Any]]]] = {c: {r: [] for r in READERS} for c in frames}
    for round_ in range(args.runs + 1):  # round 0 warms up, untimed
        order = READERS[round_ % 3:] + READERS[:round_ % 3]
        for case, readers in frames.items():
            for reader in order:
                cpu, began = process_cpu_seconds(jvm_pid), time.perf_counter()
                readers[reader]().write.format("noop").mode("overwrite").save()
                seconds, cpu = time.perf_counter() - began, process_cpu_seconds(jvm_pid) - cpu
                if round_:
                    samples[case][reader].append({"seconds": seconds, "jvm_cpu_seconds": cpu, "load": loadavg()})
    spark.stop()
    medians = {c: {r: median([s["seconds"] for s in by[r]]) for r in READERS} for c, by in samples.items()}
    cpu_medians = {c: {r: median([s["jvm_cpu_seconds"] for s in by[r]]) for r in READERS}
                   for c, by in samples.items()}
    return {**env, "benchmark": "spark-native", "rows": shape.rows, "uncompressed_bytes": raw_bytes,
            "data_bytes": sum(f.file_size_bytes for f in planned), "files": len(files),
            "selective_files_planned": selective_files, "selective_rows": counts["selective read"]["native"],
            "runs": args.runs, "cores": args.cores, "build_s": build_s, "target_mib": args.target_mib,
            "pyspark": __import__("pyspark").__version__, "medians": medians, "jvm_cpu_medians": cpu_medians, "samples": samples, "goals": GOALS,
            "command": command_line()}


def markdown(results: dict[str, Any]) -> str:
    header = (f"{results['rows']:,} telemetry rows ({results['uncompressed_bytes'] / 1e9:.2f} GB uncompressed, "
              f"{results['data_bytes'] / 2**20:.0f} MiB in {results['files']} files), {results['cores']} cores, "
              f"medians of {results['runs']} interleaved rounds, pyspark {results['pyspark']}; the selective read "
              f"plans {results['selective_files_planned']} of {results['files']} files "
              f"({results['selective_rows']} rows)")
    rows = []
    for case, m in results["medians"].items():
        loads = sorted(s["load"].split()[0] for r in READERS for s in results["samples"][case][r])
        ratio = m["read_native"] / m["native"]
        cpu = results["jvm_cpu_medians"][case]
        met = "met" if ratio <= GOALS[case] and (case == "full read" or ratio < 1) else "**missed**"
        rows.append([case, f"{m['native']:.2f} s", f"{m['read_native']:.2f} s", f"{m['lakefmt']:.2f} s",
                     f"{ratio:.2f}x", (f"{cpu['read_native'] / cpu['native']:.2f}x ({cpu['read_native']:.2f} vs "
                     f"{cpu['native']:.2f} s)"), f"{m['lakefmt'] / m['native']:.2f}x", f"{loads[0]}-{loads[-1]}",
                     f"{'<=' if case == 'full read' else '<'} {GOALS[case]}x: {met}"])
    table = markdown_table(["case", "native", "read_native", "format(\"lakefmt\")", "read_native / native",
                            "same, JVM CPU", "lakefmt / native", "load", "goal"], rows)
    return header + "\n\n" + table


if __name__ == "__main__":
    main()
