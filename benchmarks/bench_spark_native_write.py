"""Benchmark: Spark writes at native speed (issue 14): write_native vs Spark's Parquet writer vs format("lakefmt").

One local SparkSession (``local[N]``, N = ``--cores``, default all cores) writes one cached
DataFrame of ``--rows`` Artemis-like rows (``ts`` timestamptz, ``mission_id`` int,
``payload_id`` long, ``sensor_kind`` string, ``value`` double; about 2.2 GB as Arrow
arrays at the default 64 M rows) three ways, interleaved (the order rotates every sample):

* ``native``: ``df.write.partitionBy("mission_id").parquet(...)``, ZSTD at the table's level
  (``write.parquet.compression-level``, 1): Spark alone, no table;
* ``write_native``: ``lakefmt.spark.write_native(df, t, distribution="none")`` into a fresh
  table partitioned by ``mission_id``: the same Spark write plus conforming, the staging
  folder, footers, renames, fsync and the commit;
* ``format("lakefmt")``: ``df.write.format("lakefmt")`` (the Python data source).

With ``--hash`` two more cases cluster rows by partition first, as ``write_native``'s
default ``distribution="hash"`` does: ``native hash`` (``df.hint("rebalance",
"mission_id")`` then the same write) and ``write_native hash``.

Table creation, deleting the previous sample's output and generating the data are outside
every timing. Each case runs once to warm up, then ``--runs`` times; medians are reported,
of wall time and of the CPU time of Spark's JVM plus this driver process (steadier under load;
not meaningful for ``format("lakefmt")``, whose Python workers it does not count).

Usage:
    python benchmarks/bench_spark_native_write.py                  # ~20 minutes on 2 cores
    python benchmarks/bench_spark_native_write.py --rows 8000000 --runs 3
    python benchmarks/bench_spark_native_write.py --quick          # 2 M rows, 1 run: a smoke test

Results go to ``benchmarks/results/spark-native-write-<UTC time>.json``; a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
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
    git_commit,
    local_spark,
    median,
    process_cpu_seconds,
    publish,
    work_dir,
)

from tests.conftest import DOWNLINKS_SCHEMA

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


class Phases(logging.Handler):
    """Collects write_native's own split of its time (Spark, then footers, moves and fsync) from its log record."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.last: tuple[float, float] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("native write of"):
            self.last = (float(record.args[1]), float(record.args[2]))  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64_000_000)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--hash", action="store_true", help="also the cases that cluster rows by partition first")
    add_run_arguments(parser, quick="2 M rows, 1 run: a smoke test", runs=3, work="temporary", json_out=False)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.runs = 2_000_000, 1
    with work_dir(args.dir, prefix="bench-spark-native-write-") as work:
        results = run(args, work)
    publish("spark-native-write", markdown(results), results)


def source_frame(spark: Any, rows: int, partitions: int) -> Any:
    """Deterministic downlink-like rows, generated and cached in the JVM (one minute apart, 3 missions)."""
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, numPartitions=partitions)
    return ids.select(
        F.timestamp_micros(F.lit(START_US) + F.col("id") * 60_000_000).alias("ts"),
        F.pmod(F.xxhash64("id", F.lit(1)), F.lit(3)).cast("int").alias("mission_id"),
        F.pmod(F.xxhash64("id", F.lit(2)), F.lit(8)).alias("payload_id"),
        F.element_at(F.array(*[F.lit(k) for k in ("imu", "thermal", "rad", "cam")]),
                     (F.pmod(F.xxhash64("id", F.lit(3)), F.lit(4)) + 1).cast("int")).alias("sensor_kind"),
        (F.rand(7) * 100).alias("value"))


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import lakefmt.spark

    spark = local_spark("lakefmt-bench-native-write", args.cores, driver_memory="10g",
                        shuffle_partitions=args.cores * 4)
    phases = Phases()
    logging.getLogger("lakefmt.spark.native_write").addHandler(phases)
    logging.getLogger("lakefmt.spark.native_write").setLevel(logging.INFO)
    catalog = lakefmt.Catalog(str(work / "warehouse"), create=True)
    level = 1  # write.parquet.compression-level's default: both sides use it

    started = time.perf_counter()
    df = source_frame(spark, args.rows, args.cores * 8).cache()
    assert df.count() == args.rows
    sample = df.limit(1_000_000).toArrow()
    arrow_bytes = int(sample.nbytes / sample.num_rows * args.rows)
    build_s = time.perf_counter() - started
    counter = iter(range(10**6))
    state: dict[str, Any] = {}

    def fresh_table() -> None:
        name = f"bench.sink_{next(counter)}"
        if "table" in state:
            old = state.pop("table")
            catalog.drop_table(old.name)
            shutil.rmtree(old.location, ignore_errors=True)
        t = catalog.create_table(name, schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
        t.release_write_token()
        state["table"] = t

    def fresh_dir() -> None:
        shutil.rmtree(work / "native-out", ignore_errors=True)

    def native(frame: Any) -> None:
        (frame.write.mode("errorifexists").option("compression", "zstd")
         .option("parquet.compression.codec.zstd.level", str(level)).partitionBy("mission_id")
         .parquet(str(work / "native-out")))

    def written() -> int:
        t = state["table"]
        t.refresh()
        return sum(f.record_count for f in t.plan_files())

    split: dict[str, list[tuple[float, float]]] = {"write_native": [], "write_native hash": []}

    def with_phases(case: str, fn: Callable[[], None]) -> Callable[[], None]:
        def timed() -> None:
            fn()
            assert written() == args.rows
            if phases.last is not None:
                split[case].append(phases.last)
        return timed

    cases: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        "native": (fresh_dir, lambda: native(df)),
        "write_native": (fresh_table, with_phases("write_native", lambda: lakefmt.spark.write_native(
            df, state["table"], distribution="none"))),
        "format(\"lakefmt\")": (fresh_table, lambda: df.write.format("lakefmt").option(
            "catalog", catalog.warehouse).mode("append").save(state["table"].name)),
    }
    if args.hash:
        cases["native hash"] = (fresh_dir, lambda: native(df.hint("rebalance", "mission_id")))
        cases["write_native hash"] = (fresh_table, with_phases("write_native hash", lambda: lakefmt.spark.write_native(
            df, state["table"], distribution="hash")))
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    names = list(cases)
    loads = [os.getloadavg()[0]]
    for i in range(args.runs + 1):  # sample 0 warms up
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            reset, fn = cases[name]
            reset()
            began, cpu_before = time.perf_counter(), cpu_seconds(jvm_pid)
            fn()
            if i:
                times[name].append(time.perf_counter() - began)
                cpu[name].append(cpu_seconds(jvm_pid) - cpu_before)
            print(f"sample {i} {name}: {time.perf_counter() - began:.2f} s", flush=True)
        loads.append(os.getloadavg()[0])
    native_files = sum(1 for p in (work / "native-out").rglob("*.parquet")) if (work / "native-out").exists() else 0
    files = {"native": native_files}
    for distribution in ("none", "hash") if args.hash else ("none",):
        fresh_table()
        lakefmt.spark.write_native(df, state["table"], distribution=distribution)
        files[f"write_native {distribution}"] = len(state["table"].plan_files())
    spark.stop()
    return {"rows": args.rows, "arrow_bytes": arrow_bytes, "cores": args.cores, "runs": args.runs,
            "build_s": build_s, "zstd_level": level, "files": files,
            "medians": {name: median(ts) for name, ts in times.items()}, "samples": times,
            "cpu_medians": {name: median(c) for name, c in cpu.items()}, "cpu_samples": cpu,
            "write_native_split": {k: [list(p) for p in v] for k, v in split.items() if v},
            "load_average_1m": loads, "git_commit": git_commit(),
            "pyspark": __import__("pyspark").__version__, "pyarrow": pa.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "command": command_line()}


def cpu_seconds(jvm_pid: int) -> float:
    """CPU seconds (user + system) so far of Spark's JVM and of this driver process (Linux).

    Python workers (the data source's tasks) are not counted: the figure compares ``native``
    and ``write_native``, which run none for this table, and is steadier than wall time under load.
    """
    return process_cpu_seconds(jvm_pid) + time.process_time()


def markdown(results: dict[str, Any]) -> str:
    medians = results["medians"]
    header = (f"{results['rows']:,} rows ({results['arrow_bytes'] / 1e9:.2f} GB as Arrow), {results['cores']} cores, "
              f"medians of {results['runs']} interleaved samples, pyspark {results['pyspark']}, load average "
              f"{min(results['load_average_1m']):.1f}-{max(results['load_average_1m']):.1f}")
    cpu = results["cpu_medians"]
    lines = [header, "", "| case | median | vs native | JVM + driver CPU | vs native |", "|---|---:|---:|---:|---:|"]
    for name, seconds in medians.items():
        ref = "native hash" if name.endswith("hash") else "native"
        cpu_text = "- | -" if name.startswith("format") else f"{cpu[name]:.1f} s | {cpu[name] / cpu[ref]:.2f}x"
        lines.append(f"| {name} | {seconds:.2f} s | {seconds / medians[ref]:.2f}x | {cpu_text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
