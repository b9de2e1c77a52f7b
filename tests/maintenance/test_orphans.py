"""Orphan-file removal (spec/maintenance.md, MAINT-8 … MAINT-12; CAT-10 write leases)."""

from __future__ import annotations

import os
import re
import time
from datetime import timedelta

import pyarrow as pa
import pytest

from lakefmt.commit import FileChange
from lakefmt.errors import IncompleteListingError, ValidationError
from lakefmt.io import FileInfo
from lakefmt.leases import Leases
from tests.conftest import rows
from tests.maintenance.helpers import all_files, batch, kill, make_table, spawn_paused_writer

TOKEN = re.compile(r"^data/[^/]+/part-([0-9a-f]{16})-")


def test_dry_run_by_default_then_delete(catalog):
    t = make_table(catalog)
    t.append(batch(0, 20))
    junk = f"{t.location}/data/part=a/stray.parquet"
    t.io.write_bytes(junk, b"not referenced")
    dry = t.maintenance.remove_orphan_files(older_than=timedelta(0))
    assert dry.dry_run and dry.orphan_files == ("data/part=a/stray.parquet",)
    assert dry.orphan_bytes == len(b"not referenced")
    assert t.io.exists(junk)  # a dry run deletes nothing (MAINT-9)
    done = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert done.orphan_files == dry.orphan_files and not t.io.exists(junk)
    assert t.check().ok and rows(t.scan().to_arrow()) == rows(batch(0, 20))


def test_grace_period_protects_young_files(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    old, young = f"{t.location}/data/old.bin", f"{t.location}/data/young.bin"
    t.io.write_bytes(old, b"o")
    t.io.write_bytes(young, b"y")
    four_days_ago = time.time() - 4 * 86400
    os.utime(old, (four_days_ago, four_days_ago))
    result = t.maintenance.remove_orphan_files(dry_run=False)  # default grace period: 3 days (MAINT-9)
    assert result.orphan_files == ("data/old.bin",) and result.too_young_files == 1
    assert t.io.exists(young) and not t.io.exists(old)


def test_never_touches_files_outside_the_table_location(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    sibling = t.location + "-other/data/x.parquet"  # shares the location as a string prefix
    t.io.write_bytes(sibling, b"x")
    result = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert result.orphan_files == () and t.io.exists(sibling)  # MAINT-12


def test_refuses_when_the_listing_misses_a_referenced_file(local_catalog, monkeypatch):
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    t.io.write_bytes(f"{t.location}/data/junk", b"j")
    real = type(t.io).list_files

    def lossy(self, prefix, *, strict=False):  # a store that silently drops part of a listing
        return [info for info in real(self, prefix, strict=strict) if "/part=b/" not in info.path]

    monkeypatch.setattr(type(t.io), "list_files", lossy)
    with pytest.raises(IncompleteListingError, match="MAINT-11"):
        t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    monkeypatch.undo()
    assert t.io.exists(f"{t.location}/data/junk")  # nothing was deleted


def test_refuses_when_a_folder_cannot_be_read(local_catalog, monkeypatch):
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    locked = f"{t.location}/data/locked"
    os.makedirs(locked)
    real_scandir = os.scandir

    def scandir(path):  # what an unreadable folder does (the tests may run as root, who reads everything)
        if str(path).rstrip("/").endswith("/data/locked"):
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(IncompleteListingError, match="cannot list"):
        t.maintenance.remove_orphan_files(older_than=timedelta(0))


def test_listing_spelled_with_another_scheme_is_still_matched(local_catalog, monkeypatch):
    # The store answers with file:// URLs: normalization makes them the same files (MAINT-2).
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    real = type(t.io).list_files

    def as_urls(self, prefix, *, strict=False):
        return [FileInfo("file://" + i.path, i.size, i.mtime) for i in real(self, prefix, strict=strict)]

    monkeypatch.setattr(type(t.io), "list_files", as_urls)
    result = t.maintenance.remove_orphan_files(older_than=timedelta(0))
    assert result.orphan_files == () and result.referenced_files == result.listed_files > 0


def test_negative_grace_period_is_refused(local_catalog):
    t = make_table(local_catalog)
    with pytest.raises(ValidationError, match="older_than must not be negative"):
        t.maintenance.remove_orphan_files(older_than=timedelta(seconds=-1))


@pytest.mark.multiprocess
def test_in_flight_files_of_a_leased_writer_survive(catalog, tmp_path):
    """A writer paused after writing its data files and manifests, lease live: nothing of it is deleted."""
    t = make_table(catalog)
    t.append(batch(0, 20))
    before = all_files(t)
    writer = spawn_paused_writer(catalog, "maint.t", "after-manifests", tmp_path, op="append", start=100,
                                 rows=30)
    try:
        in_flight = all_files(t) - before
        assert any(p.startswith("data/") for p in in_flight)
        assert any(p.startswith("metadata/m-") for p in in_flight)
        t.io.write_bytes(f"{t.location}/data/part=a/stray.parquet", b"not leased")
        result = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
        assert result.orphan_files == ("data/part=a/stray.parquet",)
        assert result.in_flight_files == len(in_flight)
        assert in_flight <= all_files(t)  # every in-flight file survived (CAT-10, MAINT-8)
    finally:
        kill(writer)
    # Dead but still leased: still protected. Once its lease ends, its files are orphans.
    assert t.maintenance.remove_orphan_files(older_than=timedelta(0)).orphan_files == ()
    tokens = {m.group(1) for p in in_flight if (m := TOKEN.match(p))}
    assert len(tokens) == 1
    token = tokens.pop()
    Leases(catalog).release(t.metadata.table_uuid, "write", [token], owner=token)
    result = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert set(result.orphan_files) == in_flight
    assert all_files(t) == before and t.check().ok
    assert rows(t.scan().to_arrow()) == rows(batch(0, 20))


def test_a_writer_that_commits_during_the_scan_keeps_its_files(local_catalog, monkeypatch):
    """Listed while in flight, committed and unleased before reachability is read: referenced (MAINT-10)."""
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    other = local_catalog.load_table("maint.t")
    files = other.write_data_files(batch(100, 10))  # written before the listing, under other's lease
    real_live = Leases.live
    raced: list[bool] = []

    def commit_then_read_leases(self, table_uuid, kind=None):
        if not raced:
            other.commit_change(FileChange("append", added=files))
            other.release_write_token()
            raced.append(True)
        return real_live(self, table_uuid, kind)

    monkeypatch.setattr(Leases, "live", commit_then_read_leases)
    result = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert raced and result.orphan_files == ()
    monkeypatch.undo()
    assert rows(t.refresh().scan().to_arrow()) == rows(pa.concat_tables([batch(0, 10), batch(100, 10)]))
    assert t.check().ok
