"""Maintenance of format version 2 tables: deletion-vector files in reachability, expiry, orphan removal,
stats, check, manifest rewrite and ``inspect`` (spec/deletes.md, spec/maintenance.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import deletion_vectors as dv
from lakefmt import manifest_cache
from lakefmt.cli import main
from lakefmt.manifest_io import read_manifest, read_manifest_list, write_manifest, write_manifest_list
from tests.conftest import rows
from tests.maintenance.helpers import (
    SCHEMA,
    all_files,
    batch,
    end_write_leases_of,
    kill,
    make_table,
    spawn_paused_writer,
)

DELETES = "data/deletes/"


def vector_files(t: lakefmt.Table) -> set[str]:
    """Deletion-vector files in storage."""
    return {p for p in all_files(t) if p.startswith(DELETES)}


def live_vectors(t: lakefmt.Table) -> dict[str, object]:
    """Each live data file's deletion vector (None without one)."""
    t.refresh()
    return {f.path: f.deletion_vector for f in t.plan_files()}


def size(t: lakefmt.Table, rel: str) -> int:
    return t.io.size(f"{t.location}/{rel}")


def only(paths: set[str]) -> str:
    (path,) = paths
    return path


def requirements(t: lakefmt.Table, level: str = "full") -> list[str]:
    manifest_cache.clear()  # the damage below is done behind the cache's back
    return [v.requirement for v in t.maintenance.check(level=level).violations]


@pytest.fixture
def three_files(local_catalog):
    """Three data files of 10 rows (parts a, b, c), ids 0..29; ``id % 3`` picks the part."""
    t = make_table(local_catalog)
    t.append(batch(0, 30))
    return t


# -- reachability and snapshot expiry -----------------------------------------------------
def test_reachability_counts_each_vector_file_once_across_v1_and_v2_manifests(local_catalog):
    """ROWDEL-13: the reachable files include the vector file of every live entry, read from version 1
    and version 2 manifests alike; each vector file is counted once."""
    t = local_catalog.create_table("maint.t", SCHEMA, partition_by=["part"], format_version=1)
    t.append(batch(0, 30))                    # a version 1 manifest, kept as it is below
    t.append(batch(100, 6, parts="d"))
    assert t.metadata.format_version == 1
    t.delete("id in (100, 101, 102)")         # upgrades the table; rewrites only the second manifest
    assert t.metadata.format_version == 2
    reach = t.maintenance.reachable_files()
    d1 = only(vector_files(t))
    (ref,) = [v for v in live_vectors(t).values() if v is not None]
    assert dict(reach.deletion_vectors) == {d1: ref.offset + ref.length} and d1 in reach
    manifests = {m.path for m in read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")}
    versions = {pq.read_schema(f"{t.location}/{m}").metadata[b"lakefmt.format-version"] for m in manifests}
    assert versions == {b"1", b"2"}           # both kinds were read

    t.delete("id in (0, 1, 2, 103)")          # a second vector file: four blobs in it
    reach = t.maintenance.reachable_files()
    assert set(reach.deletion_vectors) == vector_files(t) and len(reach.deletion_vectors) == 2


def test_expiry_deletes_a_vector_file_only_expired_snapshots_reached(three_files):
    """ROWDEL-13, MAINT-5: expiry deletes a vector file that only the expired snapshots reached."""
    t = three_files
    full = rows(t.scan().to_arrow())
    first = t.delete("id < 3")                # one vector file D1 with a blob for each of the three files
    d1 = only(vector_files(t))
    t.delete("id < 6")                        # new vectors (unions) for all three files: D2
    d2 = only(vector_files(t) - {d1})
    assert {v.path for v in live_vectors(t).values()} == {d2}
    before = rows(t.scan().to_arrow())
    assert before == rows(batch(6, 24))

    result = t.maintenance.expire_snapshots(snapshot_ids=[first.snapshot_id])
    assert result.deletion_vector_files == (d1,) and result.data_files == ()
    assert result.bytes_freed >= 3 * 28 and vector_files(t) == {d2}
    assert rows(t.scan().to_arrow()) == before  # nothing live went
    assert rows(t.scan(snapshot_id=t.snapshots()[0].snapshot_id).to_arrow()) == full  # time travel still works
    assert t.check().ok, t.check().format()


def test_expiry_keeps_a_vector_file_a_retained_snapshot_still_points_into(three_files):
    """ROWDEL-13, MAINT-5: a vector file the committed metadata still references is never deleted."""
    t = three_files
    first = t.delete("id < 3")                # D1: blobs for a, b and c
    d1 = only(vector_files(t))
    t.delete("id = 3")                        # D2: a new vector for part a only; b and c still point into D1
    d2 = only(vector_files(t) - {d1})
    assert {v.path for v in live_vectors(t).values()} == {d1, d2}
    before = rows(t.scan().to_arrow())
    assert before == rows(batch(4, 26))

    dry = t.maintenance.expire_snapshots(snapshot_ids=[first.snapshot_id], dry_run=True)
    assert dry.deletion_vector_files == ()
    result = t.maintenance.expire_snapshots(older_than=timedelta(0))  # every snapshot but the current one
    assert len(result.expired_snapshot_ids) == 2 and result.deletion_vector_files == ()
    assert vector_files(t) == {d1, d2} and rows(t.scan().to_arrow()) == before
    assert t.check().ok, t.check().format()


def test_expiry_deletes_the_vector_of_a_file_an_overwrite_removed(three_files):
    """ROWDEL-13: a vector file named only by DELETED entries is not referenced; expiry deletes it."""
    t = three_files
    t.delete("id < 3")
    d1 = only(vector_files(t))
    before = rows(t.scan().to_arrow())
    t.overwrite(t.scan().to_arrow())          # rewrites every row: the files with vectors are removed
    assert all(v is None for v in live_vectors(t).values()) and rows(t.scan().to_arrow()) == before
    assert t.stats().historical_delete_vector_files == 1
    result = t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert result.deletion_vector_files == (d1,) and vector_files(t) == set()
    assert rows(t.scan().to_arrow()) == before and t.check().ok


# -- orphan removal -----------------------------------------------------------------------
def test_orphan_removal_keeps_live_vectors_and_removes_an_uncommitted_one(local_catalog, tmp_path):
    """ROWDEL-13, MAINT-8: an uncommitted vector file is an orphan, protected by its writer's lease and
    the grace period like any file; live vector files are kept."""
    t = make_table(local_catalog, **{"write.lease-seconds": "3600"})
    t.append(batch(0, 30))
    t.delete("id < 3")
    live = vector_files(t)
    before = rows(t.scan().to_arrow())
    # A delete in another process writes its vector file and manifests, then dies before its commit.
    proc = spawn_paused_writer(local_catalog, "maint.t", "after-manifest-list", tmp_path, op="delete",
                               filter="id in (4, 5)")
    kill(proc)
    stray = only(vector_files(t) - live)
    assert stray.startswith(DELETES + "dv-")

    leased = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert stray not in leased.orphan_files and leased.in_flight_files >= 1  # its writer's lease protects it
    young = t.maintenance.remove_orphan_files(older_than=timedelta(days=1))
    assert stray not in young.orphan_files
    assert end_write_leases_of(local_catalog, t, {stray}) == 1
    done = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert stray in done.orphan_files and not live & set(done.orphan_files)
    assert vector_files(t) == live and rows(t.scan().to_arrow()) == before
    assert t.check().ok, t.check().format()


# -- stats ----------------------------------------------------------------------------------
def test_stats_count_vector_files_and_live_rows_exactly(three_files):
    """DV-6: storage statistics count live rows (record_count less the vectors' cardinality), and vector
    files live and historical."""
    t = three_files
    t.delete("id < 3")                        # D1: a, b, c lose one row each
    d1 = only(vector_files(t))
    t.delete("id = 3")                        # D2: a loses id 3 too
    d2 = only(vector_files(t) - {d1})
    s = t.stats()
    assert (s.live_records, s.written_records, s.deleted_records, s.live_delete_vectors) == (26, 30, 4, 3)
    assert (s.live_delete_vector_files, s.live_delete_vector_bytes) == (2, size(t, d1) + size(t, d2))
    assert (s.historical_delete_vector_files, s.historical_delete_vector_bytes) == (0, 0)
    by_part = {p.partition: (p.records, p.deleted_records, p.delete_vectors) for p in s.partitions}
    assert by_part == {"part=a": (8, 2, 1), "part=b": (9, 1, 1), "part=c": (9, 1, 1)}
    assert s.orphan_files == 0 and s.live_files == 3

    t.delete("id in (4, 5)")                  # D3: new vectors for b and c; D1 only older snapshots reach
    d3 = only(vector_files(t) - {d1, d2})
    s = t.stats()
    assert (s.live_records, s.written_records, s.deleted_records, s.live_delete_vectors) == (24, 30, 6, 3)
    assert (s.live_delete_vector_files, s.live_delete_vector_bytes) == (2, size(t, d2) + size(t, d3))
    assert (s.historical_delete_vector_files, s.historical_delete_vector_bytes) == (1, size(t, d1))
    assert s.live_records == int(t.current_snapshot().summary["total-records"]) == t.scan().to_arrow().num_rows
    assert s.to_dict()["historical_delete_vector_bytes"] == size(t, d1)


# -- check ----------------------------------------------------------------------------------
def test_check_passes_on_a_healthy_version_2_table(three_files):
    """ROWDEL-14: every check level passes on a healthy version 2 table."""
    t = three_files
    t.delete("id < 3")
    t.append(batch(100, 6))
    t.delete("id in (3, 100)")
    assert t.metadata.format_version == 2
    for level in ("metadata", "files", "full"):
        report = t.maintenance.check(level=level)
        assert report.ok, report.format()


@pytest.fixture
def damaged(three_files):
    """A version 2 table with two vector files; returns it and its newest vector file."""
    t = three_files
    t.delete("id < 3")
    old = vector_files(t)
    t.delete("id = 3")
    return t, only(vector_files(t) - old)


def test_check_reports_a_truncated_vector_file(damaged):
    """ROWDEL-14: a vector file shorter than offset + length is reported."""
    t, path = damaged
    data = t.io.read_bytes(f"{t.location}/{path}")
    t.io.delete(f"{t.location}/{path}")
    t.io.write_bytes(f"{t.location}/{path}", data[:-5])
    report = t.maintenance.check(level="files")
    assert [(v.requirement, v.path) for v in report.violations] == [("DV-4", path)]
    assert f"has {len(data) - 5} bytes" in report.violations[0].message
    assert requirements(t) == ["DV-4"]


def test_check_reports_a_vector_file_with_a_flipped_byte(damaged):
    """ROWDEL-14: a blob failing DV-4 (CRC-32) is reported by the full check."""
    t, path = damaged
    data = bytearray(t.io.read_bytes(f"{t.location}/{path}"))
    data[25] ^= 0x01                          # inside the payload: only the CRC-32 can tell
    t.io.delete(f"{t.location}/{path}")
    t.io.write_bytes(f"{t.location}/{path}", bytes(data))
    assert requirements(t, "files") == []     # the length is right: only decoding finds it
    report = t.maintenance.check()
    assert [(v.requirement, v.path) for v in report.violations] == [("DV-4", path)]
    assert "CRC-32 mismatch" in report.violations[0].message


def test_check_reports_a_missing_vector_file(damaged):
    """ROWDEL-14: a vector file a live entry names must exist."""
    t, path = damaged
    t.io.delete(f"{t.location}/{path}")
    report = t.maintenance.check(level="files")
    assert [(v.requirement, v.path) for v in report.violations] == [("LAYOUT-5", path)]
    assert "deletion-vector file" in report.violations[0].message and "is missing" in report.violations[0].message


def rewrite_current_entries(t: lakefmt.Table, change) -> None:
    """Rewrite the manifests the current snapshot added, in place, with ``change(entries)`` (damage for tests)."""
    snap, meta = t.current_snapshot(), t.metadata
    list_location = f"{t.location}/{snap.manifest_list}"
    manifests = read_manifest_list(t.io, list_location)
    for i, m in enumerate(manifests):
        if m.added_snapshot_id != snap.snapshot_id:
            continue
        location, spec = f"{t.location}/{m.path}", meta.spec_by_id(m.spec_id)
        entries = change(read_manifest(t.io, location, m, spec, meta.schema, inherit=False))
        t.io.delete(location)
        written = write_manifest(t.io, location, m.path, entries, spec, meta.schema, snapshot_id=m.added_snapshot_id,
                                 sequence_number=m.sequence_number, format_version=2)
        manifests[i] = replace(written, sequence_number=m.sequence_number)
    t.io.delete(list_location)
    write_manifest_list(t.io, list_location, manifests, format_version=2)


def test_check_reports_a_vector_that_deletes_every_row_and_out_of_range_entries(damaged):
    """ROWDEL-14: a vector deleting every row (DV-7) and a vector outside the deletes folder are reported."""
    t, _ = damaged

    def every_row(entries):
        out = []
        for e in entries:
            f = e.data_file
            if f.deletion_vector is not None and f.partition == ("b",):
                f = replace(f, deletion_vector=replace(f.deletion_vector, cardinality=f.record_count))
            elif f.deletion_vector is not None and f.partition == ("c",):
                f = replace(f, deletion_vector=replace(f.deletion_vector, path="data/part=c/x.bin"))
            out.append(replace(e, data_file=f))
        return out

    rewrite_current_entries(t, every_row)
    found = requirements(t, "metadata")
    # the totals of the summary no longer match the entries either (SNAP-5 for live rows, DV-8)
    assert sorted(found) == ["DV-7", "DV-8", "LAYOUT-12", "SNAP-5"], found
    assert "DV-4" in requirements(t)          # the blob holds fewer positions than the entry now claims


def test_check_reports_two_live_vectors_for_one_file_and_a_shared_blob(damaged):
    """ROWDEL-14: two live vectors for one file (DV-9) and two entries sharing one blob (DV-10) are reported."""
    t, _ = damaged

    def twice(entries):
        extra = [e for e in entries if e.data_file.deletion_vector is not None][:1]
        return entries + extra

    rewrite_current_entries(t, twice)
    assert {"READ-9", "DV-9"} <= set(requirements(t, "metadata"))

    def shared(entries):
        refs = [e.data_file.deletion_vector for e in entries if e.data_file.deletion_vector is not None]
        return [replace(e, data_file=replace(e.data_file, deletion_vector=refs[0]))
                if e.data_file.deletion_vector is not None else e for e in entries]

    rewrite_current_entries(t, shared)
    assert "DV-10" in requirements(t, "metadata")


def test_check_reports_a_vector_that_shrinks(damaged):
    """ROWDEL-14: a vector that lacks positions its parent's vector deletes is reported (DV-9)."""
    t, newest = damaged                        # part a: {id 0} in the parent, {0, 3} now (positions 0 and 1)
    writer = dv.DeletionVectorWriter(t.io, t.location)

    def other_positions(entries):
        out = []
        for e in entries:
            f = e.data_file
            if f.deletion_vector is not None and f.deletion_vector.path == newest:
                f = replace(f, deletion_vector=writer.add(f, dv.mask_of([1, 2], f.record_count)))
            out.append(replace(e, data_file=f))
        writer.close()
        return out

    rewrite_current_entries(t, other_positions)  # as many positions, but position 0 is live again
    assert requirements(t, "files") == []
    report = t.maintenance.check()
    assert [v.requirement for v in report.violations] == ["DV-9"], report.format()
    assert "lacks positions its parent's vector deletes" in report.violations[0].message

    def dropped(entries):
        return [replace(e, data_file=replace(e.data_file, deletion_vector=None))
                if e.data_file.partition == ("a",) else e for e in entries]

    rewrite_current_entries(t, dropped)
    assert "DV-9" in requirements(t, "metadata")


# -- manifest rewrite ---------------------------------------------------------------------
def test_manifest_rewrite_keeps_deleted_rows_deleted(local_catalog):
    """DV-11, COMPACT-29: manifest compaction copies every entry's deletion_vector unchanged."""
    t = make_table(local_catalog, **{"commit.manifest.min-count-to-merge": "100"})
    for i in range(4):
        t.append(batch(i * 30, 30))
    t.delete("id in (0, 31, 62, 93, 94)")
    t.delete("id in (1, 2)")
    before, vectors = rows(t.scan().to_arrow()), live_vectors(t)
    assert sum(v is not None for v in vectors.values()) >= 4 and len(before) == 113
    result = t.compaction.rewrite_manifests()
    assert result.manifests_before > result.manifests_after
    assert t.current_snapshot().operation == "replace"
    manifest_cache.clear()
    assert rows(t.scan().to_arrow()) == before and live_vectors(t) == vectors
    for m in read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}"):
        assert pq.read_schema(f"{t.location}/{m.path}").metadata[b"lakefmt.format-version"] == b"2"
    summary = t.current_snapshot().summary
    assert (summary["total-records"], summary["total-position-deletes"], summary["added-position-deletes"]) == (
        "113", "7", "0")
    assert t.check().ok, t.check().format()


# -- CLI ------------------------------------------------------------------------------------
def test_inspect_and_stats_show_deletion_vectors(tmp_path, capsys):
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = make_table(catalog)
    t.append(batch(0, 30))
    t.delete("id in (0, 3)")
    (path,) = [f.path for f in t.plan_files() if f.deletion_vector is not None]
    ref = live_vectors(t)[path]
    capsys.readouterr()
    assert main(["--warehouse", str(tmp_path / "wh"), "inspect", "maint.t", "--no-stats"]) == 0
    out = capsys.readouterr().out
    assert "(format version 2)" in out
    assert f"deletion vector  2 deleted, 8 live rows  {ref.path} @ {ref.offset} ({ref.length} bytes)" in out
    assert "total     3 live data files, 28 rows (30 written, 2 deleted by 1 deletion vectors)" in out
    assert main(["--warehouse", str(tmp_path / "wh"), "stats", "maint.t"]) == 0
    out = capsys.readouterr().out
    assert "deletion vectors, live" in out and "rows: 28 live of 30 written; 2 deleted by 1 deletion vectors" in out
    assert main(["--warehouse", str(tmp_path / "wh"), "stats", "maint.t", "--format", "json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["live_records"], stats["deleted_records"], stats["live_delete_vector_files"]) == (28, 2, 1)
