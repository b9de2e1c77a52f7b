"""Row deletes and deletion vectors, rule by rule (spec/deletes.md DV-1, DV-6, DV-11, ROWDEL-1, ROWDEL-2).

Each test builds a small table on a real local catalog, runs the public operations and
checks their outcome in the rows read, the manifest entries and the files in storage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.errors import CorruptMetadataError, ValidationError
from lakefmt.manifest import EntryStatus, ManifestEntry
from lakefmt.manifest_io import read_manifest, read_manifest_list
from lakefmt.metadata import read_metadata
from lakefmt.updates import SetProperties

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])
PARTS = ("a", "b", "c")


def batch(ids: range | list[int]) -> pa.Table:
    """Rows ``ids``; a row's part is ``PARTS[id % 3]``."""
    ids = list(ids)
    return pa.table({"id": ids, "part": [PARTS[i % 3] for i in ids]}, schema=SCHEMA)


def make_table(catalog: lakefmt.Catalog, **properties: str) -> lakefmt.Table:
    """ids 0..29 in three files, one per part; manifests are never merged."""
    t = catalog.create_table("ops.t", SCHEMA, partition_by=["part"],
                             properties={"commit.manifest.min-count-to-merge": "100", **properties})
    t.append(batch(range(30)))
    return t


def files_on_disk(t: lakefmt.Table) -> set[str]:
    root = Path(t.location)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def live_entries(t: lakefmt.Table) -> dict[str, ManifestEntry]:
    """Data file path -> its live entry as written (snapshot id and sequence number not inherited)."""
    meta, snap = t.metadata, t.current_snapshot()
    out = {}
    for m in read_manifest_list(t.io, f"{t.location}/{snap.manifest_list}"):
        for e in read_manifest(t.io, f"{t.location}/{m.path}", m, meta.spec_by_id(m.spec_id), meta.schema,
                               inherit=False):
            if e.is_live:
                out[e.data_file.path] = e
    return out


def by_part(t: lakefmt.Table) -> dict[str, ManifestEntry]:
    """part -> the live entry of its one data file."""
    entries = list(live_entries(t).values())
    out = {e.data_file.partition[0]: e for e in entries}
    assert len(out) == len(entries), "one data file per part expected"
    return out


def ids(t: lakefmt.Table, **kw: object) -> list[int]:
    return sorted(t.scan(**kw).to_arrow().column("id").to_pylist())


def test_version_1_tables_are_read_and_upgraded_by_their_first_vector(local_catalog):
    """DV-1: a version 1 table (no column 14 in its manifests) is read by this version 2 implementation;
    the first delete that writes a vector makes it a version 2 table in that commit; a format
    version the reader does not implement is refused with CorruptMetadataError naming it."""
    t = local_catalog.create_table("ops.t", SCHEMA, partition_by=["part"], format_version=1,
                                   properties={"commit.manifest.min-count-to-merge": "100"})
    t.append(batch(range(30)))
    assert t.metadata.format_version == 1
    [manifest] = read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")
    assert "deletion_vector" not in pq.read_schema(f"{t.location}/{manifest.path}").names
    assert ids(t) == list(range(30))

    metadata_files = {p for p in files_on_disk(t) if p.endswith(".metadata.json")}
    t.delete("id = 4")
    new_metadata = {p for p in files_on_disk(t) if p.endswith(".metadata.json")} - metadata_files
    assert len(new_metadata) == 1  # one commit wrote the vector and upgraded the table
    assert json.loads(Path(t.location, new_metadata.pop()).read_text())["format-version"] == 2
    assert t.metadata.format_version == 2
    assert ids(t) == [i for i in range(30) if i != 4]
    assert by_part(t)["b"].data_file.deletion_vector is not None
    for m in read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}"):
        assert "deletion_vector" in pq.read_schema(f"{t.location}/{m.path}").names

    document = json.loads(Path(t.metadata_location).read_text())
    document["format-version"] = 3
    future = Path(t.location, "metadata", "v999999-future.metadata.json")
    future.write_text(json.dumps(document))
    with pytest.raises(CorruptMetadataError, match="unsupported format-version 3"):
        read_metadata(t.io, str(future))


def test_counts_of_rows_are_live_rows_and_manifest_counts_stay_physical(local_catalog):
    """DV-6: reads, summaries, stats and compaction planning count live rows; manifest-list row
    counts and column value counts stay the rows written."""
    t = make_table(local_catalog)
    t.delete("id IN (1, 4, 7)")  # three rows of part b's file
    live = 27
    assert t.scan().count() == len(ids(t)) == live
    summary = t.current_snapshot().summary
    assert summary["total-records"] == str(live) and summary["deleted-records"] == "3"
    stats = t.stats()
    assert (stats.live_records, stats.written_records, stats.deleted_records) == (live, 30, 3)
    b = by_part(t)["b"].data_file
    assert (b.record_count, b.live_record_count) == (10, 7)
    assert set(b.value_counts.values()) == {10}  # column statistics describe the rows written
    manifests = read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")
    assert sum(m.added_rows_count + m.existing_rows_count for m in manifests) == 30
    plan = t.compaction.plan("binpack", min_age_seconds=0, delete_ratio_threshold=0.3)
    assert [g.deleted_rows for g in plan.groups] == [3]  # planned for its deletes, counted in live rows


def test_a_new_vector_rewrites_only_the_manifest_holding_the_file(local_catalog):
    """DV-11: the file keeps its entry, now EXISTING with the snapshot id and sequence number it was
    added with written explicitly and the new vector; the manifest's other live entries are copied
    as EXISTING; other manifests are kept, and every copy keeps its vector unchanged."""
    t = make_table(local_catalog)
    first = t.current_snapshot()
    t.append(batch(range(30, 60)))
    before = {m.path for m in read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")}
    assert len(before) == 2

    t.delete("id = 4")  # in part b's file of the first append
    manifests = read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")
    assert len({m.path for m in manifests} & before) == 1  # the second append's manifest is untouched
    [rewritten] = [m for m in manifests if m.path not in before]
    location = f"{t.location}/{rewritten.path}"
    assert pq.read_schema(location).metadata[b"lakefmt.format-version"] == b"2"
    spec = t.metadata.spec_by_id(rewritten.spec_id)
    entries = read_manifest(t.io, location, rewritten, spec, t.metadata.schema, inherit=False)
    copied = {e.data_file.partition[0]: e for e in entries if e.is_live}
    assert set(copied) == set(PARTS)
    for part, e in copied.items():
        assert e.status == EntryStatus.EXISTING
        assert (e.snapshot_id, e.sequence_number) == (first.snapshot_id, first.sequence_number)
        assert (e.data_file.deletion_vector is not None) == (part == "b")
    b_path, vector = copied["b"].data_file.path, copied["b"].data_file.deletion_vector
    assert vector.cardinality == 1

    t.delete("id = 31")  # part b's file of the second append: only the second append's manifest changes
    manifest_list = f"{t.location}/{t.current_snapshot().manifest_list}"
    manifests = {m.path for m in read_manifest_list(t.io, manifest_list)}
    assert rewritten.path in manifests
    vectors = {path: e.data_file.deletion_vector for path, e in live_entries(t).items()}
    assert vectors[b_path] == vector and sum(v is not None for v in vectors.values()) == 2
    assert ids(t) == [i for i in range(60) if i not in (4, 31)]


def test_delete_mode_property_is_checked_where_set_and_where_read(local_catalog):
    """ROWDEL-1: merge-on-read (the default) writes vectors, copy-on-write rewrites files; any other
    value is refused with ValidationError naming the property when it is set, and when delete,
    overwrite with a filter, upsert or merge reads it, before anything is written."""
    t = make_table(local_catalog)
    t.delete("id = 4")
    assert by_part(t)["b"].data_file.deletion_vector is not None
    assert any(p.startswith("data/deletes/") for p in files_on_disk(t))
    cow = local_catalog.create_table("ops.cow", SCHEMA, partition_by=["part"],
                                     properties={"write.delete.mode": "copy-on-write"})
    cow.append(batch(range(30)))
    old_b = by_part(cow)["b"].data_file.path
    cow.delete("id = 4")
    b = by_part(cow)["b"].data_file
    assert b.path != old_b and b.deletion_vector is None and b.record_count == 9
    assert not any(p.startswith("data/deletes/") for p in files_on_disk(cow))

    with pytest.raises(ValidationError, match="write.delete.mode"):
        local_catalog.create_table("ops.bad", SCHEMA, properties={"write.delete.mode": "merge-on-write"})
    assert not local_catalog.table_exists("ops.bad")
    with pytest.raises(ValidationError, match="write.delete.mode"):
        t.set_property("write.delete.mode", "Copy-On-Write")
    assert t.refresh().properties.get("write.delete.mode") is None

    # Another writer committed a bad value: every operation that reads it refuses, writing nothing.
    t.commit_updates([SetProperties((("write.delete.mode", "lazy"),))])
    snapshot, files, expected = t.current_snapshot().snapshot_id, files_on_disk(t), ids(t)
    operations = {
        "delete": lambda: t.delete("id = 5"),
        "overwrite": lambda: t.overwrite(batch([5]), "id = 5"),
        "upsert": lambda: t.upsert(batch([5, 100]), on=["id"]),
        "merge": lambda: t.merge(batch([5]), on=["id"]).when_matched_delete().execute(),
    }
    for name, operation in operations.items():
        with pytest.raises(ValidationError, match="write.delete.mode.*'lazy'"):
            operation()
        assert t.refresh().current_snapshot().snapshot_id == snapshot, name
        assert files_on_disk(t) == files and ids(t) == expected, name


def test_merge_on_read_delete_and_overwrite(local_catalog):
    """ROWDEL-2: files proven to match whole are removed, files with matching live rows get a grown
    vector, others are kept; no data file is written; a vector of every row removes the file; a
    delete that changes nothing commits nothing; overwrite adds its rows in the same snapshot and
    refuses rows that do not match its filter; delete needs a filter."""
    t = make_table(local_catalog)
    before = by_part(t)

    def data_files() -> set[str]:
        return {p for p in files_on_disk(t) if p.startswith("data/") and p.endswith(".parquet")}

    written = data_files()
    snap = t.delete("part = 'a' OR id IN (1, 4)")
    assert snap.operation == "delete"
    now = by_part(t)
    assert set(now) == {"b", "c"}  # part a's file: every row proven to match, removed whole
    assert now["b"].data_file.path == before["b"].data_file.path
    assert now["b"].data_file.deletion_vector.cardinality == 2
    assert now["c"].data_file.deletion_vector is None
    assert now["c"].data_file.path == before["c"].data_file.path
    assert data_files() == written  # no data file written
    assert ids(t) == [i for i in range(30) if i % 3 == 2 or (i % 3 == 1 and i not in (1, 4))]

    assert t.delete("id IN (1, 4, 1000)") is None  # nothing live matches: no snapshot
    assert t.refresh().current_snapshot().snapshot_id == snap.snapshot_id

    t.delete("id IN (7, 13)")
    assert by_part(t)["b"].data_file.deletion_vector.cardinality == 4  # the old positions are kept (DV-9)
    t.delete("id IN (10, 16, 19, 22, 25, 28)")  # the rest of part b: the file is removed, not given a vector
    assert set(by_part(t)) == {"c"}
    assert data_files() == written

    with pytest.raises(ValidationError, match="needs a filter"):
        t.delete(None)
    snapshot, files = t.current_snapshot().snapshot_id, files_on_disk(t)
    with pytest.raises(ValidationError):
        t.overwrite(batch([2, 3]), "id = 2")  # id 3 does not match the filter
    assert t.refresh().current_snapshot().snapshot_id == snapshot and files_on_disk(t) == files

    c_file = by_part(t)["c"].data_file.path
    snap = t.overwrite(pa.table({"id": [200], "part": ["c"]}, schema=SCHEMA), "id IN (2, 200)")
    assert snap.operation == "overwrite" and t.current_snapshot().parent_snapshot_id == snapshot
    assert (snap.summary["added-records"], snap.summary["deleted-records"]) == ("1", "1")
    entries = live_entries(t)
    assert entries[c_file].data_file.deletion_vector.cardinality == 1
    assert len(entries) == 2 and len(data_files() - written) == 1  # the new rows' file
    assert ids(t) == sorted([i for i in range(30) if i % 3 == 2 and i != 2] + [200])
