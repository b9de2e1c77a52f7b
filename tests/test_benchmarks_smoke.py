"""Smoke runs of the small-files loop benchmarks (benchmarks/): each script finishes on tiny inputs.

The benchmarks are not part of the package, but a benchmark that no longer runs is a claim in
benchmarks/README.md that can no longer be reproduced. Each test runs one script as a real
process with the smallest arguments it accepts and checks the JSON it writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def run_script(name: str, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / name), *args, "--json", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_datasets_are_deterministic_and_match_their_schemas() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from loop_data import DATASETS, with_day
    finally:
        sys.path.remove(str(BENCHMARKS))
    for ds in DATASETS.values():
        a = ds.rows(3, files=100, rows=50, days=10)
        assert a.schema.equals(ds.schema)
        assert a.equals(ds.rows(3, files=100, rows=50, days=10))
        assert not a.equals(ds.rows(4, files=100, rows=50, days=10))
        assert with_day(a).schema.field("day").type == pa.date32()


@pytest.mark.slow
def test_bench_append_smoke(tmp_path: Path) -> None:
    result = run_script("bench_append.py", tmp_path, "--dataset", "artemis", "--levels", "3", "--delta-levels", "3",
                        "--samples", "1", "--real-up-to", "3")
    levels = result["results"][0]["levels"]
    assert [r["rows"] for r in levels] == [10_000, 10]
    assert all(r["ratio"] > 0 for r in levels)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_bench_catalog_smoke(tmp_path: Path) -> None:
    result = run_script("bench_catalog.py", tmp_path, "--dataset", "artemis", "--commits", "2", "--rounds", "1",
                        "--processes", "2")
    assert result["results"][0]["ratio"] > 0


@pytest.mark.slow
def test_bench_planning_smoke(tmp_path: Path) -> None:
    result = run_script("bench_planning.py", tmp_path, "--dataset", "telemetry", "--files", "200", "--runs", "1",
                        "--scan-runs", "1")
    r = result["results"][0]
    assert r["files"] == 200 and r["rows"] == 200 * 250
    assert r["planning_ratio"] > 0 and r["scan_vs_pyarrow"] > 0


@pytest.mark.slow
def test_bench_compaction_smoke(tmp_path: Path) -> None:
    result = run_script("bench_compaction.py", tmp_path, "--quick", "--dataset", "artemis", "--skip", "1mb", "250kb",
                        "mem", "--tiny-runs", "1")
    tiny = result["shapes"]["artemis/tiny"]
    assert set(tiny["median"]) == {"lakefmt-binpack", "delta-compact"}
    assert tiny["runs"]["lakefmt-binpack"][0]["output_files"] == 3


def test_ab_compaction_smoke(tmp_path: Path) -> None:
    result = run_script("ab_compaction.py", tmp_path, "--runs", "1", "--dataset", "artemis",
                        "--arm", "head=HEAD", "--arm", "tree=worktree:LAKEFMT_AB_SMOKE=1")
    (one,) = result
    assert one["dataset"] == "artemis" and one["arms"]["tree"] == {"rev": "worktree", "env": {"LAKEFMT_AB_SMOKE": "1"}}
    assert set(one["samples"]) == {"head", "tree", "delta-rs"}
    assert all(len(s) == 1 and s[0][0] > 0 and s[0][1] > 0 for s in one["samples"].values())


@pytest.mark.parametrize(("arm", "message"), [
    ("../up=HEAD", "with a label of letters, digits"),
    ("a=no-such-revision", "no lakefmt/ at git revision 'no-such-revision'"),
    ("a=HEAD:NOVALUE", "label=rev[:NAME=value,...]"),
])
def test_ab_compaction_refuses_a_bad_arm(arm: str, message: str) -> None:
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "ab_compaction.py"), "--arm", arm], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and message in proc.stderr


@pytest.mark.slow
def test_bench_deletes_smoke(tmp_path: Path) -> None:
    result = run_script("bench_deletes.py", tmp_path, "--quick", "--dataset", "telemetry", "--delete-windows", "4",
                        "--scan-windows", "4", "--upsert-rows", "20000", "--upsert-source", "1000", "--samples", "1",
                        "--scan-samples", "1")
    r = result["results"]
    delete = r["delete"][0]["sides"]
    assert set(delete) == {"merge-on-read", "copy-on-write", "delta-rs"}
    assert len({s["samples"][0]["rows"] for s in delete.values()}) == 1
    assert 0 < delete["merge-on-read"]["bytes_written"] < delete["copy-on-write"]["bytes_written"]
    assert r["delete"][0]["after_mor"]["files_with_vectors"] >= 1
    assert set(r["scan"][0]["cases"]) == {"full scan", "selective query"}
    assert r["upsert"][0]["rows_after"] == 20_000 + 500 and r["upsert"][0]["ratio"] > 0
