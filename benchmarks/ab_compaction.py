"""A/B of the tiny bin-pack: versions of lakefmt against each other and delta-rs, interleaved.

Goal 4's tiny shape (240 files in 3 partitions) takes ~0.2-0.3 s a run, and a shared
2-core machine moves such a run by 5-10% from one minute to the next: a change is judged
only against the code before it and delta-rs **in the same run**, alternating. Each arm
is a git revision of ``lakefmt/`` (``git archive``) or the working tree, and runs
:func:`bench_compaction.worker` (the ``lakefmt-binpack`` case of ``bench_compaction.py``)
in a fresh process that imports *its own* copy of lakefmt before ``bench_compaction`` puts
the repository first on ``sys.path`` (checked in the process); ``delta`` runs the
``delta-compact`` case. The tables are restored after every run; the order of the arms is
reversed from one round to the next.

Usage:
    python benchmarks/ab_compaction.py --arm before=HEAD~1 --arm after=worktree
    python benchmarks/ab_compaction.py --dataset both --runs 20 --arm main=HEAD \\
        --arm env-test=HEAD:PYTHONMALLOC=malloc   # an arm may set environment variables

Prints medians of wall and CPU time per arm and their ratios to delta-rs, with the load
average before and after; ``--json PATH`` also writes every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from bench_compaction import DirState, MiB, build_dataset, loadavg
from loop_data import DATASETS

LABEL = re.compile(r"[A-Za-z0-9_-]{1,40}")
# delta-rs's arm: the benchmark's worker as it is.
DELTA_WORKER = """
import json, os, sys
sys.path.insert(0, os.environ["AB_BENCH"])
import bench_compaction
print(json.dumps(bench_compaction.worker(json.loads(os.environ["AB_SPEC"]))))
"""
# A lakefmt arm: its own copy of lakefmt first, then the benchmark's worker.
WORKER = """
import json, os, sys
sys.path.insert(0, os.environ["AB_CODE"])
import lakefmt
if not lakefmt.__file__.startswith(os.environ["AB_CODE"]):
    raise SystemExit(f"imported {lakefmt.__file__}, not the arm's copy")
sys.path.insert(1, os.environ["AB_BENCH"])
import bench_compaction
print(json.dumps(bench_compaction.worker(json.loads(os.environ["AB_SPEC"]))))
"""


def export(rev: str, into: str) -> str:
    """``lakefmt/`` at ``rev`` (or the working tree) copied under ``into``; returns the folder to import from."""
    os.makedirs(into)
    if rev == "worktree":
        shutil.copytree(REPO / "lakefmt", f"{into}/lakefmt", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "lakefmt"], capture_output=True, check=False)
        if archive.returncode:
            raise SystemExit(f"--arm: no lakefmt/ at git revision {rev!r}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return into


def run_arm(folder: str, dataset: str, code: str | None, env: dict[str, str]) -> tuple[float, float]:
    """One run in a fresh process: (wall seconds, CPU seconds)."""
    case = "delta-compact" if code is None else "lakefmt-binpack"
    spec = {"case": case, "dir": folder, "target": DATASETS[dataset].target_mib * MiB, "dataset": dataset,
            "groups": {}}
    child = dict(os.environ, **env, AB_SPEC=json.dumps(spec), AB_BENCH=str(BENCH), AB_CODE=code or "")
    proc = subprocess.run([sys.executable, "-c", DELTA_WORKER if code is None else WORKER], capture_output=True,
                          text=True, env=child, check=False)
    if proc.returncode:
        raise RuntimeError(f"{case} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["seconds"], out["cpu_seconds"]


def parse_arm(text: str) -> tuple[str, str, dict[str, str]]:
    """``label=rev[:NAME=value,...]`` -> (label, rev, environment)."""
    label, _, rest = text.partition("=")
    rev, _, env_text = rest.partition(":")
    items = [item for item in env_text.split(",") if item]
    if not LABEL.fullmatch(label) or not rev or any("=" not in item for item in items):
        raise SystemExit(f"--arm takes label=rev[:NAME=value,...] with a label of letters, digits, '-' and '_', "
                         f"got {text!r}")
    return label, rev, dict(item.split("=", 1) for item in items)


def bench(dataset: str, arms: list[tuple[str, str, dict[str, str]]], codes: dict[str, str], runs: int,
          work: str, with_delta: bool) -> dict[str, Any]:
    folder = f"{work}/{dataset}"
    build_dataset(folder, dataset, DATASETS[dataset].shapes["tiny"], with_delta=with_delta)
    states = [DirState(f"{folder}/lakefmt")] + ([DirState(f"{folder}/delta")] if with_delta else [])
    order: list[tuple[str, str | None, dict[str, str]]] = [(label, codes[label], env) for label, _, env in arms]
    if with_delta:
        order.append(("delta-rs", None, {}))
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in order}
    load_before = " ".join(loadavg().split()[:3])
    try:
        for r in range(runs):
            for label, code, env in order if r % 2 == 0 else order[::-1]:
                samples[label].append(run_arm(folder, dataset, code, env))
                for s in states:
                    s.restore()
    finally:
        for s in states:
            s.close()
    return {"dataset": dataset, "runs": runs, "load_before": load_before, "load_after": " ".join(loadavg().split()[:3]),
            "samples": samples}


def report(result: dict[str, Any]) -> str:
    medians = {label: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
               for label, s in result["samples"].items()}
    delta = medians.get("delta-rs")
    head = f"[{result['dataset']}] tiny bin-pack, medians of {result['runs']} "
    lines = [head + f"(load {result['load_before']} -> {result['load_after']})"]
    for label, (wall, cpu) in medians.items():
        ratio = f"  {wall / delta[0]:.2f}x wall, {cpu / delta[1]:.2f}x CPU of delta-rs" if delta and \
            label != "delta-rs" else ""
        lines.append(f"  {label:16s} {wall * 1000:7.1f} ms wall {cpu * 1000:7.1f} ms CPU{ratio}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["telemetry", "artemis", "both"], default="telemetry")
    parser.add_argument("--arm", action="append", required=True,
                        help="label=rev[:NAME=value,...]: a git revision or 'worktree', optional environment")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-delta", action="store_true", help="lakefmt arms only")
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    arms = [parse_arm(a) for a in args.arm]
    if len({label for label, _, _ in arms}) != len(arms) or any(label == "delta-rs" for label, _, _ in arms):
        raise SystemExit("arm labels must be distinct and not 'delta-rs'")
    work = tempfile.mkdtemp(prefix="ab-compaction-")
    try:
        codes = {label: export(rev, f"{work}/code-{label}") for label, rev, _ in arms}
        results = []
        for dataset in (["telemetry", "artemis"] if args.dataset == "both" else [args.dataset]):
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            result = bench(dataset, arms, codes, args.runs, work, not args.no_delta)
            result["started"] = started
            result["arms"] = {label: {"rev": rev, "env": env} for label, rev, env in arms}
            print(report(result), flush=True)
            results.append(result)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
