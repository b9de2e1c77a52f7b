"""History files: older snapshots out of the metadata file (spec/metadata.md META-13 … META-19, LAYOUT-13).

Every test works on real tables in a real catalog; a crashed writer is a real process killed
with SIGKILL at a named point of the commit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

import lakefmt
from lakefmt.cli import main
from lakefmt.errors import CorruptMetadataError, MissingFileError, NoSuchSnapshotError, ValidationError
from lakefmt.maintenance.metadata_schema import validate_metadata
from lakefmt.metadata import TableMetadata
from lakefmt.snapshot_history import HISTORY_FILE, clear_cache
from tests.conftest import rows
from tests.maintenance.test_property import TableModel

REPO = Path(__file__).resolve().parent.parent
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("tag", pa.string())])
SMALL = {"write.metadata.inline-snapshots-max": "4"}  # runs of 2 snapshots move out from the 5th on


def batch(i: int) -> pa.Table:
    return pa.table({"id": pa.array([10 * i, 10 * i + 1], pa.int64()), "tag": [f"b{i}", f"b{i}"]})


def history_files(t: lakefmt.Table) -> list[str]:
    return sorted(f"metadata/{p.name}" for p in (Path(t.location) / "metadata").glob("history-*.json"))


def metadata_json(t: lakefmt.Table) -> dict:
    return json.loads(Path(t.metadata_location).read_text())


def fresh(catalog: lakefmt.Catalog, name: str = "ns.t") -> lakefmt.Table:
    """A new handle through a new catalog object, with the history cache emptied: everything is read again."""
    clear_cache()
    return lakefmt.Catalog(catalog.warehouse).load_table(name)


@pytest.fixture
def table(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    """12 appends at inline-snapshots-max 4: history files of 2 snapshots each, 4 snapshots inline."""
    t = local_catalog.create_table("ns.t", schema=SCHEMA, properties=SMALL)
    for i in range(12):
        t.append(batch(i))
    return t


def test_history_files_are_written_when_the_inline_snapshots_overflow(local_catalog: lakefmt.Catalog) -> None:
    # spec: META-13, META-14, META-15, META-17, LAYOUT-13, META-1, META-2, META-11
    t = local_catalog.create_table("ns.t", schema=SCHEMA, properties=SMALL)
    assert t.metadata.format_version == 2  # new tables are version 2 (META-11)
    for i in range(4):
        t.append(batch(i))
    assert "snapshot-history" not in metadata_json(t) and history_files(t) == []  # omitted when empty
    t.append(batch(4))  # 5 inline > 4: the oldest 2 move to one history file
    doc = metadata_json(t)
    assert validate_metadata(doc) == []
    [ref] = doc["snapshot-history"]
    version = int(Path(t.metadata_location).name[1:7])
    assert HISTORY_FILE.match(ref["path"]) and ref["path"].startswith(f"metadata/history-{version:06d}-")
    assert history_files(t) == [ref["path"]]
    assert [s["sequence-number"] for s in doc["snapshots"]] == [3, 4, 5]
    content = json.loads((Path(t.location) / ref["path"]).read_text())
    assert sorted(content) == ["format-version", "snapshot-log", "snapshots", "table-uuid"]
    assert content["format-version"] == 2 and content["table-uuid"] == doc["table-uuid"]
    assert [s["sequence-number"] for s in content["snapshots"]] == [1, 2]
    assert [e["snapshot-id"] for e in content["snapshot-log"]] == [s["snapshot-id"] for s in content["snapshots"]]
    assert ref == {"path": ref["path"], "snapshot-count": 2, "first-sequence-number": 1, "last-sequence-number": 2,
                   "min-timestamp-ms": content["snapshots"][0]["timestamp-ms"],
                   "max-timestamp-ms": content["snapshots"][1]["timestamp-ms"], "log-entry-count": 2,
                   "first-log-timestamp-ms": content["snapshot-log"][0]["timestamp-ms"],
                   "last-log-timestamp-ms": content["snapshot-log"][1]["timestamp-ms"]}
    for i in range(5, 12):
        t.append(batch(i))
        # The text carried from version to version (TableMetadata.evolve) is the file's own JSON.
        assert Path(t.metadata_location).read_text() == json.dumps(t.metadata.to_json(), separators=(",", ":"))
    doc = metadata_json(t)
    assert [r["snapshot-count"] for r in doc["snapshot-history"]] == [2, 2, 2, 2]
    assert len(doc["snapshots"]) == 4 and len(history_files(t)) == 4
    firsts = [r["first-sequence-number"] for r in doc["snapshot-history"]]
    assert firsts == [1, 3, 5, 7]  # in commit order, disjoint (META-14)
    # Every snapshot and log entry is still the table's, in commit order (META-13).
    again = fresh(local_catalog)
    assert [s.sequence_number for s in again.snapshots()] == list(range(1, 13))
    assert [e.value for e in again.metadata.snapshot_log] == [s.snapshot_id for s in again.snapshots()]
    assert len(again.metadata.snapshots) == 12 and len(again.metadata.inline_snapshots) == 4


def test_a_commit_reads_no_history_file(table: lakefmt.Table, local_catalog: lakefmt.Catalog) -> None:
    # spec: META-18, META-16
    folder = Path(table.location) / "metadata"
    hidden = folder.parent / "hidden"
    hidden.mkdir()
    names = history_files(table)
    t = fresh(local_catalog)
    for name in names:  # a commit that read one of them would fail now
        os.rename(Path(table.location) / name, hidden / Path(name).name)
    try:
        for i in range(12, 15):
            t.append(batch(i))
        assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in range(15)]))
        assert len(t.metadata.snapshots) == 15  # counted from the references
        with pytest.raises(MissingFileError, match=r"history file .*history-.*\.json is missing"):
            t.snapshot(t.metadata.snapshot_log[0].value)
    finally:
        for name in names:
            os.rename(hidden / Path(name).name, Path(table.location) / name)
    clear_cache()
    assert [s.sequence_number for s in t.snapshots()] == list(range(1, 16))


def test_time_travel_and_ancestry_across_history_files(table: lakefmt.Table, local_catalog: lakefmt.Catalog,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # spec: META-18, META-13, READ-2
    t = fresh(local_catalog)
    snaps = t.snapshots()
    for k, snap in enumerate(snaps):  # each snapshot reads its own rows, wherever it is kept
        assert rows(t.scan(snapshot_id=snap.snapshot_id).to_arrow()) == rows(
            pa.concat_tables([batch(i) for i in range(k + 1)]))
    log = list(t.metadata.snapshot_log)
    for entry in log:  # the last entry at or before the time: commits may share a millisecond
        expected = [e for e in log if e.timestamp_ms <= entry.timestamp_ms][-1].value
        assert t.metadata.snapshot_as_of(entry.timestamp_ms).snapshot_id == expected
    with pytest.raises(NoSuchSnapshotError, match="oldest recorded snapshot became current"):
        t.metadata.snapshot_as_of(t.metadata.snapshot_log[0].timestamp_ms - 1)
    assert [s.snapshot_id for s in t.metadata.ancestors(t.metadata.current_snapshot_id)] == \
        [s.snapshot_id for s in reversed(snaps)]
    assert [h.snapshot_id for h in t.history()] == [s.snapshot_id for s in snaps]
    assert main(["--warehouse", local_catalog.warehouse, "snapshots", "ns.t", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["sequence"] for r in listed] == list(range(1, 13))


def test_rollback_into_a_history_file_brings_the_snapshot_back_inline(table: lakefmt.Table,
                                                                      local_catalog: lakefmt.Catalog) -> None:
    # spec: META-16, MAINT-13, META-17
    t = fresh(local_catalog)
    target = t.snapshots()[3]  # sequence 4, in the second history file
    before = set(history_files(t))
    t.rollback_to(target.snapshot_id)
    doc = metadata_json(t)
    assert doc["current-snapshot-id"] == target.snapshot_id
    assert [s["sequence-number"] for s in doc["snapshots"]] == list(range(4, 13))  # it and all later ones
    assert [r["snapshot-count"] for r in doc["snapshot-history"]] == [2, 1]  # the rest of its file: a new file
    assert len(set(history_files(t)) - before) == 1
    assert rows(fresh(local_catalog).scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in range(4)]))
    t.append(batch(20))  # the current snapshot moved on: the old ones move out again
    doc = metadata_json(t)
    assert len(doc["snapshots"]) <= 4 and doc["current-snapshot-id"] == doc["snapshots"][-1]["snapshot-id"]
    again = fresh(local_catalog)
    assert [s.sequence_number for s in again.snapshots()] == list(range(1, 14))
    assert rows(again.scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in (0, 1, 2, 3, 20)]))
    assert again.check().ok, again.check().format()


def test_expiry_rewrites_history_and_superseded_history_files_are_deleted(local_catalog: lakefmt.Catalog) -> None:
    # spec: META-16, META-19, MAINT-4, MAINT-6
    t = local_catalog.create_table("ns.t", schema=SCHEMA,
                                   properties={**SMALL, "write.metadata.previous-versions-max": "1"})
    for i in range(12):
        t.append(batch(i))
    t = fresh(local_catalog)
    snaps = t.snapshots()
    first_file = metadata_json(t)["snapshot-history"][0]["path"]
    result = t.maintenance.expire_snapshots(snapshot_ids=[snaps[0].snapshot_id])
    assert result.expired_snapshot_ids == (snaps[0].snapshot_id,)
    doc = metadata_json(t)
    assert first_file not in [r["path"] for r in doc["snapshot-history"]]
    assert doc["snapshot-history"][0]["snapshot-count"] == 1  # a new file with what remains
    # The metadata-log's file still names the old history file: it stays (META-19).
    assert (Path(t.location) / first_file).exists()
    assert [s.sequence_number for s in fresh(local_catalog).snapshots()] == list(range(2, 13))
    t.append(batch(12))  # the metadata file naming the old history file leaves the log
    result = t.maintenance.expire_snapshots(snapshot_ids=[snaps[1].snapshot_id])
    assert first_file in result.metadata_files  # superseded: deleted like an old metadata file (MAINT-6)
    assert not (Path(t.location) / first_file).exists()
    again = fresh(local_catalog)
    assert [s.sequence_number for s in again.snapshots()] == list(range(3, 14))
    assert rows(again.scan(snapshot_id=again.snapshots()[0].snapshot_id).to_arrow()) == rows(
        pa.concat_tables([batch(i) for i in range(3)]))
    report = again.check()
    assert report.ok, report.format()


def test_orphan_removal_keeps_history_files_of_logged_metadata_files(table: lakefmt.Table,
                                                                     local_catalog: lakefmt.Catalog) -> None:
    # spec: META-19, MAINT-8
    t = fresh(local_catalog)
    t.maintenance.expire_snapshots(snapshot_ids=[t.snapshots()[0].snapshot_id])  # rewrites the first file
    named_now = {r["path"] for r in metadata_json(t)["snapshot-history"]}
    assert set(history_files(t)) - named_now  # the old first file: named only by logged metadata files
    result = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert not [p for p in result.orphan_files if p.startswith("metadata/history-")]
    assert all((Path(t.location) / p).exists() for p in history_files(t))
    assert fresh(local_catalog).check().ok


def test_a_writer_killed_after_writing_a_history_file_leaves_an_orphan(local_catalog: lakefmt.Catalog,
                                                                       tmp_path: Path) -> None:
    # spec: META-16, META-19, LAYOUT-13, COMMIT-20
    t = local_catalog.create_table("ns.t", schema=SCHEMA, properties=SMALL)
    for i in range(4):
        t.append(batch(i))
    paused = tmp_path / "paused"
    code = f"""
import pyarrow as pa
import lakefmt
t = lakefmt.Catalog({local_catalog.warehouse!r}).load_table("ns.t")
t.append(pa.table({{"id": pa.array([40, 41], pa.int64()), "tag": ["b4", "b4"]}}))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAKEFMT_PAUSE_AT": "after-metadata-file", "LAKEFMT_PAUSE_FILE": str(paused)}
    writer = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_file(paused, writer)  # its history file and metadata file are written and synced
        [crashed] = history_files(t)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=60)
    finally:
        writer.kill()
    assert (Path(t.location) / crashed).exists()
    after_crash = fresh(local_catalog)
    assert "snapshot-history" not in metadata_json(after_crash)  # nothing names it
    assert rows(after_crash.scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in range(4)]))
    after_crash.append(batch(5))  # another writer commits the next version: the file is superseded (META-19)
    assert crashed not in [r["path"] for r in metadata_json(after_crash)["snapshot-history"]]
    result = after_crash.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert crashed in result.orphan_files and crashed in result.superseded_metadata_files
    assert not (Path(t.location) / crashed).exists()
    again = fresh(local_catalog)
    assert rows(again.scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in (0, 1, 2, 3, 5)]))
    assert again.check().ok, again.check().format()


def test_a_version_1_table_never_gets_a_history_file(local_catalog: lakefmt.Catalog) -> None:
    # spec: META-13, META-11, FMT-4, FMT-5
    t = local_catalog.create_table("ns.v1", schema=SCHEMA, properties=SMALL, format_version=1)
    for i in range(9):
        t.append(batch(i))
    doc = json.loads(Path(t.metadata_location).read_text())
    assert doc["format-version"] == 1 and "snapshot-history" not in doc and len(doc["snapshots"]) == 9
    assert history_files(t) == []
    # A version 1 file naming history files is refused, by the schema and by the reader.
    bad = {**doc, "snapshot-history": [{"path": "metadata/history-000002-x.json", "snapshot-count": 1,
                                        "first-sequence-number": 1, "last-sequence-number": 1,
                                        "min-timestamp-ms": 1, "max-timestamp-ms": 1, "log-entry-count": 0,
                                        "first-log-timestamp-ms": None, "last-log-timestamp-ms": None}]}
    assert validate_metadata(bad) != [] and validate_metadata({**bad, "format-version": 2}) == []
    with pytest.raises(CorruptMetadataError, match="format version 1 metadata file cannot have snapshot-history"):
        TableMetadata.loads(json.dumps(bad))
    t.upgrade_format_version(2)  # from now on its older snapshots move out
    t.append(batch(9))
    assert len(metadata_json(t)["snapshots"]) == 4 and len(history_files(t)) == 3
    assert [s.sequence_number for s in fresh(local_catalog, "ns.v1").snapshots()] == list(range(1, 11))


def test_corrupt_or_missing_history_files_are_named_in_the_error(table: lakefmt.Table,
                                                                 local_catalog: lakefmt.Catalog) -> None:
    # spec: META-15, META-18, MAINT-14
    first, second = history_files(table)[:2]  # sequence numbers 1-2 and 3-4
    snaps = table.snapshots()
    oldest = snaps[0].snapshot_id
    (Path(table.location) / first).write_text('{"format-version": 2, "table-uuid"')  # cut short
    t = fresh(local_catalog)
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in range(12)]))  # current: inline
    with pytest.raises(CorruptMetadataError, match=rf"history file .*{first.split('/')[1]} is not valid JSON"):
        t.scan(snapshot_id=oldest).to_arrow()
    report = t.check()
    assert [(v.requirement, v.path) for v in report.violations] == [("META-15", first)], report.format()
    # A history file that holds other snapshots than its reference says (here: one snapshot dropped).
    doc = json.loads((Path(table.location) / second).read_text())
    doc["snapshots"] = doc["snapshots"][:1]
    (Path(table.location) / second).write_text(json.dumps(doc))
    with pytest.raises(CorruptMetadataError, match="does not match its reference in the metadata: snapshot-count"):
        fresh(local_catalog).snapshot(snaps[2].snapshot_id)  # found newest first: this file before the first
    (Path(table.location) / second).unlink()
    with pytest.raises(MissingFileError, match=rf"history file .*{second.split('/')[1]} is missing"):
        fresh(local_catalog).snapshot(snaps[3].snapshot_id)
    assert ("LAYOUT-5", second) in [(v.requirement, v.path) for v in fresh(local_catalog).check().violations]


def test_inline_snapshots_max_is_validated(local_catalog: lakefmt.Catalog) -> None:
    # spec: META-12, META-17
    with pytest.raises(ValidationError, match="write.metadata.inline-snapshots-max must be >= 1"):
        local_catalog.create_table("ns.bad", schema=SCHEMA, properties={"write.metadata.inline-snapshots-max": "0"})
    assert not local_catalog.table_exists("ns.bad")


def _wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait for ``path``, the event the paused writer signals; fail early if the process died."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited ({proc.returncode}): {proc.stderr.read().decode()}")
        if time.monotonic() > deadline:
            raise AssertionError("the writer never reached its pause point")
        time.sleep(0.01)


class HistoryTableModel(TableModel):
    """The random operations of tests/maintenance/test_property.py (appends, overwrites, deletes, compaction,
    rollbacks, expiry) on a table that keeps 2 snapshots inline: every step moves snapshots into, out of
    and between history files, and after every step the rows, every retained snapshot and ``check`` agree."""

    def __init__(self) -> None:
        super().__init__()
        self.table.set_property("write.metadata.inline-snapshots-max", 2)


HistoryTableModel.TestCase.settings = settings(max_examples=12, stateful_step_count=10, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
# spec: META-13, META-16, META-17, MAINT-4, MAINT-13
test_random_operations_across_history_files = pytest.mark.slow(HistoryTableModel.TestCase)
