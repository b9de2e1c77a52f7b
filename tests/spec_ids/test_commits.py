"""Writing data files and the commit protocol (spec/commits.md WRITE-*, COMMIT-*), observed on the files and
the catalog while a real commit runs."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import lakefmt
from lakefmt.catalog_file import CatalogSession
from tests.conftest import rows
from tests.spec_ids.table_files import (
    catalog_rows,
    entries,
    files_under,
    live_entries,
    manifest_list,
    metadata_json,
    parquet,
    read_rows,
    snapshot_json,
)

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])
CHANGES_OF_A_DATA_COMMIT = {"snapshots", "current-snapshot-id", "last-sequence-number", "snapshot-log",
                            "metadata-log", "last-updated-ms"}


def batch(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [part] * n}, schema=SCHEMA)


def wait_for(path: Path, thread: threading.Thread, timeout: float = 60) -> None:
    """Wait until the paused commit writes its marker file (the event), failing if the thread died first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert thread.is_alive(), "the commit ended before reaching its pause point"
        assert time.monotonic() < deadline, f"the commit never reached {path.name}"
        time.sleep(0.005)


def test_nothing_is_visible_until_the_swap(local_catalog, tmp_path, monkeypatch):
    """COMMIT-2 … COMMIT-6, stopped at each step: data files, then manifests with inherited ids (COMMIT-3),
    then a freshly named manifest list (COMMIT-4), then metadata file version N+1 (COMMIT-5); readers see
    the old table until the swap, which moves the pointer to exactly that file (COMMIT-6)."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA)
    t.append(batch(0, 5))
    base_location = t.metadata_location
    base_files = set(files_under(t))
    result: dict[str, object] = {}

    def appender() -> None:
        try:
            result["snapshot"] = t.append(batch(5, 5))
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertions below
            result["error"] = exc

    def pause_at(point: str) -> tuple[Path, Path]:
        marker, resume = tmp_path / f"{point}.paused", tmp_path / f"{point}.resume"
        monkeypatch.setenv("LAKEFMT_PAUSE_AT", point)
        monkeypatch.setenv("LAKEFMT_PAUSE_FILE", str(marker))
        monkeypatch.setenv("LAKEFMT_RESUME_FILE", str(resume))
        return marker, resume

    def next_step(point: str, previous_resume: Path) -> tuple[Path, Path]:
        """Move the pause point on, let the commit continue, and wait until it stops there."""
        marker, resume = pause_at(point)
        previous_resume.write_text("go")
        wait_for(marker, thread)
        return marker, resume

    def still_invisible() -> set[str]:
        assert local_catalog.current_metadata_location("commit.t") == base_location
        assert rows(local_catalog.load_table("commit.t").scan().to_arrow()) == rows(batch(0, 5))
        return set(files_under(t)) - base_files

    marker, resume = pause_at("after-data-files")
    thread = threading.Thread(target=appender)
    thread.start()
    try:
        wait_for(marker, thread)
        new = still_invisible()
        assert new and all(p.startswith("data/") for p in new)  # COMMIT-2: data files first

        marker, resume = next_step("after-manifests", resume)
        (manifest,) = [p for p in still_invisible() if p.startswith("metadata/m-")]
        added = read_rows(t, manifest)
        assert [(e["status"], e["snapshot_id"], e["sequence_number"]) for e in added] == [(1, None, None)]

        marker, resume = next_step("after-manifest-list", resume)
        (listing,) = [p for p in still_invisible() if p.startswith("metadata/snap-")]
        listed = [m["manifest_path"] for m in read_rows(t, listing)]
        assert manifest in listed and len(listed) == 2  # the new manifest plus the parent's (ML-6)

        marker, resume = next_step("after-metadata-file", resume)
        (metadata_file,) = [p for p in still_invisible() if p.startswith("metadata/v")]
        assert metadata_file.startswith("metadata/v000003-")  # base version 2, new version 3 (LAYOUT-9)
    finally:
        resume.write_text("go")
        thread.join(timeout=60)
    assert "error" not in result, result.get("error")
    assert local_catalog.current_metadata_location("commit.t") == f"{t.location}/{metadata_file}"
    assert snapshot_json(t)["manifest-list"] == listing
    assert catalog_rows(local_catalog, "SELECT version, old_metadata_location, new_metadata_location FROM commit_log "
                        "ORDER BY version DESC LIMIT 1") == [(3, base_location, f"{t.location}/{metadata_file}")]
    assert rows(local_catalog.load_table("commit.t").scan().to_arrow()) == rows(batch(0, 10))


def test_the_new_snapshot_and_metadata_are_the_base_plus_the_commit(local_catalog):
    """COMMIT-4: parent, schema id, sequence number and a summary against the parent; COMMIT-5: the new
    metadata is the base with only the commit's changes, so a concurrent property and schema change survive."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA)
    first = t.append(batch(0, 4))
    stale = local_catalog.load_table("commit.t")
    base = metadata_json(t)
    t.append(batch(4, 6))
    after = metadata_json(t)
    assert {k for k in after if after[k] != base[k]} == CHANGES_OF_A_DATA_COMMIT
    snap = snapshot_json(t)
    assert snap["parent-snapshot-id"] == first.snapshot_id
    assert snap["sequence-number"] == base["last-sequence-number"] + 1 == after["last-sequence-number"]
    assert snap["schema-id"] == base["current-schema-id"]
    assert (snap["summary"]["added-data-files"], snap["summary"]["total-data-files"],
            snap["summary"]["total-records"]) == ("1", "2", "10")

    t.set_property("write.target-file-size-bytes", 1 << 20)  # concurrent changes the stale handle never saw
    with t.update_schema() as u:
        u.add_column("note", pa.string())
    stale.append(batch(10, 2))
    final = metadata_json(local_catalog.load_table("commit.t"))
    assert final["properties"]["write.target-file-size-bytes"] == str(1 << 20)
    assert final["current-schema-id"] == 1 and final["snapshots"][-1]["schema-id"] == 1
    assert final["snapshots"][-1]["parent-snapshot-id"] == snap["snapshot-id"]
    assert local_catalog.load_table("commit.t").scan().count() == 12


def test_appends_keep_manifests_merge_small_ones_and_reuse_their_files(local_catalog):
    """COMMIT-8: an append writes a new manifest and keeps the parent's rows; past
    commit.manifest.min-count-to-merge small manifests it merges them (entries EXISTING with explicit ids,
    MAN-10); a retried append reuses its data files and its manifest of ADDED entries."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA,
                                   properties={"commit.manifest.min-count-to-merge": "2"})
    counts = []
    for i in range(4):
        t.append(batch(i * 3, 3))
        counts.append(len(manifest_list(t)))
    assert counts == [1, 2, 3, 2]  # the fourth append merged the three older manifests into one
    merged = [m for m in manifest_list(t) if m["existing_files_count"] == 3]
    assert len(merged) == 1
    assert all(e["status"] == 0 and e["snapshot_id"] and e["sequence_number"]
               for e in read_rows(t, merged[0]["manifest_path"]))
    assert rows(t.scan().to_arrow()) == rows(batch(0, 12))

    plain = local_catalog.create_table("commit.plain", schema=SCHEMA)
    plain.append(batch(0, 3))
    stale = local_catalog.load_table("commit.plain")
    plain.append(batch(3, 3))
    stale.append(batch(6, 3))  # loses the race once, rebases on the new base
    plain.refresh()
    data = {p for p in files_under(plain) if p.startswith("data/")}
    assert data == {e["file_path"] for e in live_entries(plain)} and len(data) == 3
    manifests = {p for p in files_under(plain) if p.startswith("metadata/m-")}
    assert manifests == {m["manifest_path"] for m in manifest_list(plain)}
    assert [m["added_snapshot_id"] for m in manifest_list(plain)].count(plain.current_snapshot().snapshot_id) == 1


def test_an_empty_append_commits_nothing(local_catalog):
    """COMMIT-18: an operation that adds and removes no file commits no snapshot (and writes no file)."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA)
    snap = t.append(batch(0, 3))
    before = files_under(t)
    assert t.append(batch(0, 0)).snapshot_id == snap.snapshot_id
    assert t.delete("id > 100") is None
    assert files_under(t) == before
    assert len(metadata_json(local_catalog.load_table("commit.t"))["snapshots"]) == 1


def test_an_unknown_swap_outcome_keeps_every_file(local_catalog, monkeypatch):
    """COMMIT-11: when the swap transaction's outcome is unknown (the catalog connection fails around its
    COMMIT), the writer fails with CommitStateUnknownError and deletes nothing it wrote. The failure is
    injected around the real compare-and-swap."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA)
    t.append(batch(0, 2))
    real = CatalogSession.compare_and_swap

    def committed_then_lost(self, *args, **kwargs):
        assert real(self, *args, **kwargs)
        raise duckdb.IOException("connection lost after COMMIT was sent")

    def lost_before(self, *args, **kwargs):
        raise duckdb.IOException("connection lost while sending COMMIT")

    before = set(files_under(t))
    monkeypatch.setattr(CatalogSession, "compare_and_swap", committed_then_lost)
    with pytest.raises(lakefmt.CommitStateUnknownError):
        t.append(batch(2, 2))
    monkeypatch.setattr(CatalogSession, "compare_and_swap", real)
    fresh = local_catalog.load_table("commit.t")
    assert rows(fresh.scan().to_arrow()) == rows(batch(0, 4))  # it had committed: every file is there
    assert fresh.check().ok

    before = set(files_under(fresh))
    monkeypatch.setattr(CatalogSession, "compare_and_swap", lost_before)
    with pytest.raises(lakefmt.CommitStateUnknownError):
        fresh.append(batch(4, 2))
    monkeypatch.setattr(CatalogSession, "compare_and_swap", real)
    kept = set(files_under(fresh)) - before
    assert {p.split("/")[0] for p in kept} == {"data", "metadata"}
    assert any(p.startswith("data/") for p in kept) and any(p.startswith("metadata/v") for p in kept)
    assert local_catalog.load_table("commit.t").scan().count() == 4  # not committed, nothing deleted


def test_lost_swaps_are_retried_with_backoff_outside_the_lock(local_catalog, monkeypatch):
    """COMMIT-13: at most commit.retry.num-retries retries, waiting about min-wait-ms x 2^(k-1) (randomized)
    between attempts without holding the catalog lock, then CommitError; COMMIT-14: the operation's files are
    deleted. Lost swaps are injected as a catalog pointer moved by a writer outside the lock would cause."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA, properties={
        "commit.retry.num-retries": "2", "commit.retry.min-wait-ms": "500", "commit.retry.max-wait-ms": "700"})
    t.append(batch(0, 2))
    before = set(files_under(t))
    other = lakefmt.Catalog(local_catalog.warehouse)  # another handle with its own lock file descriptor
    calls: list[float] = []
    lost = threading.Event()
    seen_by_other: list[int] = []

    def always_lost(self, *args, **kwargs):
        calls.append(time.monotonic())
        lost.set()
        return False

    def take_the_lock_while_the_writer_waits() -> None:
        lost.wait(timeout=60)
        with other.session():
            seen_by_other.append(len(calls))

    monkeypatch.setattr(CatalogSession, "compare_and_swap", always_lost)
    helper = threading.Thread(target=take_the_lock_while_the_writer_waits)
    helper.start()
    with pytest.raises(lakefmt.CommitError, match="lost the race 3 times"):
        t.append(batch(2, 2))
    helper.join(timeout=60)
    assert len(calls) == 3
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.25 and gaps[1] >= 0.35  # half of 500 ms, then half of min(1000, 700) ms
    assert seen_by_other == [1]  # the lock was free during the first wait
    monkeypatch.undo()
    assert set(files_under(t)) == before
    assert local_catalog.load_table("commit.t").scan().count() == 2


def test_data_files_carry_field_ids_and_zstd(local_catalog):
    """WRITE-1: every column carries its field id; columns are ZSTD-compressed at the configured level or
    stored uncompressed (WRITE-7); WRITE-2: new files use the default spec and carry the writer token."""
    t = local_catalog.create_table("commit.t", schema=SCHEMA, partition_by=["part"],
                                   properties={"write.parquet.compression-level": "7"})
    t.append(pa.table({"id": list(range(5000)), "part": ["a"] * 5000}, schema=SCHEMA))
    (e,) = live_entries(t)
    pf = parquet(t, e["file_path"])
    ids = {f.name: f.id for f in t.schema().fields}
    assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in pf.schema_arrow} == ids
    codecs = {pf.metadata.row_group(0).column(i).compression for i in range(pf.metadata.num_columns)}
    assert "ZSTD" in codecs and codecs <= {"ZSTD", "UNCOMPRESSED"}
    assert os.path.basename(e["file_path"]).startswith(f"part-{t.write_token()}-")
    assert {m["partition_spec_id"] for m in manifest_list(t)} == {metadata_json(t)["default-spec-id"]}
    assert all(x["status"] in (0, 1) for x in entries(t))
