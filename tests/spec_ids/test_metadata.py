"""Table metadata, schemas and snapshots (spec/metadata.md META-*, SCHEMA-*, SNAP-*), checked on the JSON files."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks, rows
from tests.spec_ids.table_files import live_entries, metadata_files, metadata_json, parquet, swap_in_metadata

META_FIELDS = {"format-version", "table-uuid", "location", "last-sequence-number", "last-updated-ms",
               "last-column-id", "current-schema-id", "schemas", "default-spec-id", "partition-specs",
               "last-partition-id", "default-sort-order-id", "sort-orders", "properties", "current-snapshot-id",
               "snapshots", "snapshot-log", "metadata-log"}
SNAPSHOT_FIELDS = {"snapshot-id", "parent-snapshot-id", "sequence-number", "timestamp-ms", "operation", "summary",
                   "manifest-list", "schema-id"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("part", pa.string()),
                    pa.field("v", pa.float32())])


def batch(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [part] * n,
                     "v": pa.array([i / 2 for i in range(start, start + n)], pa.float32())}, schema=SCHEMA)


def now_ms() -> int:
    return int(time.time() * 1000)


def history_table(catalog: lakefmt.Catalog) -> lakefmt.Table:
    """A table with every kind of commit: appends, deletes of both modes, a compaction, schema and
    property changes."""
    t = catalog.create_table("meta.t", schema=SCHEMA, partition_by=["part"])
    t.append(batch(0, 10, "a"))
    t.append(batch(10, 10, "b"))
    t.delete("id = 1")
    t.set_property("write.delete.mode", "copy-on-write")
    t.delete("id = 12")
    with t.update_schema() as u:
        u.add_column("note", pa.string())
    t.append(batch(20, 5, "a"))
    t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    return t


# -- META --------------------------------------------------------------------------------------------------

def test_every_metadata_file_has_exactly_the_fields_of_meta_1(local_catalog):
    """META-1: exactly these fields, all present, only current-snapshot-id may be null; format-version 1 or 2."""
    t = history_table(local_catalog)
    documents = metadata_files(t)
    assert len(documents) >= 8
    for doc in documents:
        assert set(doc) == META_FIELDS
        assert doc["format-version"] in (1, 2)
        assert all(doc[k] is not None for k in META_FIELDS - {"current-snapshot-id"})
    assert documents[0]["current-snapshot-id"] is None and documents[-1]["current-snapshot-id"] is not None


def test_an_unknown_format_version_value_is_corrupt_metadata(local_catalog):
    """META-1: a reader refuses a format-version it does not implement with CorruptMetadataError."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA)
    for bad in (0, "1", 1.0, None):
        doc = metadata_json(t)
        doc["format-version"] = bad
        swap_in_metadata(local_catalog, t, doc)
        with pytest.raises(lakefmt.CorruptMetadataError, match="format-version"):
            local_catalog.load_table("meta.t")
        t.metadata_location = local_catalog.current_metadata_location("meta.t")


def test_last_updated_ms_and_snapshot_time_never_go_back(local_catalog):
    """META-4 and SNAP-6: the writer's clock, raised to the base's last-updated-ms (a clock that ran ahead)."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA)
    before = now_ms()
    snap = t.append(batch(0, 3))
    after = now_ms()
    meta = metadata_json(t)
    assert before <= snap.timestamp_ms <= after and before <= meta["last-updated-ms"] <= after
    ahead = dict(meta, **{"last-updated-ms": after + 86_400_000})  # written by a writer a day ahead
    swap_in_metadata(local_catalog, t, ahead)
    t = local_catalog.load_table("meta.t")
    snap = t.append(batch(3, 3))
    meta = metadata_json(t)
    assert snap.timestamp_ms >= after + 86_400_000 and meta["last-updated-ms"] >= after + 86_400_000
    t.set_property("write.target-file-size-bytes", 1 << 20)  # a commit without a snapshot, too
    assert metadata_json(t)["last-updated-ms"] >= meta["last-updated-ms"]
    stamps = [d["last-updated-ms"] for d in metadata_files(t)]
    assert stamps == sorted(stamps)


def test_location_is_the_only_absolute_path(local_catalog):
    """META-5: `location` is the table location; every other path in the file is relative (LAYOUT-2)."""
    t = history_table(local_catalog)

    def strings(value, key=None):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from strings(v, k)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v, key)
        elif isinstance(value, str):
            yield key, value

    for doc in metadata_files(t):
        assert doc["location"] == t.location
        absolute = [(k, v) for k, v in strings(doc) if v.startswith("/") or "://" in v]
        assert absolute == [("location", t.location)]


def test_table_uuid_never_changes_and_a_recreated_table_refuses_old_commits(local_catalog):
    """META-6: table-uuid is fixed at creation; a writer must not commit on a base with another uuid."""
    t = history_table(local_catalog)
    assert len({d["table-uuid"] for d in metadata_files(t)}) == 1
    local_catalog.drop_table("meta.t")
    fresh = local_catalog.create_table("meta.t", schema=SCHEMA)
    assert fresh.metadata.table_uuid != t.metadata.table_uuid
    with pytest.raises(lakefmt.CommitConflictError, match="re-created"):
        t.append(batch(100, 3))
    assert local_catalog.load_table("meta.t").metadata.snapshots == ()


def test_sort_orders(local_catalog):
    """META-9: order 0 is the unsorted order; a sorted table's order 1 lists source ids, identity transforms,
    directions and null orders (nulls-first for asc, nulls-last for desc by default)."""
    t = local_catalog.create_table("meta.sorted", schema=DOWNLINKS_SCHEMA,
                                   sort_by=["payload_id DESC", "sensor_kind", "value ASC NULLS LAST"])
    meta = metadata_json(t)
    ids = {f.name: f.id for f in t.schema().fields}
    assert meta["sort-orders"] == [
        {"order-id": 0, "fields": []},
        {"order-id": 1, "fields": [
            {"source-id": ids["payload_id"], "transform": "identity", "direction": "desc", "null-order": "nulls-last"},
            {"source-id": ids["sensor_kind"], "transform": "identity", "direction": "asc",
             "null-order": "nulls-first"},
            {"source-id": ids["value"], "transform": "identity", "direction": "asc", "null-order": "nulls-last"}]}]
    assert meta["default-sort-order-id"] == 1
    with pytest.raises(lakefmt.ValidationError):
        local_catalog.create_table("meta.bad", schema=DOWNLINKS_SCHEMA, sort_by=["value SIDEWAYS"])


def test_files_of_a_sorted_table_are_sorted_and_say_so(local_catalog):
    """META-10: with a default sort order, each data file's rows follow it and its entry records the order id;
    files of an unsorted table have a null sort_order_id."""
    t = local_catalog.create_table("meta.sorted", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"],
                                   sort_by=["payload_id DESC", "sensor_kind"])
    t.append(downlinks(600))
    for e in live_entries(t):
        assert e["sort_order_id"] == 1
        data = parquet(t, e["file_path"]).read().to_pylist()
        keys = [(-r["payload_id"], r["sensor_kind"]) for r in data]
        assert keys == sorted(keys)
    plain = local_catalog.create_table("meta.plain", schema=DOWNLINKS_SCHEMA)
    plain.append(downlinks(50))
    assert [e["sort_order_id"] for e in live_entries(plain)] == [None]


def test_a_new_tables_metadata(local_catalog):
    """META-11 (with SCHEMA-9, PART-11): version 1 file, format-version 2, no snapshots, one schema numbered
    1..n with id 0, spec 0, last-partition-id max(999, ids), sort order 0 (and 1 if sorted), empty logs."""
    t = local_catalog.create_table("meta.new", schema=DOWNLINKS_SCHEMA, partition_by=["day(ts)", "mission_id"],
                                   sort_by=["payload_id"])
    assert "/metadata/v000001-" in t.metadata_location
    meta = metadata_json(t)
    assert meta["format-version"] == 2 and meta["last-sequence-number"] == 0 and "snapshot-history" not in meta
    assert meta["current-snapshot-id"] is None
    assert meta["snapshots"] == meta["snapshot-log"] == meta["metadata-log"] == []
    (schema,) = meta["schemas"]
    assert schema["schema-id"] == meta["current-schema-id"] == 0
    assert [f["id"] for f in schema["fields"]] == [1, 2, 3, 4, 5]
    assert [f["name"] for f in schema["fields"]] == DOWNLINKS_SCHEMA.names
    assert meta["last-column-id"] == 5
    (spec,) = meta["partition-specs"]
    assert spec["spec-id"] == meta["default-spec-id"] == 0
    assert meta["last-partition-id"] == max(999, *(f["field-id"] for f in spec["fields"])) == 1001
    assert [o["order-id"] for o in meta["sort-orders"]] == [0, 1] and meta["default-sort-order-id"] == 1
    v2 = local_catalog.create_table("meta.v2", schema=DOWNLINKS_SCHEMA, format_version=2)
    assert metadata_json(v2)["format-version"] == 2
    unsorted = metadata_json(local_catalog.create_table("meta.plain", schema=DOWNLINKS_SCHEMA))
    assert unsorted["sort-orders"] == [{"order-id": 0, "fields": []}] and unsorted["last-partition-id"] == 999
    assert unsorted["partition-specs"] == [{"spec-id": 0, "fields": []}]


# -- SCHEMA ------------------------------------------------------------------------------------------------

def test_schema_and_field_objects(local_catalog):
    """SCHEMA-2: schema-id and at least one field, in the order users see; SCHEMA-3: field keys and names."""
    with pytest.raises(lakefmt.SchemaError, match="at least one column"):
        local_catalog.create_table("meta.empty", schema=pa.schema([]))
    t = local_catalog.create_table("meta.t", schema=pa.schema([("b", pa.int32()), ("A", pa.string()),
                                                               ("a", pa.string())]))  # names are case-sensitive
    with t.update_schema() as u:
        u.add_column("c", pa.float64(), doc="added later")
    (_, schema) = metadata_json(t)["schemas"]
    assert schema["schema-id"] == 1
    for f in schema["fields"]:
        assert set(f) <= {"id", "name", "type", "required", "doc"} and {"id", "name", "type", "required"} <= set(f)
    assert schema["fields"][-1] == {"id": 4, "name": "c", "type": "double", "required": False, "doc": "added later"}
    t.append(pa.table({"a": ["x"], "c": [1.5], "b": pa.array([7], pa.int32()), "A": ["y"]}))
    assert t.scan().to_arrow().column_names == ["b", "A", "a", "c"]  # schema order, not the data's
    for bad in ["a.b", "", "x" * 256, "tab\tname", "nul\x00"]:
        with pytest.raises(lakefmt.SchemaError, match="invalid column name"):
            local_catalog.create_table("meta.bad", schema=pa.schema([(bad, pa.int32())]))
        with pytest.raises(lakefmt.SchemaError):
            t.update_schema().add_column(bad, pa.int32()).commit()
    with pytest.raises(lakefmt.SchemaError, match="duplicate column name"):
        local_catalog.create_table("meta.bad", schema=pa.schema([("a", pa.int32()), ("a", pa.int64())]))
    assert local_catalog.create_table("meta.long", schema=pa.schema([("x" * 255, pa.int32())]))
    assert local_catalog.list_tables("meta") == ["meta.long", "meta.t"]


def test_field_ids_are_never_reused(local_catalog):
    """SCHEMA-4: a new column gets last-column-id + 1; last-column-id never decreases, even after a drop."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA)
    t.append(batch(0, 3))
    with t.update_schema() as u:
        u.drop_column("v")
    assert metadata_json(t)["last-column-id"] == 3
    with t.update_schema() as u:
        u.add_column("v", pa.float32())
    meta = metadata_json(t)
    assert meta["last-column-id"] == 4
    assert {f["name"]: f["id"] for f in meta["schemas"][-1]["fields"]} == {"id": 1, "part": 2, "v": 4}
    assert t.scan().to_arrow().column("v").to_pylist() == [None, None, None]  # old values stay with id 3
    lasts = [d["last-column-id"] for d in metadata_files(t)]
    assert lasts == sorted(lasts)
    for doc in metadata_files(t):
        assert doc["last-column-id"] >= max(f["id"] for s in doc["schemas"] for f in s["fields"])


def test_allowed_schema_changes(local_catalog):
    """SCHEMA-5: add (optional, at the end), rename, drop, make optional, widen; SCHEMA-6: exactly
    int->long, float->double, decimal(P,S)->decimal(P2,S) with P2 >= P."""
    schema = pa.schema([pa.field("i", pa.int32(), nullable=False), pa.field("f", pa.float32()),
                        pa.field("d", pa.decimal128(5, 2)), pa.field("s", pa.string()), pa.field("x", pa.int64())])
    t = local_catalog.create_table("meta.t", schema=schema)
    t.append(pa.table({"i": pa.array([1], pa.int32()), "f": pa.array([0.5], pa.float32()),
                       "d": pa.array([1], pa.decimal128(5, 2)), "s": ["a"], "x": [9]}, schema=schema))
    with t.update_schema() as u:
        u.widen_column("i", pa.int64()).widen_column("f", pa.float64()).widen_column("d", pa.decimal128(9, 2))
        u.make_optional("i").rename_column("s", "label").drop_column("x").add_column("extra", pa.string())
    fields = metadata_json(t)["schemas"][-1]["fields"]
    assert [(f["id"], f["name"], f["type"], f["required"]) for f in fields] == [
        (1, "i", "long", False), (2, "f", "double", False), (3, "d", "decimal(9,2)", False),
        (4, "label", "string", False), (6, "extra", "string", False)]
    got = t.scan().to_arrow()
    assert got.schema.field("i").type == pa.int64() and got.schema.field("d").type == pa.decimal128(9, 2)
    assert got.to_pylist() == [{"i": 1, "f": 0.5, "d": pa.scalar(1, pa.decimal128(9, 2)).as_py(), "label": "a",
                                "extra": None}]

    refused = [
        lambda u: u.widen_column("i", pa.int32()),            # narrowing
        lambda u: u.widen_column("f", pa.float32()),
        lambda u: u.widen_column("i", pa.float64()),          # int -> double is not a widening here
        lambda u: u.widen_column("d", pa.decimal128(9, 3)),   # scale change
        lambda u: u.widen_column("d", pa.decimal128(8, 2)),   # precision down
        lambda u: u.widen_column("label", pa.binary()),
        lambda u: u.add_column("label", pa.int32()),          # name in use
        lambda u: u.rename_column("f", "label"),
    ]
    before = metadata_json(t)
    for change in refused:
        with pytest.raises(lakefmt.SchemaError):
            change(t.update_schema()).commit()
    assert metadata_json(local_catalog.load_table("meta.t")) == before


def test_new_schemas_get_the_next_id_and_old_ones_stay(local_catalog):
    """SCHEMA-7: schema-id = highest + 1, appended and made current; the schemas of retained snapshots stay."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA)
    s0 = t.append(batch(0, 2))
    with t.update_schema() as u:
        u.add_column("a", pa.int32())
    s1 = t.append(pa.table({"id": [5], "part": ["a"], "v": pa.array([1.0], pa.float32()),
                            "a": pa.array([1], pa.int32())}))
    with t.update_schema() as u:
        u.rename_column("a", "b")
    meta = metadata_json(t)
    assert [s["schema-id"] for s in meta["schemas"]] == [0, 1, 2] and meta["current-schema-id"] == 2
    by_id = {s["snapshot-id"]: s["schema-id"] for s in meta["snapshots"]}
    assert (by_id[s0.snapshot_id], by_id[s1.snapshot_id]) == (0, 1)
    assert t.scan(snapshot_id=s0.snapshot_id).to_arrow().column_names == ["id", "part", "v"]  # READ-3


def test_columns_that_must_not_be_dropped(local_catalog):
    """SCHEMA-8: not a partition source, not a sort order source, not the only column."""
    t = local_catalog.create_table("meta.t", schema=DOWNLINKS_SCHEMA, partition_by=["day(ts)"],
                                   sort_by=["payload_id"])
    before = metadata_json(t)
    with pytest.raises(lakefmt.SchemaError, match="partition field"):
        t.update_schema().drop_column("ts").commit()
    with pytest.raises(lakefmt.SchemaError, match="sort order"):
        t.update_schema().drop_column("payload_id").commit()
    one = local_catalog.create_table("meta.one", schema=pa.schema([("only", pa.int32())]))
    with pytest.raises(lakefmt.SchemaError, match="last column"):
        one.update_schema().drop_column("only").commit()
    assert metadata_json(t) == before
    with t.update_schema() as u:
        u.drop_column("value")  # any other column can go
    assert "value" not in t.scan().to_arrow().column_names


# -- SNAP --------------------------------------------------------------------------------------------------

def test_snapshot_objects(local_catalog):
    """SNAP-1: exactly these fields; parent, sequence number, manifest list (relative) and schema id."""
    t = history_table(local_catalog)
    meta = metadata_json(t)
    parent = None
    for s in meta["snapshots"]:
        assert set(s) == SNAPSHOT_FIELDS
        assert s["parent-snapshot-id"] == parent
        parent = s["snapshot-id"]
        assert s["operation"] in ("append", "overwrite", "delete", "replace")
        assert not s["manifest-list"].startswith("/") and isinstance(s["summary"], dict)
    assert [s["schema-id"] for s in meta["snapshots"]][-2:] == [1, 1]


def test_snapshot_ids_are_random_positive_63_bit_and_unique(local_catalog):
    """SNAP-2: positive, fit in a signed 64-bit integer, unique in the table, random rather than counted."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA)
    for i in range(12):
        t.append(batch(i, 1))
    ids = [s["snapshot-id"] for s in metadata_json(t)["snapshots"]]
    assert len(set(ids)) == 12 and all(0 < i < 2**63 for i in ids)
    assert max(ids) > 2**40  # drawn from 63 random bits, not counted 1, 2, 3, ...


def test_operations_say_what_happened_to_the_files(local_catalog):
    """SNAP-4: append adds only; delete removes files or gives them vectors and adds only survivors;
    overwrite removes and adds; replace changes files but not rows."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA, partition_by=["part"])

    def live() -> dict[str, object]:
        return {e["file_path"]: e.get("deletion_vector") for e in live_entries(t)}

    def table_rows() -> list[tuple]:
        return rows(t.scan().to_arrow())

    t.append(batch(0, 10, "a"))
    before = live()
    snap = t.append(batch(10, 10, "b"))
    after = live()
    assert snap.operation == "append" and set(before) < set(after) and all(after[p] == before[p] for p in before)

    before = live()
    snap = t.delete("id = 3")  # merge-on-read: a vector, no file added or removed
    after = live()
    assert snap.operation == "delete" and set(after) == set(before) and sum(v is not None for v in after.values()) == 1

    t.set_property("write.delete.mode", "copy-on-write")
    before, rows_before = live(), table_rows()
    snap = t.delete("id = 14")
    after = live()
    assert snap.operation == "delete" and len(set(before) - set(after)) == 1 and len(set(after) - set(before)) == 1
    added = (set(after) - set(before)).pop()
    assert parquet(t, added).metadata.num_rows == 9  # only the surviving rows of the removed file
    assert len(table_rows()) == len(rows_before) - 1

    before = live()
    snap = t.overwrite(batch(100, 2, "a"), filter="part = 'a'")
    after = live()
    assert snap.operation == "overwrite" and set(before) - set(after) and set(after) - set(before)

    t.append(batch(200, 3, "b"))
    before, rows_before = live(), table_rows()
    result = t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    assert result.groups_committed >= 1
    snap = t.refresh().current_snapshot()
    assert snap.operation == "replace" and set(live()) != set(before) and table_rows() == rows_before


def test_snapshots_never_change_once_committed(local_catalog):
    """SNAP-7: every snapshot is the same JSON object in every later metadata file; none leaves but by expiry."""
    t = history_table(local_catalog)
    seen: dict[int, dict] = {}
    for doc in metadata_files(t):
        current = {s["snapshot-id"]: s for s in doc["snapshots"]}
        assert set(seen) <= set(current)
        for snapshot_id, first in seen.items():
            assert current[snapshot_id] == first
        seen.update(current)
    assert len(seen) >= 6


def test_snapshot_time_is_the_commit_time(local_catalog):
    """SNAP-6: timestamp-ms is the writer's clock at the commit attempt (and the snapshot log records it)."""
    t = local_catalog.create_table("meta.t", schema=SCHEMA)
    marks = []
    for i in range(3):
        before = now_ms()
        snap = t.append(batch(i, 1))
        marks.append((before, snap.snapshot_id, now_ms()))
    meta = metadata_json(t)
    stamps = {s["snapshot-id"]: s["timestamp-ms"] for s in meta["snapshots"]}
    for before, snapshot_id, after in marks:
        assert before <= stamps[snapshot_id] <= after
    assert [e["snapshot-id"] for e in meta["snapshot-log"]] == [m[1] for m in marks]
    # META-8: each entry is the time its metadata was written (last-updated-ms), read from the clock
    # after the snapshot was made and before the commit returned: equal to the snapshot's time or later.
    for entry, (_, snapshot_id, after) in zip(meta["snapshot-log"], marks):
        assert stamps[snapshot_id] <= entry["timestamp-ms"] <= after
