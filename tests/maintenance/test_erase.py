"""Verified erasure: ``Table.erase`` and ``lakefmt erase`` (spec/deletes.md, ROWDEL-15 … ROWDEL-18)."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.cli import main
from lakefmt.cli.erase import EXIT_PENDING
from lakefmt.errors import NoSuchSnapshotError, UnknownColumnError, ValidationError
from lakefmt.maintenance import table_location
from lakefmt.maintenance.erase import ErasureRefusedError
from tests.maintenance.helpers import (
    SCHEMA,
    all_files,
    batch,
    end_write_leases_of,
    kill,
    make_table,
    spawn_paused_writer,
)

ERASED = {5, 31, 47}
FILTER = "id IN (5, 31, 47)"


def stored_ids(table: lakefmt.Table) -> Counter[int]:
    """Every ``id`` in the bytes of every Parquet file under the table location, deleted rows included."""
    location = table_location(table.metadata_location)
    ids: Counter[int] = Counter()
    for rel in all_files(table):
        if not rel.endswith(".parquet"):
            continue
        data = pq.read_table(pa.BufferReader(table.io.read_bytes(f"{location}/{rel}")))
        if "id" in data.column_names:
            ids.update(data.column("id").to_pylist())
    return ids


def live_ids(table: lakefmt.Table) -> Counter[int]:
    table.refresh()
    return Counter(table.scan().to_arrow().column("id").to_pylist())


def storage(table: lakefmt.Table) -> dict[str, int]:
    """Every file under the table location with its size: what a no-op must leave unchanged."""
    location = table_location(table.metadata_location)
    return {rel: table.io.size(f"{location}/{rel}") for rel in all_files(table)}


def history_table(catalog: lakefmt.Catalog) -> lakefmt.Table:
    """Matching rows live, hidden by a deletion vector, and only in an older snapshot's file."""
    t = make_table(catalog)
    t.append(batch(0, 30))
    t.append(batch(30, 30))
    t.delete("id = 5")                                      # merge-on-read: id 5 stays in the file's bytes
    t.set_property("write.delete.mode", "copy-on-write")
    t.delete("id = 47")                                     # its old file is only in older snapshots now
    t.set_property("write.delete.mode", "merge-on-read")
    t.delete("id = 10")
    return t


def test_erase_removes_every_stored_copy_and_keeps_the_rest(catalog):
    t = history_table(catalog)
    old_snapshots = [s.snapshot_id for s in t.snapshots()]
    before_live = live_ids(t)
    assert stored_ids(t)[5] >= 1 and stored_ids(t)[47] >= 1 and before_live[5] == 0 and before_live[47] == 0

    report = t.erase(FILTER)

    assert report.proven and report.complete and report.rescan_rows == 0 and not report.pending
    assert report.matched_rows == 1                          # only id 31 was still live
    assert report.stored_rows >= 3                           # 5 (vector), 31 (live), 47 (older snapshots)
    assert len(report.files_rewritten) == 2 and report.snapshot_id == t.metadata.current_snapshot_id
    assert set(report.snapshots_expired) == set(old_snapshots)
    assert {f.path for f in report.files_deleted if f.kind == "data"} >= set(report.files_rewritten)
    assert all(f.size > 0 for f in report.files_deleted if f.kind == "data")
    assert not ERASED & set(stored_ids(t))                   # no file in storage holds a matching row
    assert live_ids(t) == before_live - Counter(ERASED)      # the other rows, as a multiset
    assert live_ids(t) == Counter(i for i in range(60) if i not in ERASED | {10})
    stored = {c.path for c in report.checked}
    assert stored == {p for p in all_files(t) if p.startswith("data/") and not p.startswith("data/deletes/")}
    assert {c.check for c in report.checked} <= {"read", "statistics"}
    assert t.snapshot(report.snapshot_id).summary["lakefmt.row-operation"] == "erase"
    for sid in old_snapshots:
        with pytest.raises(NoSuchSnapshotError):
            t.scan(snapshot_id=sid).to_arrow()
    assert t.check().ok


def test_erase_removes_the_bytes_of_a_row_hidden_only_by_a_deletion_vector(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 30))
    t.delete("id = 5")
    holder = [f for f in t.plan_files() if f.deletion_vector is not None]
    assert len(holder) == 1 and stored_ids(t)[5] == 1 and live_ids(t)[5] == 0

    report = t.erase("id = 5")

    assert report.proven and report.matched_rows == 0
    assert report.files_rewritten == (holder[0].path,)
    assert holder[0].deletion_vector.path in {f.path for f in report.files_deleted}
    assert stored_ids(t)[5] == 0 and not (local_catalog.io.exists(f"{t.location}/{holder[0].path}"))
    assert live_ids(t) == Counter(i for i in range(30) if i != 5)
    assert not [f for f in t.plan_files() if f.deletion_vector is not None]


def test_erase_keeps_a_version_1_table_at_version_1(local_catalog):
    t = local_catalog.create_table("maint.t", SCHEMA, partition_by=["part"], format_version=1)
    t.append(batch(0, 30))
    t.append(batch(30, 30))
    report = t.erase("id < 3")
    assert report.proven and report.matched_rows == 3 and t.metadata.format_version == 1
    assert stored_ids(t) == Counter(range(3, 60))


def test_dry_run_writes_nothing_and_predicts_the_run(local_catalog):
    t = history_table(local_catalog)
    files, snapshot, pointer = storage(t), t.metadata.current_snapshot_id, t.metadata_location

    plan = t.erase(FILTER, dry_run=True)

    t.refresh()
    assert storage(t) == files and t.metadata_location == pointer and t.metadata.current_snapshot_id == snapshot
    assert plan.dry_run and not plan.proven and plan.snapshot_id is None and plan.rescan_rows is None
    done = t.erase(FILTER)
    assert plan.matched_rows == done.matched_rows == 1
    assert set(plan.files_rewritten) == set(done.files_rewritten)
    assert set(plan.snapshots_expired) == set(done.snapshots_expired)
    kinds = ("data", "deletion-vector")
    assert ({f.path for f in plan.files_deleted if f.kind in kinds}
            == {f.path for f in done.files_deleted if f.kind in kinds})


def test_retention_refusal_names_the_setting_and_changes_nothing(local_catalog):
    t = history_table(local_catalog)
    t.set_property("history.expire.min-snapshots-to-keep", 3)
    files, pointer = storage(t), t.metadata_location

    for dry_run in (True, False):
        with pytest.raises(ErasureRefusedError) as err:
            t.erase(FILTER, dry_run=dry_run)
        assert isinstance(err.value, ValidationError)
        message = str(err.value)
        assert "history.expire.min-snapshots-to-keep=3" in message and "retain_last=1" in message
        assert "ROWDEL-16" in message and "Nothing was written" in message
    t.refresh()
    assert storage(t) == files and t.metadata_location == pointer
    with pytest.raises(ErasureRefusedError, match=r"retain_last=2 keeps snapshot"):
        t.erase(FILTER, retain_last=2)

    report = t.erase(FILTER, retain_last=1)                  # the explicit override
    assert report.proven and not ERASED & set(stored_ids(t))


def test_retention_that_keeps_only_clean_snapshots_does_not_refuse(local_catalog):
    t = make_table(local_catalog, **{"history.expire.min-snapshots-to-keep": "2", "write.delete.mode": "copy-on-write"})
    t.append(batch(0, 30))
    first = t.metadata.current_snapshot_id
    t.delete("id = 1")                                       # id 1 is now only in the first snapshot's file
    t.append(batch(30, 3))
    t.append(batch(33, 3))
    report = t.erase("id = 1")                               # the two kept snapshots do not reach it
    assert report.proven and report.snapshots_expired == (first,) and report.snapshot_id is None
    assert stored_ids(t)[1] == 0 and len(t.snapshots()) == 3
    with pytest.raises(ErasureRefusedError, match="min-snapshots-to-keep=2"):
        t.erase("id = 34")                                   # the current snapshot would be kept


@pytest.mark.parametrize("bad", ["nope = 1", "id = 'x'"])
def test_bad_filter_is_a_clear_error_and_does_nothing(local_catalog, bad):
    t = history_table(local_catalog)
    files, pointer = storage(t), t.metadata_location
    with pytest.raises(ValidationError) as err:
        t.erase(bad)
    if bad.startswith("nope"):
        assert isinstance(err.value, UnknownColumnError) and "nope" in str(err.value)
    t.refresh()
    assert storage(t) == files and t.metadata_location == pointer


def test_bad_options_are_refused_before_anything(local_catalog):
    t = history_table(local_catalog)
    with pytest.raises(ValidationError, match="older_than"):
        t.erase(FILTER, older_than=3)
    with pytest.raises(ValidationError, match="retain_last"):
        t.erase(FILTER, retain_last=0)
    with pytest.raises(ValidationError, match="dry_run"):
        t.erase(FILTER, dry_run="yes")
    with pytest.raises(ValidationError, match="filter"):
        t.erase(None)


def copy_as_orphan(t: lakefmt.Table, source: str) -> str:
    """A copy of a data file under data/ that nothing references (what a crashed writer leaves)."""
    rel = "data/part=b/part-orphan-00000.parquet"
    t.io.write_bytes(f"{t.location}/{rel}", t.io.read_bytes(f"{t.location}/{source}"))
    return rel


def test_young_orphan_holding_a_matching_row_is_pending_until_its_grace_period(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 30))
    orphan = copy_as_orphan(t, next(f.path for f in t.plan_files() if "part=b" in f.path))

    report = t.erase("id = 1")                               # id 1 is in part b, and in the orphan copy
    assert not report.complete and not report.proven and report.rescan_rows == 0
    (pending,) = report.pending
    assert pending.path == orphan and pending.reason == "grace-period" and pending.matching_rows == 1
    mtime = os.path.getmtime(f"{t.location}/{orphan}")
    assert abs(pending.deletable_at.timestamp() - (mtime + 3 * 86400)) < 1
    assert stored_ids(t)[1] == 1 and orphan not in {c.path for c in report.checked}

    again = t.erase("id = 1", older_than=timedelta(0))
    assert again.proven and orphan in {f.path for f in again.files_deleted if f.kind == "orphan"}
    assert stored_ids(t)[1] == 0


@pytest.mark.multiprocess
def test_files_of_a_live_writer_are_pending_whatever_the_grace_period(local_catalog, tmp_path):
    t = make_table(local_catalog)
    t.append(batch(0, 30))
    writer = spawn_paused_writer(local_catalog, "maint.t", "after-data-files", tmp_path, op="append",
                                 start=0, rows=3)           # ids 0..2 written, not committed, lease held
    try:
        committed = {f.path for f in t.plan_files()}
        in_flight = {p for p in all_files(t) if p.startswith("data/part") and p not in committed}
        assert in_flight
        report = t.erase("id < 3", older_than=timedelta(0))
        assert {p.reason for p in report.pending} == {"write-lease"} and report.pending
        assert {p.path for p in report.pending} == in_flight
        assert all(p.deletable_at is not None for p in report.pending) and not report.complete
    finally:
        kill(writer)
    assert end_write_leases_of(local_catalog, t, {p.path for p in report.pending}) == 1
    report = t.erase("id < 3", older_than=timedelta(0))
    assert report.proven and not {0, 1, 2} & set(stored_ids(t))


def run(capsys, warehouse: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--warehouse", warehouse, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_erase(local_catalog, capsys):
    t = history_table(local_catalog)
    wh = local_catalog.warehouse
    files = storage(t)
    code, out, _ = run(capsys, wh, "erase", "maint.t", "--filter", FILTER, "--dry-run")
    assert code == 0 and "would erase 1 live row(s)" in out and "would rewrite 2 file(s)" in out
    assert storage(t) == files

    t.set_property("history.expire.min-snapshots-to-keep", 3)
    code, out, err = run(capsys, wh, "erase", "maint.t", "--filter", FILTER)
    assert code == 2 and err.startswith("error: ") and "history.expire.min-snapshots-to-keep" in err

    code, out, err = run(capsys, wh, "erase", "maint.t", "--filter", "nope = 1")
    assert code == 2 and "nope" in err

    copy_as_orphan(t, next(f.path for f in t.plan_files()                              # holds id 5, deleted
                           if "part=c" in f.path and f.deletion_vector is not None))
    code, out, err = run(capsys, wh, "erase", "maint.t", "--filter", FILTER, "--retain-last", "1")
    assert code == EXIT_PENDING and "pending grace-period" in out and "not complete" in err

    code, out, err = run(capsys, wh, "erase", "maint.t", "--filter", FILTER, "--older-than", "0",
                         "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["proven"] is True and report["rescan_rows"] == 0 and report["pending"] == []
    assert not ERASED & set(stored_ids(t))
    code, out, _ = run(capsys, wh, "erase", "maint.t", "--filter", FILTER, "--retain-last", "1")
    assert code == 0 and "erasure proven" in out and "erased 0 live row(s)" in out
