"""Rollback and set-current-snapshot as commits (MAINT-13, COMMIT-16, META-8)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakefmt.errors import CommitConflictError, NoSuchSnapshotError, ValidationError
from tests.conftest import rows
from tests.maintenance.helpers import all_files, batch, make_table


def test_rollback_to_an_ancestor_is_a_metadata_only_commit(catalog):
    t = make_table(catalog)
    s1 = t.append(batch(0, 10))
    t.append(batch(10, 10))
    before = all_files(t)
    snap = t.rollback_to(s1.snapshot_id)
    assert snap.snapshot_id == s1.snapshot_id == t.metadata.current_snapshot_id
    assert rows(t.scan().to_arrow()) == rows(batch(0, 10))
    new_files = all_files(t) - before
    assert len(new_files) == 1 and new_files.pop().endswith(".metadata.json")  # no data, manifest or list
    assert t.metadata.snapshot_log[-1].value == s1.snapshot_id  # META-8
    assert len(t.snapshots()) == 2
    record = catalog.commit_log("maint.t", limit=1)[0]
    assert record.operation == "rollback" and record.snapshot_id is None
    again = catalog.load_table("maint.t")
    assert again.metadata.current_snapshot_id == s1.snapshot_id
    assert t.check().ok


def test_rollback_refuses_a_snapshot_that_is_not_an_ancestor(local_catalog):
    t = make_table(local_catalog)
    s1 = t.append(batch(0, 10))
    s2 = t.append(batch(10, 10))
    t.rollback_to(s1.snapshot_id)
    s3 = t.append(batch(20, 10))  # a new branch from s1: s2 is not an ancestor of s3
    with pytest.raises(ValidationError, match="not an ancestor"):
        t.rollback_to(s2.snapshot_id)
    with pytest.raises(NoSuchSnapshotError):
        t.rollback_to(12345)
    # set_current_snapshot moves to any retained snapshot, across branches.
    t.set_current_snapshot(s2.snapshot_id)
    assert rows(t.scan().to_arrow()) == rows(batch(0, 20))
    t.set_current_snapshot(s3.snapshot_id)
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(0, 10), batch(20, 10)]))
    with pytest.raises(NoSuchSnapshotError):
        t.set_current_snapshot(12345)
    assert [h.snapshot_id for h in t.history()][-2:] == [s2.snapshot_id, s3.snapshot_id]


def test_rollback_to_the_current_snapshot_commits_nothing(local_catalog):
    t = make_table(local_catalog)
    s1 = t.append(batch(0, 10))
    location = t.metadata_location
    assert t.rollback_to(s1.snapshot_id).snapshot_id == s1.snapshot_id
    assert t.set_current_snapshot(s1.snapshot_id).snapshot_id == s1.snapshot_id
    assert t.metadata_location == location


def test_rollback_conflicts_with_a_concurrent_change_of_the_current_snapshot(local_catalog, monkeypatch):
    t = make_table(local_catalog)
    s1 = t.append(batch(0, 10))
    t.append(batch(10, 10))
    other = local_catalog.load_table("maint.t")
    real_refresh = type(t).refresh
    raced = []

    def refresh_then_race(self):  # another writer appends right after the rollback loaded its base
        result = real_refresh(self)
        if self is t and not raced:
            raced.append(other.append(batch(20, 10)))
        return result

    monkeypatch.setattr(type(t), "refresh", refresh_then_race)
    with pytest.raises(CommitConflictError):
        t.rollback_to(s1.snapshot_id)
    monkeypatch.undo()
    assert t.refresh().metadata.current_snapshot_id == raced[0].snapshot_id
