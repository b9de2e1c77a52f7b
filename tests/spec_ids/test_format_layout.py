"""Format versions and the table layout (spec/README.md FMT-*, spec/layout.md LAYOUT-*), checked on the files."""

from __future__ import annotations

import hashlib
import re

import pyarrow as pa
import pytest

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks, rows
from tests.spec_ids.table_files import (
    catalog_rows,
    entries,
    files_under,
    key_values,
    live_entries,
    manifest_list,
    metadata_json,
    snapshot_json,
    swap_in_metadata,
)

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])
HEX16 = "[0-9a-f]{16}"
UNIQUE = rf"(?:{HEX16}-{HEX16}|[0-9a-f]{{8}}-[0-9a-f]{{4}}-4[0-9a-f]{{3}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}|[0-9a-f]{{32}})"
LAYOUT = {  # LAYOUT-1: every file of a table lives under its location, in one of these places
    "metadata": re.compile(rf"metadata/v(\d{{6,}})-{UNIQUE}\.metadata\.json"),
    "manifest list": re.compile(rf"metadata/snap-(\d+)-{UNIQUE}\.manifest-list\.parquet"),
    "manifest": re.compile(rf"metadata/m-{UNIQUE}\.manifest\.parquet"),
    "data": re.compile(rf"data/(?:(?!deletes/)[^/]+=[^/]*/)*(part|compact)-{UNIQUE}(?:-\d{{5,}})+\.parquet"),
    "deletion vector": re.compile(rf"data/deletes/dv-{UNIQUE}\.bin"),
}


def batch(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [part] * n}, schema=SCHEMA)


def kind_of(rel: str) -> str:
    kinds = [k for k, pattern in LAYOUT.items() if pattern.fullmatch(rel)]
    assert len(kinds) == 1, f"{rel} is not named as spec/layout.md says"
    return kinds[0]


def busy_table(catalog: lakefmt.Catalog, name: str = "lay.t") -> lakefmt.Table:
    """A table with every kind of file: appends, a merge-on-read delete, a compaction."""
    t = catalog.create_table(name, schema=SCHEMA, partition_by=["part"])
    for i in range(3):
        t.append(batch(i * 10, 10, "ab"[i % 2]))
    t.delete("id = 3")  # a deletion vector (LAYOUT-12)
    t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)  # files of kind "compact" (LAYOUT-6)
    return t


def test_version_1_tables_and_every_file_states_its_version(local_catalog):
    """FMT-1: metadata states format-version; manifests and manifest lists state it in key-value metadata.

    FMT-5: a version 2 implementation reads the table's version 1 snapshots after the upgrade too.
    FMT-4: new tables are version 2 unless version 1 is asked for.
    """
    assert local_catalog.create_table("fmt.default", schema=SCHEMA).metadata.format_version == 2
    t = local_catalog.create_table("fmt.t", schema=SCHEMA, format_version=1)
    s1 = t.append(batch(0, 10))
    assert metadata_json(t)["format-version"] == 1
    (m,) = manifest_list(t)
    assert key_values(t, snapshot_json(t)["manifest-list"])["lakefmt.format-version"] == "1"
    assert key_values(t, m["manifest_path"])["lakefmt.format-version"] == "1"
    assert "deletion_vector" not in {e for e in entries(t)[0]}  # no version 2 column in a version 1 manifest

    t.delete("id < 3")  # the first deletion vector upgrades the table (FMT-4)
    assert metadata_json(t)["format-version"] == 2
    assert key_values(t, snapshot_json(t)["manifest-list"])["lakefmt.format-version"] == "2"
    versions = {key_values(t, m["manifest_path"])["lakefmt.format-version"] for m in manifest_list(t)}
    assert "2" in versions and versions <= {"1", "2"}
    # FMT-5: the snapshot written at version 1 stays readable, and so does the whole table.
    assert rows(t.scan(snapshot_id=s1.snapshot_id).to_arrow()) == rows(batch(0, 10))
    assert rows(local_catalog.load_table("fmt.t").scan().to_arrow()) == rows(batch(3, 7))


def test_a_table_of_an_unknown_format_version_is_refused(local_catalog):
    """FMT-2: a reader refuses a format version it does not implement, naming it; a writer does not commit."""
    t = local_catalog.create_table("fmt.t", schema=SCHEMA)
    t.append(batch(0, 5))
    stale = local_catalog.load_table("fmt.t")
    newer = metadata_json(t)
    newer["format-version"] = 3
    location = swap_in_metadata(local_catalog, t, newer)
    with pytest.raises(lakefmt.CorruptMetadataError, match="format-version 3"):
        local_catalog.load_table("fmt.t")
    with pytest.raises(lakefmt.CorruptMetadataError, match="format-version 3"):
        stale.append(batch(5, 5))  # its commit reloads the base: version 3, so it must not commit
    assert local_catalog.current_metadata_location("fmt.t") == location


def test_new_optional_keys_do_not_need_a_new_format_version(local_catalog):
    """FMT-3: an unknown property and an extra summary key leave the format version and every read alone."""
    t = local_catalog.create_table("fmt.t", schema=SCHEMA, properties={"vendor.some-new-setting": "on"})
    snap = t.append(batch(0, 10), summary={"lakefmt.ingest-host": "gs-7"})
    again = local_catalog.load_table("fmt.t")
    assert metadata_json(again)["format-version"] == 2  # as created (META-11)
    assert again.properties["vendor.some-new-setting"] == "on"
    assert snapshot_json(again, snap.snapshot_id)["summary"]["lakefmt.ingest-host"] == "gs-7"
    assert rows(again.scan().to_arrow()) == rows(batch(0, 10))


def test_every_file_lives_under_the_table_location_with_its_layout_name(catalog):
    """LAYOUT-1 (one location, no trailing /, the tree of layout.md), LAYOUT-6 … LAYOUT-9 (names)."""
    t = busy_table(catalog)
    meta = metadata_json(t)
    assert meta["location"] == t.location and not t.location.endswith("/")
    assert t.location.startswith(("/", "s3://"))
    kinds = {}
    for rel in files_under(t):
        kinds.setdefault(kind_of(rel), set()).add(rel)
    assert set(kinds) == set(LAYOUT)
    assert {LAYOUT["data"].fullmatch(p).group(1) for p in kinds["data"]} == {"part", "compact"}
    # Everything the table references is among those files.
    for m in manifest_list(t):
        assert m["manifest_path"] in kinds["manifest"]
    for s in meta["snapshots"]:
        assert s["manifest-list"] in kinds["manifest list"]


def test_data_file_names(local_catalog):
    """LAYOUT-6: data/<partition path>/{kind}-{unique}-{n}….parquet, kind part or compact, the writer token."""
    t = local_catalog.create_table("lay.t", schema=DOWNLINKS_SCHEMA, partition_by=["day(ts)", "mission_id"])
    t.append(downlinks(300))
    token = t.write_token()
    for e in live_entries(t):
        path = e["file_path"]
        match = LAYOUT["data"].fullmatch(path)
        assert match and match.group(1) == "part", path
        folder = path.rsplit("/", 1)[0]
        day, mission = e["partition"]["ts_day"], e["partition"]["mission_id"]
        assert folder == f"data/ts_day={day.isoformat()}/mission_id={mission}"  # PART-7
        assert path.rsplit("/", 1)[1].startswith(f"part-{token}-")  # WRITE-2: the lease's token
    unpartitioned = local_catalog.create_table("lay.u", schema=SCHEMA)
    unpartitioned.append(batch(0, 3))
    (e,) = live_entries(unpartitioned)
    assert re.fullmatch(rf"data/part-{HEX16}-{HEX16}(-\d{{5,}})+\.parquet", e["file_path"])
    unpartitioned.append(batch(3, 3))
    unpartitioned.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    assert [LAYOUT["data"].fullmatch(e["file_path"]).group(1) for e in live_entries(unpartitioned)] == ["compact"]


def test_manifest_list_and_manifest_and_metadata_names(local_catalog):
    """LAYOUT-7: snap-{snapshot-id}-{unique}, fresh per commit; LAYOUT-8: m-{unique};
    LAYOUT-9: v{version:06d}-{unique}, version 1 first and N+1 after N, as the catalog records it."""
    t = local_catalog.create_table("lay.t", schema=SCHEMA)
    stale = local_catalog.load_table("lay.t")
    t.append(batch(0, 3))
    stale.append(batch(3, 3))  # built on version 1, committed as version 3 after a rebase
    t.refresh()
    meta = metadata_json(t)
    lists = [s["manifest-list"] for s in meta["snapshots"]]
    assert len(set(lists)) == 2
    for s in meta["snapshots"]:
        assert int(LAYOUT["manifest list"].fullmatch(s["manifest-list"]).group(1)) == s["snapshot-id"]
    for m in manifest_list(t):
        assert LAYOUT["manifest"].fullmatch(m["manifest_path"])
    log = [e["metadata-file"] for e in meta["metadata-log"]] + [t.metadata_location[len(t.location) + 1:]]
    assert [int(LAYOUT["metadata"].fullmatch(p).group(1)) for p in log] == [1, 2, 3]
    assert catalog_rows(local_catalog, "SELECT version FROM tables WHERE namespace = 'lay' AND name = 't'") == [(3,)]
    assert sorted(v for (v,) in catalog_rows(local_catalog, "SELECT version FROM commit_log")) == [1, 2, 3]
    # No file of the lost attempt is left behind, and no name was used twice.
    assert {kind_of(rel) for rel in files_under(t)} <= set(LAYOUT)
    assert len([p for p in files_under(t) if p.startswith("metadata/v")]) == 3


def test_files_are_never_changed_once_written(local_catalog):
    """LAYOUT-4: appends, deletes, compaction and schema changes only ever add files; old bytes stay."""
    t = local_catalog.create_table("lay.t", schema=SCHEMA, partition_by=["part"])
    t.append(batch(0, 10, "a"))
    t.append(batch(10, 10, "b"))

    def digests() -> dict[str, str]:
        return {rel: hashlib.sha256(t.io.read_bytes(f"{t.location}/{rel}")).hexdigest() for rel in files_under(t)}

    before = digests()
    t.delete("id = 4")
    t.append(batch(20, 10, "a"))
    t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    with t.update_schema() as u:
        u.add_column("note", pa.string())
    t.set_property("write.target-file-size-bytes", 1 << 20)
    after = digests()
    assert {rel: after.get(rel) for rel in before} == before
    assert len(after) > len(before)


def test_new_table_location_is_warehouse_namespace_name_and_uuid_prefix(catalog):
    """LAYOUT-10: <warehouse>/<namespace>/<table>-<first 12 hex digits of the table UUID>."""
    t = catalog.create_table("obs.readings", schema=SCHEMA)
    table_uuid = metadata_json(t)["table-uuid"]
    assert t.location == f"{catalog.warehouse}/obs/readings-{table_uuid.replace('-', '')[:12]}"
    catalog.drop_table("obs.readings")
    again = catalog.create_table("obs.readings", schema=SCHEMA)  # same name: a different folder
    assert again.location != t.location


def test_two_tables_never_share_a_file(local_catalog):
    """LAYOUT-11: each table references only files under its own location; one table, one catalog name."""
    a = local_catalog.create_table("lay.a", schema=SCHEMA)
    b = local_catalog.create_table("lay.b", schema=SCHEMA)
    for t in (a, b):
        t.append(batch(0, 5))
        t.delete("id = 1")

    def referenced(t: lakefmt.Table) -> set[str]:
        out = {t.metadata_location}
        for s in metadata_json(t)["snapshots"]:
            out.add(f"{t.location}/{s['manifest-list']}")
            for e in entries(t, s["snapshot-id"]):
                out |= {f"{t.location}/{e['manifest']}", f"{t.location}/{e['file_path']}"}
                if e.get("deletion_vector"):
                    out.add(f"{t.location}/{e['deletion_vector']['path']}")
        return out

    ra, rb = referenced(a), referenced(b)
    assert ra.isdisjoint(rb)
    assert all(p.startswith(a.location + "/") for p in ra) and all(p.startswith(b.location + "/") for p in rb)
    with pytest.raises(lakefmt.TableExistsError, match="LAYOUT-11"):
        local_catalog.register_table("lay.copy", a.metadata_location)
