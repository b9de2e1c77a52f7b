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
import threading
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


def test_a_large_file_is_fsynced_once_before_the_swap(table, tmp_path):
    """COMMIT-20: a data file of 256 KiB or more is fsynced once, before the swap, like every file of the commit."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    before = all_files(table)
    log = tmp_path / "strace.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(log),
                           sys.executable, "-c", LARGE_APPEND, table.catalog.warehouse],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    synced = [m.group(2) for line in log.read_text().splitlines() if (m := SYNC.match(line))]
    written = all_files(table) - before
    [data_file] = [f"{table.location}/{p}" for p in written if p.startswith("data/")]
    assert os.path.getsize(data_file) >= 256 * 1024
    metadata_file = next(f"{table.location}/{p}" for p in written if p.endswith(".metadata.json"))
    swap = next(i for i, path in enumerate(synced)
                if i > synced.index(metadata_file) and os.path.basename(path).startswith("catalog.duckdb"))
    assert synced.count(data_file) == 1 and synced.index(data_file) < swap
    assert table.refresh().scan().count() == 60_000


def test_a_large_file_starts_its_fsync_when_closed(tmp_path, monkeypatch):
    """COMMIT-20: closing a local file of 256 KiB or more starts its fsync on a thread, before any
    sync is asked for; the next sync waits for it and syncs the small file closed since."""
    from lakefmt import io as io_module
    from lakefmt.io import FileIO

    calls: list[str] = []
    started = threading.Event()
    fsync_path = io_module.fsync_path

    def spy(path: str):  # type: ignore[no-untyped-def]
        calls.append(path)
        if path.endswith("large.bin"):
            started.set()
        return fsync_path(path)

    monkeypatch.setattr(io_module, "fsync_path", spy)
    io = FileIO(str(tmp_path))
    with io.open_output(f"{tmp_path}/large.bin") as f:
        f.write(os.urandom(256 * 1024))
    assert started.wait(30), "the fsync of the large file did not start once it was closed"
    with io.open_output(f"{tmp_path}/small.bin") as f:
        f.write(b"x" * 100)
    assert f"{tmp_path}/small.bin" not in calls  # a small file waits for the sync
    io.sync()
    assert calls.count(f"{tmp_path}/large.bin") == 1 and calls.count(f"{tmp_path}/small.bin") == 1
    assert str(tmp_path) in calls  # and the folder that gained them


def test_start_sync_returns_before_the_fsyncs_end_and_sync_waits_for_them(tmp_path, monkeypatch):
    """COMMIT-20: ``start_sync`` hands the fsyncs to threads and returns; the next ``sync`` returns only once
    they are done (a commit overlaps them with taking the catalog lock and calls ``sync`` before its swap)."""
    from lakefmt import io as io_module
    from lakefmt.io import FileIO

    release, done = threading.Event(), []
    fsync_path = io_module.fsync_path

    def blocked(path: str):  # type: ignore[no-untyped-def]
        assert release.wait(30)
        done.append(path)
        return fsync_path(path)

    monkeypatch.setattr(io_module, "fsync_path", blocked)
    io = FileIO(str(tmp_path))
    with io.open_output(f"{tmp_path}/small.bin") as f:
        f.write(b"x" * 100)
    io.start_sync()
    assert done == []  # returned while the fsyncs wait
    waiter = threading.Thread(target=io.sync)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "sync returned before the started fsyncs ended"
    release.set()
    waiter.join(30)
    assert not waiter.is_alive() and sorted(done) == sorted([f"{tmp_path}/small.bin", str(tmp_path)])


def test_a_failed_fsync_fails_the_commit_and_leaves_the_table_as_it_was(table, monkeypatch):
    """COMMIT-20: an fsync that fails while the commit takes the catalog lock fails the commit before its swap;
    the files the commit wrote are deleted (COMMIT-21) and the table still reads its old rows."""
    from lakefmt import io as io_module

    table.append(pa.table({"id": [1], "part": ["a"]}, schema=SCHEMA))
    before, location = all_files(table), table.metadata_location
    fsync_path = io_module.fsync_path

    def failing(path: str):  # type: ignore[no-untyped-def]
        if path.endswith(".metadata.json"):
            return OSError(5, "Input/output error")
        return fsync_path(path)

    monkeypatch.setattr(io_module, "fsync_path", failing)
    with pytest.raises(OSError, match="fsync of .*metadata.json failed"):
        table.append(pa.table({"id": [2], "part": ["b"]}, schema=SCHEMA))
    monkeypatch.setattr(io_module, "fsync_path", fsync_path)
    fresh = table.catalog.load_table("durable.t")
    assert fresh.metadata_location == location
    assert fresh.scan().to_arrow().column("id").to_pylist() == [1]
    assert all_files(fresh) == before
