"""Idempotent commits: a writer's batch is committed at most once, even after snapshot expiry
(spec/catalog.md PROGRESS-1 … PROGRESS-4). Real catalog files and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.idempotency import BATCH_ID, WRITER_ID
from tests.conftest import DOWNLINKS_SCHEMA, data_files_on_disk, downlinks, live_paths, rows

REPO = Path(__file__).resolve().parents[1]


def expire_all_but_current(table: lakefmt.Table) -> None:
    result = table.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=1)
    assert result.expired_snapshot_ids, result
    table.refresh()
    assert len(table.snapshots()) == 1


def test_replayed_batch_commits_nothing_after_its_snapshot_was_expired(local_catalog: lakefmt.Catalog) -> None:
    """PROGRESS-1/3: the writer's record outlives its snapshots; a replay commits nothing, writes nothing."""
    t = local_catalog.create_table("ingest.events", schema=DOWNLINKS_SCHEMA)
    batch0, other = downlinks(6_000, seed=1), downlinks(1_000, seed=2, start_us=1_800_000_000_000_000)
    stream_snapshot = t.append(batch0, idempotency=("ingest-7", 0))
    assert stream_snapshot.summary[WRITER_ID] == "ingest-7" and stream_snapshot.summary[BATCH_ID] == "0"
    local_catalog.load_table("ingest.events").append(other)  # another writer
    expire_all_but_current(t)
    assert not t.metadata.has_snapshot(stream_snapshot.snapshot_id)
    files_before = data_files_on_disk(t)

    with pytest.raises(lakefmt.AlreadyCommittedError, match="already committed batch 0") as info:
        t.append(batch0, idempotency=("ingest-7", 0))
    assert (info.value.writer_id, info.value.batch_id, info.value.last_committed) == ("ingest-7", 0, 0)
    assert isinstance(info.value, lakefmt.CommitConflictError)  # nothing was committed
    assert rows(t.refresh().scan().to_arrow()) == rows(pa.concat_tables([batch0, other]))
    assert data_files_on_disk(t) == files_before == live_paths(t)
    assert t.last_committed_batch("ingest-7") == 0

    # The next batch commits; an older one is a replay too; another writer is independent.
    t.append(downlinks(10, seed=3), idempotency=("ingest-7", 1))
    with pytest.raises(lakefmt.AlreadyCommittedError, match="already committed batch 1"):
        t.append(downlinks(10, seed=4), idempotency=lakefmt.WriterBatch("ingest-7", 0))
    t.append(downlinks(10, seed=5), idempotency=("ingest-8", 0))
    assert t.refresh().scan().count() == 7_020
    assert (t.last_committed_batch("ingest-7"), t.last_committed_batch("ingest-8")) == (1, 0)
    assert t.last_committed_batch("never-wrote") is None
    assert t.check().ok


def test_a_replay_that_passed_the_early_check_is_refused_under_the_catalog_lock(
        local_catalog: lakefmt.Catalog, tmp_path: Path) -> None:
    """PROGRESS-3: two attempts of one batch, in two processes, interleaved at a named point: one commits."""
    t = local_catalog.create_table("ingest.events", schema=DOWNLINKS_SCHEMA)
    batch = downlinks(500, seed=1)
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    code = f"""
import lakefmt
from tests.conftest import downlinks
t = lakefmt.Catalog({local_catalog.warehouse!r}).load_table("ingest.events")
try:
    t.append(downlinks(500, seed=1), idempotency=("ingest-7", 0))
    print("committed")
except lakefmt.AlreadyCommittedError as exc:
    print("refused:", exc)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAKEFMT_PAUSE_AT": "after-data-files",
           "LAKEFMT_PAUSE_FILE": str(paused), "LAKEFMT_RESUME_FILE": str(resume)}
    first = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_file(paused, first)  # it checked the catalog and wrote its files; it has not committed
        t.append(batch, idempotency=("ingest-7", 0))  # the second attempt commits first
        resume.touch()
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert out.startswith("refused:") and "already committed batch 0 to this table (catalog writer_progress)" in out, out
    t.refresh()
    assert len(t.snapshots()) == 1
    assert rows(t.scan().to_arrow()) == rows(batch)
    assert data_files_on_disk(t) == live_paths(t)  # the refused attempt deleted what it wrote
    assert [r.summary.get(BATCH_ID) for r in local_catalog.commit_log("ingest.events")] == ["0", None]


def test_catalog_without_writer_progress_is_filled_from_its_commit_log(local_catalog: lakefmt.Catalog) -> None:
    """PROGRESS-1: a catalog file from before writer_progress keeps its writers' batches (migration)."""
    t = local_catalog.create_table("ingest.events", schema=DOWNLINKS_SCHEMA)
    t.append(downlinks(100, seed=1), idempotency=("ingest-7", 3))
    t.append(downlinks(100, seed=2), idempotency=("ingest-7", 4))
    t.append(downlinks(100, seed=3), idempotency=("ingest-9", 0))
    # An older catalog file, once opened, has an empty writer_progress and no completion row.
    with local_catalog.session() as s:
        s.con.execute("DELETE FROM writer_progress")
        s.con.execute("DELETE FROM lakefmt_catalog WHERE key = 'writer-progress'")
    cat = lakefmt.Catalog(local_catalog.warehouse)
    t = cat.load_table("ingest.events")
    t.append(downlinks(100, seed=4))
    expire_all_but_current(t)
    assert t.last_committed_batch("ingest-7") == 4  # read from the commit log, nothing written
    with cat.session() as s:
        assert s.con.execute("SELECT count(*) FROM writer_progress").fetchone()[0] == 0

    with pytest.raises(lakefmt.AlreadyCommittedError, match="already committed batch 4"):
        t.append(downlinks(100, seed=2), idempotency=("ingest-7", 4))
    t.append(downlinks(100, seed=5), idempotency=("ingest-9", 1))
    with cat.session() as s:  # the first idempotent commit filled it, once, in its catalog session
        progress = s.con.execute("SELECT writer_id, batch_id FROM writer_progress ORDER BY 1").fetchall()
        marker = s.con.execute("SELECT value FROM lakefmt_catalog WHERE key = 'writer-progress'").fetchone()
    assert progress == [("ingest-7", 4), ("ingest-9", 1)] and marker == ("complete",)
    with pytest.raises(lakefmt.AlreadyCommittedError, match="already committed batch 4"):
        t.append(downlinks(100, seed=2), idempotency=("ingest-7", 4))
    assert t.refresh().scan().count() == 500 and t.last_committed_batch("ingest-9") == 1


@pytest.mark.parametrize("idempotency", [
    ("", 0), ("a\nb", 0), ("x" * 257, 0), (None, 0), ("w", -1), ("w", 2**63), ("w", True), ("w", "3"),
    ("w", 1.0), ("w",), ["w", 0], "w",
])
def test_invalid_writer_batch_is_refused_before_anything_is_written(
        local_catalog: lakefmt.Catalog, idempotency: object) -> None:
    """PROGRESS-2: a bad writer id or batch id raises ValidationError and writes nothing."""
    t = local_catalog.create_table("ingest.events", schema=DOWNLINKS_SCHEMA)
    with pytest.raises(lakefmt.ValidationError, match="writer id|batch id|idempotency must be"):
        t.append(downlinks(10, seed=1), idempotency=idempotency)  # type: ignore[arg-type]
    assert not (Path(t.location) / "data").exists()
    assert t.refresh().current_snapshot() is None


def _wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait for ``path`` (an event the process signals), failing early if the process died."""
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"process exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {path}")
        time.sleep(0.01)
