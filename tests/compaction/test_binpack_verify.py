"""Bin-pack's verification without hashing, and its outputs' durability (spec/compaction.md COMPACT-17,
spec/commits.md COMMIT-20).

A bin-pack hands the Parquet writer the arrays it read, only concatenated: COMPACT-17 lets it
check that concatenation array by array (and count the rows) instead of hashing every row
twice. These tests show the check passes for real groups without a single hash, catches a
concatenation that swaps one row for another, and that the outputs, left unsynced by the
rewrite, are made durable by the commit before the catalog swap.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lakefmt.compaction import rewrite as rewrite_module
from lakefmt.compaction import sink as sink_module
from lakefmt.compaction import verify as verify_module
from lakefmt.compaction.runner import make_task, plan_table
from lakefmt.compaction.verify import holds_parts
from lakefmt.errors import ChecksumMismatchError
from tests.compaction.conftest import small_files_table
from tests.conftest import rows

REPO = Path(__file__).resolve().parents[2]


def _no_hashing(*args, **kwargs):
    raise AssertionError("a bin-pack verified as written must not hash rows")


def test_binpack_checks_its_concatenation_without_hashing(local_catalog, monkeypatch):
    """COMPACT-17: each input file has its own string dictionary; the writer gets them under one
    shared dictionary, checked code by code, and no row is hashed."""
    # spec: COMPACT-17
    t = small_files_table(local_catalog, appends=6)
    before = t.scan().to_arrow()
    monkeypatch.setattr(verify_module, "checksum", _no_hashing)
    monkeypatch.setattr(sink_module, "checksum", _no_hashing)
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == result.groups_planned > 0, result.summary()
    assert result.rows_rewritten == before.num_rows
    assert rows(t.scan().to_arrow()) == rows(before)


def test_binpack_catches_a_row_swapped_in_concatenation(local_catalog, monkeypatch):
    """COMPACT-17: a concatenation that loses one row and repeats another (same count) fails the
    group: the table handed to the writer is not made of the arrays read, so both sides are hashed."""
    # spec: COMPACT-17
    t = small_files_table(local_catalog, appends=5)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    task = make_task(t, plan, plan.groups[0])
    good = sink_module.concat

    def swapping(parts):
        table = good(parts)
        return pa.concat_tables([table.slice(1, 1), table.slice(1)])  # row 0 lost, row 1 twice

    monkeypatch.setattr(sink_module, "concat", swapping)
    data = f"{t.location}/data"
    existing = {os.path.join(d, n) for d, _, names in os.walk(data) for n in names}
    with pytest.raises(ChecksumMismatchError, match="not the rows read"):
        rewrite_module.rewrite_group(t.io, task)
    assert {os.path.join(d, n) for d, _, names in os.walk(data) for n in names} == existing  # outputs deleted
    monkeypatch.setattr(sink_module, "concat", good)
    clean = rewrite_module.rewrite_group(t.io, task)
    assert clean.rows == plan.groups[0].input_rows and clean.output_checksum == clean.input_checksum
    t.io.delete_many(list(clean.output_paths))


def test_holds_parts_compares_memory_and_dictionary_codes():
    """The concatenation check: the same arrays pass; a dictionary re-indexed to a shared dictionary
    passes only when every code names the same value; a copy (other memory) is not established."""
    # spec: COMPACT-17
    a = pa.table({"s": pa.array(["x", "y", None, "x"]).dictionary_encode(), "v": [1, 2, 3, 4]})
    b = pa.table({"s": pa.array(["z", "y"]).dictionary_encode(), "v": [5, 6]})
    joined = sink_module.concat([a, b])
    assert joined.column("s").chunks[0].dictionary.equals(joined.column("s").chunks[1].dictionary)
    assert holds_parts([a, b], joined)
    unified = joined.column("s").chunks[1]
    wrong = pa.DictionaryArray.from_arrays(pa.array([0, 1], unified.indices.type), unified.dictionary)
    assert not holds_parts([a, b], joined.set_column(0, "s", pa.chunked_array([joined.column("s").chunks[0],
                                                                              wrong])))
    copied = pa.table({"s": a.column("s").combine_chunks().dictionary_decode(), "v": [1, 2, 3, 4]})
    assert not holds_parts([copied], pa.table({"s": pa.array(["x", "y", None, "x"]), "v": [1, 2, 3, 4]}))
    assert not holds_parts([a], a.slice(1))  # rows missing


COMPACT = """
import sys, lakefmt
t = lakefmt.Catalog(sys.argv[1]).load_table("artemis.downlinks")
result = t.compaction.run("binpack", min_age_seconds=0)
assert result.groups_committed == result.groups_planned > 0, result.summary()
assert len(result.snapshot_ids) == 1, result.snapshot_ids  # small groups share one commit (COMPACT-18)
print("\\n".join(f"{t.location}/{f.path}" for f in t.plan_files()))
"""
SYNC = re.compile(r"^\d+\s+(fsync|fdatasync)\(\d+<([^>]*)>")


@pytest.mark.multiprocess
def test_binpack_outputs_are_synced_before_the_swap(local_catalog, tmp_path):
    """COMMIT-20: the rewrite leaves its outputs to the commit's sync; every output is fsynced
    before the catalog's write-ahead log is (the swap), watched with strace in a real process."""
    # spec: COMMIT-20
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    small_files_table(local_catalog, appends=5)
    log = tmp_path / "strace.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(log),
                           sys.executable, "-c", COMPACT, local_catalog.warehouse],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    outputs = done.stdout.split()
    assert outputs and all("/compact-" in p for p in outputs)
    synced = [m.group(2) for line in log.read_text().splitlines() if (m := SYNC.match(line))]
    metadata = max(i for i, p in enumerate(synced) if p.endswith(".metadata.json"))  # the compaction's
    swap = next(i for i, p in enumerate(synced) if i > metadata and os.path.basename(p).startswith("catalog.duckdb"))
    for path in outputs:
        assert synced[:swap].count(path) == 1, f"{path} was not fsynced once before the swap"
