"""Every file of a commit is durable before the catalog swap (spec/commits.md COMMIT-20).

A power cut cannot be staged in a test, so the test watches the system calls instead: a
real append runs under ``strace`` and the order of its ``fsync`` calls is checked. Each
data file, manifest, manifest list and metadata file the commit wrote must be fsynced,
and so must each folder that gained an entry (once each), all before the catalog's
write-ahead log is synced by the swap.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import lakefmt
from tests.maintenance.helpers import all_files

REPO = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])
APPEND = """
import sys, pyarrow as pa, lakefmt
cat = lakefmt.Catalog(sys.argv[1])
cat.io.fsync = sys.argv[2] == "fsync"
t = cat.load_table("durable.t")
t.append(pa.table({"id": [1, 2, 3, 4], "part": sys.argv[3].split(",")}, schema=t.arrow_schema()))
"""
SYNC = re.compile(r"^\d+\s+(fsync|fdatasync)\(\d+<([^>]*)>")
WRITE_OUT = re.compile(r"^\d+\s+(fsync|fdatasync|sync_file_range)\(\d+<([^>]*)>")
LARGE_APPEND = """
import random, sys, pyarrow as pa, lakefmt
t = lakefmt.Catalog(sys.argv[1]).load_table("durable.t")
ids = [random.getrandbits(63) for _ in range(60_000)]  # ~480 KB of incompressible values: one large data file
t.append(pa.table({"id": ids, "part": ["a"] * len(ids)}, schema=t.arrow_schema()))
"""
pytestmark = pytest.mark.multiprocess


def traced_append(catalog: lakefmt.Catalog, tmp_path: Path, parts: str, *, fsync: bool = True) -> list[str]:
    """Run one append in a fresh process under strace; return the paths synced, in call order."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    log = tmp_path / f"strace-{len(list(tmp_path.glob('strace-*')))}.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(log),
                           sys.executable, "-c", APPEND, catalog.warehouse, "fsync" if fsync else "none", parts],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return [m.group(2) for line in log.read_text().splitlines() if (m := SYNC.match(line))]


@pytest.fixture
def table(tmp_path: Path) -> lakefmt.Table:
    catalog = lakefmt.Catalog(str(tmp_path / "warehouse"), create=True)
    return catalog.create_table("durable.t", SCHEMA, partition_by=["part"])


def test_files_and_folders_of_a_commit_are_synced_before_the_swap(table, tmp_path):
    """First append: new partition folders, so data/ and the table folder gain entries too."""
    before = all_files(table)
    synced = traced_append(table.catalog, tmp_path, "a,b,a,b")
    written = sorted(all_files(table) - before)
    assert {p.split("/")[0] for p in written} == {"data", "metadata"}
    metadata_file = next(f"{table.location}/{p}" for p in written if p.endswith(".metadata.json"))
    swap = next(i for i, path in enumerate(synced)
                if i > synced.index(metadata_file) and os.path.basename(path).startswith("catalog.duckdb"))
    before_swap = synced[:swap]
    for rel in written:  # data files, manifest, manifest list, metadata file: each synced once
        assert before_swap.count(f"{table.location}/{rel}") == 1, f"{rel} was not fsynced once before the swap"
    folders = [f"{table.location}/{d}" for d in ("", "data", "data/part=a", "data/part=b", "metadata")]
    for folder in folders:
        assert folder.rstrip("/") in before_swap, f"folder {folder} was not fsynced before the swap"
    counts = Counter(p for p in before_swap if p in {f.rstrip("/") for f in folders})
    assert max(counts.values()) == 1, f"a folder was synced more than once: {counts}"


def test_a_later_append_syncs_only_the_folders_that_changed(table, tmp_path):
    """Existing partition: its folder and metadata/ are synced, once each; data/ and the table folder are not."""
    table.append(pa.table({"id": [0], "part": ["a"]}, schema=SCHEMA))
    synced = traced_append(table.catalog, tmp_path, "a,a,a,a")
    folders = [p for p in synced if os.path.isdir(p) and p.startswith(table.location)]
    assert sorted(folders) == [f"{table.location}/data/part=a", f"{table.location}/metadata"]


def test_without_fsync_no_table_file_is_synced(table, tmp_path):
    """``FileIO.fsync = False`` (what the append benchmark compares against) syncs nothing of the table."""
    synced = traced_append(table.catalog, tmp_path, "a,b,a,b", fsync=False)
    assert not [p for p in synced if p.startswith(table.location)]
    assert table.refresh().scan().count() == 4


def test_a_large_file_starts_its_write_out_when_closed_and_is_still_fsynced_before_the_swap(table, tmp_path):
    """COMMIT-20: the write-out of a data file of 256 KiB or more starts when it is closed (``sync_file_range``,
    a head start only); the file is fsynced before the swap all the same."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    before = all_files(table)
    log = tmp_path / "strace.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range", "-o", str(log),
                           sys.executable, "-c", LARGE_APPEND, table.catalog.warehouse],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    calls = [(m.group(1), m.group(2)) for line in log.read_text().splitlines() if (m := WRITE_OUT.match(line))]
    [data_file] = [f"{table.location}/{p}" for p in all_files(table) - before if p.startswith("data/")]
    assert os.path.getsize(data_file) >= 256 * 1024
    assert [call for call, path in calls if path == data_file] == ["sync_file_range", "fsync"]
    metadata_file = next(path for call, path in calls if path.endswith(".metadata.json"))
    assert calls.index(("fsync", data_file)) < next(
        i for i, (call, path) in enumerate(calls)
        if i > calls.index(("fsync", metadata_file)) and os.path.basename(path).startswith("catalog.duckdb"))
    small = [path for call, path in calls if call == "sync_file_range" and path != data_file]
    assert not small, f"small files need no head start: {small}"
    assert table.refresh().scan().count() == 60_000
