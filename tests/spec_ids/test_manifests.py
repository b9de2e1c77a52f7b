"""Manifests and manifest lists (spec/manifests.md MAN-*, ML-*; PART-11), read with pyarrow from the files."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

import lakefmt
from tests.conftest import rows
from tests.spec_ids.table_files import (
    entries,
    key_values,
    live_entries,
    manifest_list,
    metadata_json,
    parquet,
    read_rows,
    snapshot_json,
    swap_in_metadata,
)

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string()), pa.field("n", pa.int32())])


def batch(start: int, count: int, part: str | None = "a", n: int | None = 1) -> pa.Table:
    return pa.table({"id": list(range(start, start + count)), "part": [part] * count,
                     "n": pa.array([n] * count, pa.int32())}, schema=SCHEMA)


def all_snapshot_ids(t: lakefmt.Table) -> list[int]:
    return [s["snapshot-id"] for s in metadata_json(t)["snapshots"]]


def test_partition_struct_follows_the_spec(local_catalog):
    """MAN-4: one nullable child per spec field, in spec order, named by the field, typed by the transform's
    result; PART-11 and MAN-4: an unpartitioned table's manifests have no partition column."""
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("d", pa.date32()), ("id", pa.int64()),
                        ("n", pa.int32()), ("s", pa.string())])
    t = local_catalog.create_table("man.t", schema=schema,
                                   partition_by=["day(ts)", "month(d)", "bucket(4, id)", "n", "truncate(2, s)"])
    t.append(pa.table({"ts": [dt.datetime(2026, 1, 15, 3, tzinfo=dt.timezone.utc)] * 2,
                       "d": [dt.date(2026, 2, 1)] * 2, "id": [7, 7], "n": pa.array([None, 5], pa.int32()),
                       "s": ["abc", "abd"]}, schema=schema))
    (m,) = manifest_list(t)
    arrow = parquet(t, m["manifest_path"]).schema_arrow
    part = arrow.field("partition").type
    assert [c.name for c in part] == ["ts_day", "d_month", "id_bucket_4", "n", "s_trunc_2"]
    assert [c.type for c in part][:4] == [pa.date32(), pa.int32(), pa.int32(), pa.int32()]
    assert part.field("s_trunc_2").type == pa.string()  # TYPE-1: string, not large_string
    assert all(c.nullable for c in part)
    tuples = sorted((e["partition"]["n"] is None, e["partition"]["ts_day"], e["partition"]["d_month"],
                     e["partition"]["s_trunc_2"]) for e in live_entries(t))
    assert tuples == [(False, dt.date(2026, 1, 15), 673, "ab"), (True, dt.date(2026, 1, 15), 673, "ab")]

    plain = local_catalog.create_table("man.plain", schema=SCHEMA)
    plain.append(batch(0, 3))
    spec = metadata_json(plain)["partition-specs"]
    assert spec == [{"spec-id": 0, "fields": []}]  # PART-11
    (m,) = manifest_list(plain)
    assert "partition" not in parquet(plain, m["manifest_path"]).schema_arrow.names
    assert m["partitions"] == []
    assert rows(plain.scan().to_arrow()) == rows(batch(0, 3))


def test_manifest_key_value_metadata(local_catalog):
    """MAN-9: format version, spec id, spec JSON and the schema current when the manifest was written."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, partition_by=["part"])
    t.append(batch(0, 3))
    with t.update_schema() as u:
        u.add_column("extra", pa.string())
    t.append(batch(3, 3))
    meta = metadata_json(t)
    schemas = {s["schema-id"]: s for s in meta["schemas"]}
    written_with = []
    for m in manifest_list(t):
        kv = key_values(t, m["manifest_path"])
        assert {"lakefmt.format-version", "lakefmt.spec-id", "lakefmt.partition-spec", "lakefmt.schema"} <= set(kv)
        assert kv["lakefmt.format-version"] == str(meta["format-version"]) == "2"  # the table's (META-11)
        assert kv["lakefmt.spec-id"] == str(m["partition_spec_id"]) == "0"
        assert json.loads(kv["lakefmt.partition-spec"]) == meta["partition-specs"][0]
        written_with.append(json.loads(kv["lakefmt.schema"]))
    assert sorted(written_with, key=lambda s: s["schema-id"]) == [schemas[0], schemas[1]]


def test_one_spec_per_manifest(local_catalog):
    """MAN-1: one entry per data file, all of one spec; a commit touching files of two specs writes one
    manifest per spec. The second spec is added as another implementation would (PART-12)."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, partition_by=["part"])
    t.append(batch(0, 4, "a"))
    meta = metadata_json(t)
    n_id = next(f.id for f in t.schema().fields if f.name == "n")
    meta["partition-specs"].append({"spec-id": 1, "fields": [
        {"source-id": n_id, "field-id": 1001, "name": "n", "transform": "identity"}]})
    meta["default-spec-id"], meta["last-partition-id"] = 1, 1001
    swap_in_metadata(local_catalog, t, meta)
    t = local_catalog.load_table("man.t")
    t.append(batch(4, 4, "b", n=2))
    t.set_property("write.delete.mode", "copy-on-write")
    t.delete("id = 1 OR id = 5")  # removes a file of each spec and writes the survivors with spec 1
    for m in manifest_list(t):
        kv = key_values(t, m["manifest_path"])
        spec = json.loads(kv["lakefmt.partition-spec"])
        assert int(kv["lakefmt.spec-id"]) == m["partition_spec_id"] == spec["spec-id"]
        manifest_rows = read_rows(t, m["manifest_path"])
        assert len({r["file_path"] for r in manifest_rows}) == len(manifest_rows)
        names = list(manifest_rows[0]["partition"]) if manifest_rows[0].get("partition") is not None else []
        assert names == [f["name"] for f in spec["fields"]]
    assert sorted({m["partition_spec_id"] for m in manifest_list(t)}) == [0, 1]
    expected = pa.concat_tables([batch(0, 4, "a"), batch(4, 4, "b", n=2)]).to_pylist()
    assert rows(t.scan().to_arrow()) == rows(pa.Table.from_pylist(
        [r for r in expected if r["id"] not in (1, 5)], schema=SCHEMA))


def test_statuses_stay_tied_to_their_snapshot(local_catalog):
    """MAN-10: copied entries become EXISTING with explicit ids; DELETED entries are never copied; a file is
    live in at most one entry of a snapshot. MAN-5: a DELETED entry keeps the file's sequence number."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, partition_by=["part"],
                                   properties={"write.delete.mode": "copy-on-write"})
    first = t.append(pa.concat_tables([batch(0, 5, "a"), batch(5, 5, "b")]))
    t.delete("part = 'a'")  # removes the "a" file: its manifest is rewritten
    deleting = t.current_snapshot()
    by_status = {e["status"]: e for e in entries(t)}
    assert set(by_status) == {0, 2}
    existing, deleted = by_status[0], by_status[2]
    assert (existing["snapshot_id"], existing["sequence_number"]) == (first.snapshot_id, first.sequence_number)
    assert (deleted["snapshot_id"] in (None, deleting.snapshot_id)
            and deleted["sequence_number"] == first.sequence_number)
    t.delete("part = 'b'")  # rewrites that manifest again: the old DELETED entry is not carried over
    final = entries(t)
    assert [(e["status"], e["file_path"]) for e in final] == [(2, existing["file_path"])]
    t.append(batch(10, 2, "c"))
    for snapshot_id in all_snapshot_ids(t):
        live = [e["file_path"] for e in live_entries(t, snapshot_id)]
        assert len(live) == len(set(live))
        for e in entries(t, snapshot_id):
            if e["status"] == 0:
                assert e["snapshot_id"] is not None and e["sequence_number"] is not None


def test_manifest_list_rows_and_columns(local_catalog):
    """ML-1: one row per manifest, no path twice; ML-2: the columns, their types and required values; the
    counts match the manifest's entries (ML-3)."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, partition_by=["part"],
                                   properties={"write.delete.mode": "copy-on-write"})
    for i in range(3):
        t.append(batch(i * 5, 5, "ab"[i % 2]))
    t.delete("id = 6")
    expected_types = {"manifest_path": (pa.string(), pa.large_string()), "manifest_length": (pa.int64(),),
                      "partition_spec_id": (pa.int32(),), "added_snapshot_id": (pa.int64(),),
                      "sequence_number": (pa.int64(),), "added_files_count": (pa.int32(),),
                      "existing_files_count": (pa.int32(),), "deleted_files_count": (pa.int32(),),
                      "added_rows_count": (pa.int64(),), "existing_rows_count": (pa.int64(),),
                      "deleted_rows_count": (pa.int64(),)}
    for snapshot_id in all_snapshot_ids(t):
        rel = snapshot_json(t, snapshot_id)["manifest-list"]
        arrow = parquet(t, rel).schema_arrow
        for name, types in expected_types.items():
            assert arrow.field(name).type in types, name
        partitions = arrow.field("partitions").type
        assert pa.types.is_list(partitions) or pa.types.is_large_list(partitions)
        assert [f.name for f in partitions.value_type] == ["contains_null", "lower_bound", "upper_bound"]
        listed = read_rows(t, rel)
        assert len({m["manifest_path"] for m in listed}) == len(listed) >= 1
        for m in listed:
            assert all(m[name] is not None for name in [*expected_types, "partitions"])
            assert t.io.size(f"{t.location}/{m['manifest_path']}") == m["manifest_length"]
            statuses = [e["status"] for e in read_rows(t, m["manifest_path"])]
            assert (m["added_files_count"], m["existing_files_count"], m["deleted_files_count"]) == (
                statuses.count(1), statuses.count(0), statuses.count(2))


def test_partition_summaries_cover_live_entries(local_catalog):
    """ML-4: contains_null iff a live value is null; bounds are the least and greatest values as TYPE-6
    bytes of the result type; a manifest without live entries has false and null bounds."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, partition_by=["n", "part"],
                                   properties={"write.delete.mode": "copy-on-write"})
    t.append(pa.concat_tables([batch(0, 2, "m", n=-3), batch(2, 2, "c", n=40), batch(4, 2, None, n=7)]))
    (m,) = manifest_list(t)
    n_summary, part_summary = m["partitions"]
    assert n_summary == {"contains_null": False, "lower_bound": (-3).to_bytes(4, "little", signed=True),
                         "upper_bound": (40).to_bytes(4, "little", signed=True)}
    assert part_summary == {"contains_null": True, "lower_bound": b"c", "upper_bound": b"m"}
    t.delete("n = 40")  # the rewritten manifest's summaries cover only its live entries
    (m,) = manifest_list(t)
    assert m["partitions"][0]["upper_bound"] == (7).to_bytes(4, "little", signed=True)
    assert m["partitions"][1] == {"contains_null": True, "lower_bound": b"m", "upper_bound": b"m"}
    t.delete("id >= 0")  # nothing live is left in the manifest
    (m,) = manifest_list(t)
    assert m["existing_files_count"] + m["added_files_count"] == 0
    assert m["partitions"] == [{"contains_null": False, "lower_bound": None, "upper_bound": None}] * 2


def test_kept_manifests_are_copied_as_they_are(local_catalog):
    """ML-6: a manifest kept from the parent keeps its row (added snapshot, sequence number, counts), and a
    parent manifest with no live entry is not kept."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, partition_by=["part"],
                                   properties={"write.delete.mode": "copy-on-write"})
    t.append(batch(0, 3, "a"))
    t.append(batch(3, 3, "b"))
    t.append(batch(100, 1, "c"))
    rows_by_path: dict[str, list[dict]] = {}
    for snapshot_id in all_snapshot_ids(t):
        for m in manifest_list(t, snapshot_id):
            rows_by_path.setdefault(m["manifest_path"], []).append(m)
    assert any(len(copies) > 1 for copies in rows_by_path.values())
    for copies in rows_by_path.values():
        assert all(c == copies[0] for c in copies)
    t.delete("part = 'a'")  # leaves a manifest of DELETED entries only
    empty = [m["manifest_path"] for m in manifest_list(t) if m["added_files_count"] + m["existing_files_count"] == 0]
    assert len(empty) == 1
    t.append(batch(200, 1, "d"))
    assert empty[0] not in {m["manifest_path"] for m in manifest_list(t)}
    assert t.scan().count() == 5


def test_manifest_list_key_value_metadata(local_catalog):
    """ML-7: lakefmt.format-version is the table's version when the list was written; optional keys match."""
    t = local_catalog.create_table("man.t", schema=SCHEMA, format_version=1)  # upgraded by its first vector
    s1 = t.append(batch(0, 5))
    t.delete("id = 0")
    s3 = t.append(batch(5, 5))
    for snapshot, version in ((s1, "1"), (s3, "2")):
        snap = snapshot_json(t, snapshot.snapshot_id)
        kv = key_values(t, snap["manifest-list"])
        assert kv["lakefmt.format-version"] == version
        optional = {"lakefmt.snapshot-id": snap["snapshot-id"], "lakefmt.sequence-number": snap["sequence-number"],
                    "lakefmt.parent-snapshot-id": snap["parent-snapshot-id"]}
        for key, value in optional.items():
            if key in kv:
                assert kv[key] == str(value)
