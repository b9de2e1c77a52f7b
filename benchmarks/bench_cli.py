"""Benchmark: CPU time of starting the ``lakefmt`` command (issue 10, item 18).

Runs ``lakefmt --help``, ``lakefmt tables`` and ``lakefmt scan`` of a 3-row table as
real processes (``python -m lakefmt.cli``) and reports, per command, the lowest user +
system CPU time of ``--runs`` runs, read from ``resource.getrusage(RUSAGE_CHILDREN)``,
and the modules the command imported (pandas, DuckDB, pyarrow). CPU time rather than
wall time, so that other load on the machine matters less. Goal: ``--help`` and
``tables`` under 0.5 s.

Usage:
    python benchmarks/bench_cli.py                 # ~10 s
    python benchmarks/bench_cli.py --runs 10
Results: benchmarks/results/cli-<UTC time>.json
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_common import REPO, add_run_arguments, environment, markdown_table, publish

PROBE = ("import sys, runpy; sys.argv = ['lakefmt', *sys.argv[1:]]\n"
         "try:\n    runpy.run_module('lakefmt.cli', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         "print(','.join(m for m in ('pandas', 'duckdb', 'pyarrow') if m in sys.modules), file=sys.stderr)\n")


def cpu_seconds(argv: list[str], *, runs: int) -> tuple[float, str]:
    """The lowest CPU time of ``runs`` runs of ``python -m lakefmt.cli *argv``, and the heavy modules it loaded."""
    best, modules = float("inf"), ""
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-m", "lakefmt.cli", *argv], capture_output=True, text=True,
                              cwd=REPO, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"lakefmt {' '.join(argv)} failed: {proc.stderr}")
        best = min(best, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    probe = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=REPO,
                           check=False)
    modules = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ""
    return best, modules or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, runs=5, work=None, json_out=False)
    parser.add_argument("--out", help="results file (default: benchmarks/results/cli-<time>.json)")
    opts = parser.parse_args()

    import pyarrow as pa

    import lakefmt

    with tempfile.TemporaryDirectory() as tmp:
        warehouse = str(Path(tmp) / "wh")
        table = lakefmt.Catalog(warehouse, create=True).create_table("bench.t", pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2, 3]}))
        commands = {"--help": ["--help"], "tables": ["--warehouse", warehouse, "tables"],
                    "scan (3 rows)": ["--warehouse", warehouse, "scan", "bench.t"]}
        results = {name: cpu_seconds(argv, runs=opts.runs) for name, argv in commands.items()}
    rows = [(f"`lakefmt {name}`", f"{cpu:.2f} s", modules) for name, (cpu, modules) in results.items()]
    publish("cli", markdown_table(["command", "CPU time (lowest of runs)", "heavy modules imported"], rows),
            {"environment": environment(), "runs": opts.runs,
             "cpu_seconds": {name: cpu for name, (cpu, _m) in results.items()},
             "modules": {name: m for name, (_c, m) in results.items()}}, opts.out)


if __name__ == "__main__":
    main()
