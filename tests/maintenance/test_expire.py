"""Snapshot expiry (spec/maintenance.md, MAINT-3 … MAINT-7), including branches of history (MAINT-13)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from lakefmt.commit import FileChange
from lakefmt.errors import CommitConflictError, CorruptMetadataError, NoSuchSnapshotError, ValidationError
from lakefmt.maintenance import ExpireResult, select_expired
from lakefmt.manifest_io import read_manifest_list
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.updates import AssertNotCurrent
from tests.conftest import rows
from tests.maintenance.helpers import all_files, batch, make_table


def snap(i: int, parent: int | None, ts: int) -> Snapshot:
    return Snapshot(i, parent, i, ts, "append", f"metadata/snap-{i}.manifest-list.parquet", 0)


def metadata_with(snapshots: list[Snapshot], current: int) -> TableMetadata:
    return TableMetadata("00000000-0000-4000-8000-000000000000", "/t", len(snapshots), 0, 1, (), 0, (), 0,
                         999, (), 0, {}, current, tuple(snapshots), (), ())


class TestSelect:
    """The choice of snapshots is pure (MAINT-3)."""

    chain = (snap(1, None, 100), snap(2, 1, 200), snap(3, 2, 300), snap(4, 3, 400))

    def test_older_than_cutoff_except_current(self):
        meta = metadata_with(list(self.chain), 4)
        assert select_expired(meta, cutoff=1_000, retain_last=1) == {1, 2, 3}
        assert select_expired(meta, cutoff=250, retain_last=1) == {1, 2}
        assert select_expired(meta, cutoff=0, retain_last=1) == set()

    def test_retain_last_counts_the_current_ancestry(self):
        meta = metadata_with(list(self.chain), 4)
        assert select_expired(meta, cutoff=1_000, retain_last=2) == {1, 2}
        assert select_expired(meta, cutoff=1_000, retain_last=10) == set()

    def test_branches_off_the_current_ancestry_are_not_retained_by_count(self):
        # 1 <- 2 <- 3 ; rolled back to 1 and appended 5: 2 and 3 are a side branch.
        meta = metadata_with([*self.chain[:3], snap(5, 1, 500)], 5)
        assert select_expired(meta, cutoff=1_000, retain_last=2) == {2, 3}

    def test_explicit_ids(self):
        meta = metadata_with(list(self.chain), 4)
        assert select_expired(meta, cutoff=0, retain_last=1, snapshot_ids=[2]) == {2}
        with pytest.raises(ValidationError, match="current"):
            select_expired(meta, cutoff=0, retain_last=1, snapshot_ids=[4])
        with pytest.raises(NoSuchSnapshotError):
            select_expired(meta, cutoff=0, retain_last=1, snapshot_ids=[99])
        with pytest.raises(ValidationError):
            select_expired(meta, cutoff=0, retain_last=0)

    def test_the_commit_conflicts_if_an_expired_snapshot_became_current(self):
        with pytest.raises(CommitConflictError, match="MAINT-4"):
            AssertNotCurrent(frozenset({2, 3})).check(metadata_with(list(self.chain[:3]), 3))
        AssertNotCurrent(frozenset({2})).check(metadata_with(list(self.chain), 4))


def test_expire_after_compaction_frees_the_replaced_files(catalog):
    t = make_table(catalog)
    for i in range(4):
        t.append(batch(i * 10, 10))
    files = t.plan_files()
    data = t.scan().to_arrow()
    compacted = t.write_data_files(data, kind="compact")
    t.commit_change(FileChange("replace", added=compacted, removed=files))
    before = all_files(t)

    dry = t.maintenance.expire_snapshots(older_than=timedelta(0), dry_run=True)
    assert isinstance(dry, ExpireResult) and dry.dry_run and len(dry.expired_snapshot_ids) == 4
    assert set(dry.data_files) == {f.path for f in files}
    assert all_files(t) == before and len(t.snapshots()) == 5  # a dry run changes nothing

    result = t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert result.data_files == dry.data_files and result.manifests == dry.manifests
    assert result.manifest_lists == dry.manifest_lists and result.bytes_freed == dry.bytes_freed
    assert result.bytes_freed >= sum(f.file_size_bytes for f in files)
    assert [s.snapshot_id for s in t.snapshots()] == [t.metadata.current_snapshot_id]
    deleted = {*result.data_files, *result.manifests, *result.manifest_lists, *result.metadata_files}
    expiry_metadata = t.metadata_location.split(f"{t.location}/", 1)[1]  # written by the expiry commit
    assert all_files(t) == (before - deleted) | {expiry_metadata}
    assert t.check().ok and rows(t.scan().to_arrow()) == rows(data)
    assert catalog.commit_log("maint.t", limit=1)[0].operation == "expire-snapshots"


def test_defaults_come_from_table_properties(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 5))
    t.append(batch(5, 5))
    assert t.maintenance.expire_snapshots().expired_snapshot_ids == ()  # younger than 5 days
    t.set_properties(**{"history.expire.max-snapshot-age-ms": "0",
                        "history.expire.min-snapshots-to-keep": "2"})
    time.sleep(0.002)
    assert t.maintenance.expire_snapshots().expired_snapshot_ids == ()  # both kept by the count
    t.append(batch(10, 5))
    time.sleep(0.002)
    assert len(t.maintenance.expire_snapshots().expired_snapshot_ids) == 1
    with pytest.raises(ValidationError):
        t.set_properties(**{"history.expire.min-snapshots-to-keep": "0"})


def test_older_than_a_point_in_time(local_catalog):
    t = make_table(local_catalog)
    s1 = t.append(batch(0, 5))
    time.sleep(0.01)
    cut = datetime.now(timezone.utc)
    time.sleep(0.01)
    t.append(batch(5, 5))
    t.append(batch(10, 5))
    result = t.maintenance.expire_snapshots(older_than=cut)
    assert result.expired_snapshot_ids == (s1.snapshot_id,)
    assert result.data_files == ()  # s1's files are still live
    assert rows(t.scan().to_arrow()) == rows(batch(0, 15))


def test_expiry_keeps_every_file_of_every_branch_it_retains(catalog):
    """rollback_to an old snapshot, append on the new branch: expiry keeps what retained snapshots read."""
    t = make_table(catalog)
    s1 = t.append(batch(0, 12))
    s2 = t.append(batch(12, 12))
    s3 = t.delete("id < 6 OR id >= 20")  # rewrites files of s1 and s2 (copy-on-write)
    at = {s.snapshot_id: t.scan(snapshot_id=s.snapshot_id).to_arrow() for s in (s1, s2, s3)}
    t.rollback_to(s1.snapshot_id)
    s4 = t.append(batch(100, 6))
    at[s4.snapshot_id] = t.scan().to_arrow()
    assert rows(at[s4.snapshot_id]) == rows(pa.concat_tables([batch(0, 12), batch(100, 6)]))

    # Expire only s2: s3 (a side branch now) still reads files s2 added and must keep them.
    result = t.maintenance.expire_snapshots(snapshot_ids=[s2.snapshot_id])
    assert result.expired_snapshot_ids == (s2.snapshot_id,)
    s3_files = {f.path for f in t.plan_files(snapshot_id=s3.snapshot_id)}
    assert not s3_files & set(result.data_files)
    for sid in (s1.snapshot_id, s3.snapshot_id, s4.snapshot_id):
        assert rows(t.scan(snapshot_id=sid).to_arrow()) == rows(at[sid])
    assert t.check().ok

    # Expire everything but the current snapshot: s1's files stay (s4 reads them), s3's go.
    result = t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert set(result.expired_snapshot_ids) == {s1.snapshot_id, s3.snapshot_id}
    live = {f.path for f in t.plan_files()}
    assert not live & set(result.data_files)
    assert set(result.data_files) == s3_files - live
    assert rows(t.scan().to_arrow()) == rows(at[s4.snapshot_id])
    report = t.check()
    assert report.ok, report.format()
    assert t.maintenance.remove_orphan_files(older_than=timedelta(0)).orphan_files == ()


def test_old_metadata_files_beyond_the_log_are_removed(local_catalog):
    t = make_table(local_catalog, **{"write.metadata.previous-versions-max": "2"})
    for i in range(5):
        t.append(batch(i, 1))
    metadata_files = {p for p in all_files(t) if p.endswith(".metadata.json")}
    assert len(metadata_files) == 6
    result = t.maintenance.expire_snapshots(older_than=timedelta(days=1))  # no snapshot is that old
    assert result.expired_snapshot_ids == ()
    kept = {p for p in all_files(t) if p.endswith(".metadata.json")}
    logged = {str(e.value) for e in t.metadata.metadata_log}
    assert len(logged) == 2 and kept == logged | {t.metadata_location.split(f"{t.location}/", 1)[1]}
    assert set(result.metadata_files) == metadata_files - kept
    assert t.check().ok


def test_expiry_never_deletes_what_a_concurrent_commit_references(local_catalog, monkeypatch):
    """Reachability is computed from the committed metadata, not from the plan (MAINT-5)."""
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    t.append(batch(10, 10))
    other = local_catalog.load_table("maint.t")
    import lakefmt.maintenance.expire as expire_module

    real_select = expire_module.select_expired

    def select_then_race(*args, **kwargs):  # another writer commits between planning and committing
        chosen = real_select(*args, **kwargs)
        other.append(batch(20, 10))
        return chosen

    monkeypatch.setattr(expire_module, "select_expired", select_then_race)
    result = t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert len(result.expired_snapshot_ids) == 1
    assert t.check().ok and rows(t.scan().to_arrow()) == rows(batch(0, 30))


def test_expired_snapshot_that_became_current_conflicts_and_deletes_nothing(local_catalog, monkeypatch):
    t = make_table(local_catalog)
    s1 = t.append(batch(0, 10))
    t.append(batch(10, 10))
    other = local_catalog.load_table("maint.t")
    import lakefmt.maintenance.expire as expire_module

    real_select = expire_module.select_expired

    def select_then_rollback(*args, **kwargs):
        chosen = real_select(*args, **kwargs)
        other.rollback_to(s1.snapshot_id)
        return chosen

    monkeypatch.setattr(expire_module, "select_expired", select_then_rollback)
    before = all_files(t)
    with pytest.raises(CommitConflictError):
        t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert before <= all_files(t)  # nothing deleted
    assert all(p.endswith(".metadata.json") for p in all_files(t) - before)  # only the rollback's commit
    assert t.refresh().check().ok
    assert rows(t.scan().to_arrow()) == rows(batch(0, 10))



@pytest.mark.parametrize(("operation", "options", "message"), [
    ("expire", {"older_than": 5}, ("older_than must be a datetime.timedelta (an age such as timedelta(days=3)) "
                                  "or a datetime.datetime")),
    ("expire", {"older_than": "7d"}, "older_than must be a datetime.timedelta"),
    ("expire", {"older_than": timedelta(seconds=-1)}, "older_than must not be negative"),
    ("expire", {"retain_last": 0}, "retain_last must be at least 1"),
    ("expire", {"retain_last": "2"}, "retain_last must be an int of at least 1, got str '2'"),
    ("expire", {"retain_last": True}, "retain_last must be an int"),
    ("expire", {"retain_last": 1.5}, "retain_last must be an int"),
    ("expire", {"snapshot_ids": 5}, "snapshot_ids must be an iterable of int snapshot ids"),
    ("expire", {"snapshot_ids": "123"}, "snapshot_ids must be an iterable"),
    ("expire", {"snapshot_ids": [1.5]}, "snapshot_ids must hold int snapshot ids, got float 1.5"),
    ("expire", {"dry_run": "false"}, "dry_run must be a bool (True or False), got str 'false'"),
    ("orphans", {"older_than": 5}, ("older_than must be a datetime.timedelta (an age such as timedelta(days=3)), "
                                   "got int 5")),
    ("orphans", {"older_than": None}, "older_than must be a datetime.timedelta"),
    ("orphans", {"older_than": datetime(2026, 1, 1)}, "older_than must be a datetime.timedelta"),
    ("orphans", {"older_than": timedelta(days=-1)}, "older_than must not be negative"),
    ("orphans", {"dry_run": 0}, "dry_run must be a bool (True or False), got int 0"),
    ("orphans", {"dry_run": None}, "dry_run must be a bool"),
])
def test_bad_options_are_refused_alike_and_nothing_changes(local_catalog, operation, options, message):
    """Both destructive operations validate their options the same way (MAINT-3, MAINT-9)."""
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    t.append(batch(10, 10))
    t.io.write_bytes(f"{t.location}/data/stray.bin", b"s")
    before, location = all_files(t), t.metadata_location
    run = t.maintenance.expire_snapshots if operation == "expire" else t.maintenance.remove_orphan_files
    with pytest.raises(ValidationError) as info:
        run(**options)
    assert message in str(info.value)
    assert all_files(t) == before and t.refresh().metadata_location == location  # nothing written or deleted


def test_a_damaged_table_is_expired_but_nothing_is_deleted(local_catalog):
    """A retained manifest is missing and no commit explains it: deleting anything could be wrong (MAINT-5)."""
    t = make_table(local_catalog)
    for i in range(3):
        t.append(batch(i * 10, 10))
    newest = read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")[0]
    t.io.delete(f"{t.location}/{newest.path}")
    before = all_files(t)
    with pytest.raises(CorruptMetadataError, match="missing"):  # orphan removal refuses outright
        t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert all_files(t) == before
    result = t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert len(result.expired_snapshot_ids) == 2 and result.files_deleted == 0  # committed: success (COMMIT-15)
    assert len(result.warnings) == 1 and "MissingFileError" in result.warnings[0]
    assert before < all_files(t)  # only the expiry's metadata file was added
    assert [v.requirement for v in t.maintenance.check(level="metadata").violations] == ["LAYOUT-5"]
