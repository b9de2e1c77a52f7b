"""A full or read-only file system under a warehouse (spec/commits.md COMMIT-21).

Real tmpfs mounts: a 2 MiB one that an append overflows, and one remounted read-only.
A failed write raises a specific error chained from the operating system's, deletes
every file it created (the partly written one too), releases its write lease, and
leaves the table as it was. The catalog file lives outside the mount: the subject is
the table's storage.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakefmt
from lakefmt.errors import ReadOnlyStorageError, StorageError, StorageFullError
from lakefmt.leases import Leases
from tests.conftest import rows
from tests.maintenance.helpers import all_files

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string()), pa.field("noise", pa.binary())])


def noisy(start: int, n: int, width: int) -> pa.Table:
    """Rows with incompressible payloads of ``width`` bytes, over three partitions."""
    rng = np.random.default_rng(start)
    payload = [rng.bytes(width) for _ in range(n)]
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "part": ["abc"[i % 3] for i in ids], "noise": payload}, schema=SCHEMA)


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs, unmounted at the end."""
    point = tmp_path / "mnt"
    point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(point)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(point)], capture_output=True, check=False)
        if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], check=True)


def make_table(mount: Path, tmp_path: Path) -> lakefmt.Table:
    catalog = lakefmt.Catalog(str(mount / "warehouse"), catalog_path=str(tmp_path / "catalog.duckdb"), create=True)
    t = catalog.create_table("disk.t", SCHEMA, partition_by=["part"])
    t.append(noisy(0, 30, 100))
    return t


def live_write_leases(t: lakefmt.Table) -> list:
    return Leases(t.catalog).live(t.metadata.table_uuid, "write")


def assert_unchanged(t: lakefmt.Table, files_before: set[str], snapshot_id: int, expected: pa.Table) -> None:
    assert all_files(t) == files_before, "a file of the failed write was left behind"
    assert not live_write_leases(t), "the failed write's lease is still live"
    t = t.catalog.load_table("disk.t")
    assert t.current_snapshot().snapshot_id == snapshot_id
    assert t.check().ok
    assert rows(t.scan().to_arrow()) == rows(expected)


def test_an_append_bigger_than_the_disk_fails_cleanly(mount, tmp_path):
    """Disk full while data files are written: StorageFullError from ENOSPC, nothing left, lease released."""
    t = make_table(mount, tmp_path)
    before, snapshot = all_files(t), t.current_snapshot().snapshot_id
    with pytest.raises(StorageFullError, match="the disk is full") as info:
        t.append(noisy(1000, 3000, 1000))  # ~3 MB of random bytes on a 2 MiB file system
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert "Free space" in str(info.value) and "Nothing was committed" in str(info.value)
    assert_unchanged(t, before, snapshot, noisy(0, 30, 100))


def test_a_full_disk_leaves_no_zero_byte_file(mount, tmp_path):
    """The issue's case: no room for a single byte; the file created empty is deleted too."""
    t = make_table(mount, tmp_path)
    before, snapshot = all_files(t), t.current_snapshot().snapshot_id
    filler = mount / "filler"
    with pytest.raises(OSError), filler.open("wb") as f:  # fill the file system to the last block
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    with pytest.raises(StorageFullError) as info:
        t.append(noisy(1000, 3, 10))
    assert info.value.__cause__.errno == errno.ENOSPC
    filler.unlink()
    assert_unchanged(t, before, snapshot, noisy(0, 30, 100))
    t.append(noisy(1000, 3, 10))  # with room again, the same append succeeds
    assert t.scan().count() == 33


def test_a_read_only_file_system_is_named(mount, tmp_path):
    """EROFS on a write: ReadOnlyStorageError saying how to fix it; nothing written, lease released."""
    t = make_table(mount, tmp_path)
    before, snapshot = all_files(t), t.current_snapshot().snapshot_id
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    for write in (lambda: t.append(noisy(1000, 3, 10)), lambda: t.delete("part = 'a'")):
        with pytest.raises(ReadOnlyStorageError, match="read-only file system") as info:
            write()
        assert isinstance(info.value, StorageError) and "remount,rw" in str(info.value)
        assert info.value.__cause__.errno == errno.EROFS
    assert_unchanged(t, before, snapshot, noisy(0, 30, 100))
