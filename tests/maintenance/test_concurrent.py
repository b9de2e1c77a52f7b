"""Maintenance beside maintenance, as real processes interleaved at named points (MAINT-5, MAINT-10, COMMIT-15).

Two expiries, or an expiry and orphan removal, each delete files the other was about
to read. Every committed operation reports success (COMMIT-15), nothing reachable
from the current metadata is deleted, and the table checks clean afterwards. A file
that vanishes while orphan removal lists the table is neither an error nor an orphan.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from lakefmt.maintenance import table_reachability
from tests.conftest import rows
from tests.maintenance.helpers import all_files, batch, make_table, start_paused

pytestmark = pytest.mark.multiprocess


def history(catalog, n: int = 5):
    t = make_table(catalog)
    for i in range(n):
        t.append(batch(i * 10, 10))
    return t


def referenced(t) -> set[str]:
    t.refresh()
    reach = table_reachability(t.io, t.metadata, t.metadata_location)
    return {*reach.metadata_files, *reach.manifest_lists, *reach.manifests, *reach.data_files}


def test_two_expiries_one_deletes_what_the_other_is_about_to_read(catalog, tmp_path):
    """B deletes the expired snapshots' manifest lists between A's swap and A's cleanup."""
    t = history(catalog)
    expected = rows(t.scan().to_arrow())
    expired_ids = {s.snapshot_id for s in t.metadata.snapshots} - {t.metadata.current_snapshot_id}
    b = start_paused(catalog, "maint.t", "expire-before-commit", tmp_path, op="expire", retain_last=1)
    a = start_paused(catalog, "maint.t", "expire-after-swap", tmp_path, op="expire", retain_last=1)
    first = b.resume()   # B planned on the old metadata: it deletes the expired snapshots' trees
    assert first.get("ok"), first
    assert first["manifest_lists"] and set(first["expired_snapshot_ids"]) == expired_ids
    second = a.resume()  # A's swap came first; its cleanup finds those files gone
    assert second.get("ok"), second  # a committed expiry reports success (COMMIT-15)
    assert set(second["expired_snapshot_ids"]) == expired_ids and not second["failed_deletes"]
    t.refresh()
    assert [s.snapshot_id for s in t.metadata.snapshots] == [t.metadata.current_snapshot_id]
    assert t.check().ok
    assert rows(t.scan().to_arrow()) == expected
    assert all_files(t) == referenced(t)  # everything only the expired snapshots reached is gone


def test_expiry_cleanup_deletes_what_is_still_there_when_part_of_the_tree_is_gone(local_catalog, tmp_path):
    """One manifest list was deleted concurrently: the files the rest reach are still deleted (MAINT-5)."""
    t = history(local_catalog, 3)
    part_a = {f.path for f in t.plan_files("part = 'a'")}
    t.delete("part = 'a'")
    t.append(batch(30, 10))
    expected = rows(t.scan().to_arrow())
    old = [s for s in t.metadata.snapshots if s.snapshot_id != t.metadata.current_snapshot_id]
    a = start_paused(local_catalog, "maint.t", "expire-after-swap", tmp_path, op="expire", retain_last=1)
    Path(f"{t.location}/{old[0].manifest_list}").unlink()  # as a concurrent expiry does, after its manifests
    outcome = a.resume()
    assert outcome.get("ok"), outcome
    assert set(outcome["manifest_lists"]) == {s.manifest_list for s in old[1:]}
    assert set(outcome["data_files"]) == part_a and outcome["manifests"]
    assert all_files(t) == referenced(t)  # nothing that only the expired snapshots reached is left
    assert t.check().ok and rows(t.refresh().scan().to_arrow()) == expected


@pytest.mark.parametrize("point", ["orphans-listing", "orphans-before-reachability"])
def test_orphan_removal_beside_a_concurrent_expiry(local_catalog, tmp_path, point):
    """An expiry commits and deletes while orphan removal lists the table or reads reachability."""
    t = history(local_catalog)
    stray = "data/part=a/stray.parquet"
    t.io.write_bytes(f"{t.location}/{stray}", b"unreferenced")
    orphans = start_paused(local_catalog, "maint.t", point, tmp_path, op="orphans")
    expired = t.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=1)
    assert expired.manifest_lists and not expired.failed_deletes
    keep = referenced(t)
    outcome = orphans.resume()
    assert outcome.get("ok"), outcome
    assert stray in outcome["orphan_files"]
    assert not set(outcome["orphan_files"]) & keep  # nothing the current metadata references
    assert all_files(t) == keep and t.check().ok
    assert rows(t.refresh().scan().to_arrow()) == rows(batch(0, 50))


def test_files_vanishing_during_the_listing_are_skipped(local_catalog, tmp_path):
    """A writer deletes its lost attempt's files while they are being listed: not an error (MAINT-11)."""
    t = history(local_catalog, 2)
    keep = all_files(t)
    folders = sorted({p.rsplit("/", 1)[0] for p in keep})
    strays = [f"{folder}/lost-attempt-{i}.bin" for folder in folders for i in range(2)]
    for path in strays:
        t.io.write_bytes(f"{t.location}/{path}", b"x")
    t.io.write_bytes(f"{t.location}/data/part=zz/lost-attempt.bin", b"x")
    orphans = start_paused(local_catalog, "maint.t", "orphans-listing", tmp_path, op="orphans")
    for path in strays:  # some already listed, some buffered by the listing, some in folders not yet read
        Path(f"{t.location}/{path}").unlink()
    shutil.rmtree(f"{t.location}/data/part=zz")
    outcome = orphans.resume()
    assert outcome.get("ok"), outcome
    assert set(outcome["orphan_files"]) <= set(strays)  # at most the one listed before it vanished
    assert not outcome["failed_deletes"]
    assert all_files(t) == keep and t.check().ok
