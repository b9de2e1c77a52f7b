"""The catalog (spec/catalog.md CAT-*) checked on its DuckDB rows, and reading (spec/reading.md READ-*)
checked against an independent evaluation of the same rows."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.commit import FileChange
from lakefmt.footer import data_file_from_footer
from lakefmt.leases import Leases
from tests.conftest import rows
from tests.spec_ids.table_files import catalog_rows, files_under, live_entries, metadata_json

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])


def batch(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [part] * n}, schema=SCHEMA)


# -- catalog -----------------------------------------------------------------------------------------------

def test_tables_are_namespace_dot_name_one_level_deep(local_catalog):
    """CAT-1: a table is (namespace, name), written namespace.name; deeper identifiers are refused."""
    t = local_catalog.create_table(("obs", "readings"), schema=SCHEMA)
    assert t.name == "obs.readings" and local_catalog.list_tables() == ["obs.readings"]
    assert local_catalog.load_table("obs.readings").metadata.table_uuid == t.metadata.table_uuid
    for deeper in ("obs.sub.readings", ("obs", "sub", "readings"), "readings"):
        with pytest.raises(lakefmt.InvalidNameError):
            local_catalog.create_table(deeper, schema=SCHEMA)
    assert local_catalog.list_namespaces() == ["obs"]


def test_create_table_writes_version_1_and_logs_it(local_catalog):
    """CAT-12: the first metadata file, then the tables row (version 1), the commit-log row and the
    namespace, under one lock; a taken name fails with TableExistsError and writes nothing."""
    t = local_catalog.create_table("obs.t", schema=SCHEMA)
    assert catalog_rows(local_catalog, "SELECT namespace, name, table_uuid, metadata_location, version FROM tables"
                        ) == [("obs", "t", t.metadata.table_uuid, t.metadata_location, 1)]
    assert catalog_rows(local_catalog, "SELECT version, old_metadata_location, new_metadata_location, operation, "
                        "snapshot_id FROM commit_log") == [(1, None, t.metadata_location, "create", None)]
    assert catalog_rows(local_catalog, "SELECT namespace FROM namespaces") == [("obs",)]
    assert "/metadata/v000001-" in t.metadata_location and t.io.exists(t.metadata_location)
    before = (set(files_under(t)), catalog_rows(local_catalog, "SELECT count(*) FROM commit_log"))
    with pytest.raises(lakefmt.TableExistsError):
        local_catalog.create_table("obs.t", schema=pa.schema([("other", pa.int32())]))
    assert (set(files_under(t)), catalog_rows(local_catalog, "SELECT count(*) FROM commit_log")) == before
    assert [p for p in t.io.list_files(f"{local_catalog.warehouse}/obs")
            if p.path.endswith(".metadata.json")] != [] and len(local_catalog.list_tables()) == 1


def test_the_catalog_row_matches_the_current_metadata(catalog):
    """CAT-15: metadata_location is the absolute location of the current metadata file, version the number
    in its name, table_uuid the metadata's; CAT-16: the catalog file is local, table files anywhere."""
    t = catalog.create_table("obs.t", schema=SCHEMA)
    t.append(batch(0, 3))
    t.delete("id = 1")
    with t.update_schema() as u:
        u.add_column("note", pa.string())
    ((location, version, table_uuid),) = catalog_rows(
        catalog, "SELECT metadata_location, version, table_uuid FROM tables WHERE namespace = 'obs' AND name = 't'")
    assert location == t.metadata_location and location.startswith(("/", "s3://"))
    assert version == int(re.search(r"/metadata/v(\d{6,})-[^/]+\.metadata\.json$", location).group(1)) == 4
    assert table_uuid == metadata_json(t)["table-uuid"]
    assert catalog.catalog_path.startswith("/")  # a local file, whatever the warehouse
    assert t.location.startswith(catalog.warehouse)


def test_the_catalog_file_must_be_local(tmp_path):
    """CAT-16: a catalog file is on a local file system; a non-local warehouse needs a local catalog_path."""
    with pytest.raises(lakefmt.InvalidCatalogPathError):
        lakefmt.Catalog("memory://lakefmt-cat16", create=True)
    with pytest.raises(lakefmt.InvalidCatalogPathError, match="local file path"):
        lakefmt.Catalog("memory://lakefmt-cat16", catalog_path="memory://lakefmt-cat16/catalog.duckdb", create=True)
    cat = lakefmt.Catalog("memory://lakefmt-cat16", catalog_path=str(tmp_path / "catalog.duckdb"), create=True)
    t = cat.create_table("obs.t", schema=SCHEMA)
    t.append(batch(0, 2))
    assert t.location.startswith("memory://") and cat.load_table("obs.t").scan().count() == 2


def test_load_table_reads_the_pointer_then_the_metadata(local_catalog):
    """CAT-17: a load reads metadata_location from the catalog and then that file; a missing row fails with
    NoSuchTableError, also for a handle whose table was dropped meanwhile."""
    t = local_catalog.create_table("obs.t", schema=SCHEMA)
    t.append(batch(0, 3))
    loaded = local_catalog.load_table("obs.t")
    assert loaded.metadata_location == local_catalog.current_metadata_location("obs.t") == t.metadata_location
    assert loaded.metadata.current_snapshot_id == metadata_json(t)["current-snapshot-id"]
    local_catalog.drop_table("obs.t")
    with pytest.raises(lakefmt.NoSuchTableError, match="obs.t"):
        local_catalog.load_table("obs.t")
    with pytest.raises(lakefmt.NoSuchTableError):
        loaded.refresh()


def test_register_a_table(tmp_path):
    """CAT-20: register reads and validates the metadata file, takes the version from its name, and in one
    transaction adds the tables row, the namespace, a `register` commit-log row and the writers' progress;
    a taken name or uuid, a bad file name or a bad file are refused; no table file is written."""
    source = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    cat = lakefmt.Catalog(str(tmp_path / "wh2"), create=True)  # another warehouse's catalog, on the same store
    t = source.create_table("ns.t", schema=SCHEMA)
    t.append(batch(0, 3), idempotency=("ingest-1", 7))
    t.append(batch(3, 3))
    location = t.metadata_location
    table_files = dict(files_under(t))
    source.drop_table("ns.t")  # the files stay (CAT-8)

    registered = cat.register_table("moved.t", location)
    assert catalog_rows(cat, "SELECT namespace, name, metadata_location, version, table_uuid FROM tables") == [
        ("moved", "t", location, 3, t.metadata.table_uuid)]
    assert catalog_rows(cat, "SELECT operation, old_metadata_location, new_metadata_location, snapshot_id, version "
                        "FROM commit_log") == [("register", None, location, t.metadata.current_snapshot_id, 3)]
    assert catalog_rows(cat, "SELECT namespace FROM namespaces") == [("moved",)]
    assert catalog_rows(cat, "SELECT writer_id, batch_id FROM writer_progress") == [("ingest-1", 7)]
    assert rows(registered.scan().to_arrow()) == rows(batch(0, 6))
    with pytest.raises(lakefmt.AlreadyCommittedError):
        registered.append(batch(100, 1), idempotency=("ingest-1", 7))

    with pytest.raises(lakefmt.TableExistsError):
        cat.register_table("moved.t", location)
    with pytest.raises(lakefmt.TableExistsError, match="LAYOUT-11"):
        cat.register_table("moved.copy", location)
    with pytest.raises(lakefmt.ValidationError):
        cat.register_table("moved.other", location.replace("/v000003-", "/version3-"))
    with pytest.raises(lakefmt.CorruptMetadataError):
        cat.register_table("moved.other", location.replace("/v000003-", "/v000009-"))
    assert files_under(registered) == table_files
    assert cat.list_tables() == ["moved.t"]


def test_compactors_hold_a_partition_lease_named_by_the_partition_path(local_catalog):
    """CAT-11: while a compactor rewrites a partition it holds a live `partition` lease whose key names the
    partition path (PART-7; COMPACT-22 prefixes the spec id); a partition leased by another owner is left alone."""
    t = local_catalog.create_table("obs.t", schema=SCHEMA, partition_by=["part"])
    for i in range(6):
        t.append(batch(i * 5, 5, "ab"[i % 2]))
    leases = Leases(local_catalog)
    held_during_commit: list[list[str]] = []

    def hook(point: str, info: dict) -> None:
        if point == "before-commit":
            held_during_commit.append(sorted(lease.key for lease in leases.live(t.metadata.table_uuid, "partition")))

    assert leases.acquire_many(t.metadata.table_uuid, "partition", ["0:part=b"], owner="another-compactor", ttl=600)
    result = t.compaction.run("binpack", min_age_seconds=0, min_input_files=2, hook=hook)
    assert sorted(g.status for g in result.groups) == ["committed", "lease-held"]
    assert held_during_commit and all("0:part=a" in keys for keys in held_during_commit)
    assert all(key.endswith(("part=a", "part=b")) for keys in held_during_commit for key in keys)
    by_part: dict[str, int] = {}
    for e in live_entries(t):
        by_part[e["partition"]["part"]] = by_part.get(e["partition"]["part"], 0) + 1
    assert by_part == {"a": 1, "b": 3}
    assert [lease.owner for lease in leases.live(t.metadata.table_uuid, "partition")] == ["another-compactor"]


# -- reading -----------------------------------------------------------------------------------------------

def test_time_travel_rules(local_catalog):
    """READ-2: by id or by timestamp (the last snapshot-log entry at or before it; a naive time is UTC);
    unknown or expired snapshots fail with NoSuchSnapshotError; naming both fails with ValidationError."""
    t = local_catalog.create_table("obs.t", schema=SCHEMA)
    s1 = t.append(batch(0, 2))
    s2 = t.append(batch(2, 2))
    log = metadata_json(t)["snapshot-log"]
    at_s1 = datetime.fromtimestamp(log[0]["timestamp-ms"] / 1000, timezone.utc)
    expected_at_s1 = [e["snapshot-id"] for e in log if e["timestamp-ms"] <= log[0]["timestamp-ms"]][-1]
    assert t.scan(as_of=at_s1).count() == (2 if expected_at_s1 == s1.snapshot_id else 4)
    assert t.scan(as_of=at_s1.replace(tzinfo=None)).count() == t.scan(as_of=at_s1).count()
    assert t.scan(snapshot_id=s1.snapshot_id).count() == 2
    with pytest.raises(lakefmt.NoSuchSnapshotError):
        t.scan(as_of=at_s1 - timedelta(milliseconds=1))
    with pytest.raises(lakefmt.ValidationError):
        t.scan(snapshot_id=s1.snapshot_id, as_of=at_s1)
    t.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=1)
    t.refresh()
    assert [s.snapshot_id for s in t.snapshots()] == [s2.snapshot_id]
    with pytest.raises(lakefmt.NoSuchSnapshotError):
        t.scan(snapshot_id=s1.snapshot_id)
    if expected_at_s1 == s1.snapshot_id:
        with pytest.raises(lakefmt.NoSuchSnapshotError):
            t.scan(as_of=at_s1)  # its log entry names a snapshot that is gone


# Filters and the same predicate in pyarrow, over rows chosen to sit on the edges of bounds.
LONG = "a" * 16
FILTERS = [
    ("s = '" + LONG + "zz'", pc.field("s") == LONG + "zz"),
    ("s > '" + LONG + "'", pc.field("s") > LONG),
    ("s < '" + LONG + "b'", pc.field("s") < LONG + "b"),
    ("starts_with(s, '" + LONG + "z')", pc.starts_with(pc.field("s"), LONG + "z")),
    ("x != 2.0", pc.field("x") != 2.0),
    ("x > 1.5", pc.field("x") > 1.5),
    ("n IS NULL", pc.field("n").is_null()),
    ("n >= 2147483647", pc.field("n") >= 2147483647),
    ("n = -5 OR s = 'b'", (pc.field("n") == -5) | (pc.field("s") == "b")),
    ("NOT (x < 5)", ~(pc.field("x") < 5) | pc.is_nan(pc.field("x"))),
]


def nan_safe(table: pa.Table) -> list[tuple]:
    """Rows as a sorted multiset, NaN made comparable."""
    return sorted((tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows(table)), key=repr)


def test_pruning_never_drops_a_matching_file(local_catalog):
    """READ-4: a file is skipped only when its metadata proves no row can match: truncated string bounds,
    NaN outside float bounds, nulls, extreme integers; every file holding a match is planned and read."""
    schema = pa.schema([("s", pa.string()), ("x", pa.float64()), ("n", pa.int32())])
    t = local_catalog.create_table("obs.prune", schema=schema)
    files = [
        {"s": [LONG + "zz", LONG + "a"], "x": [float("nan"), 1.0], "n": [1, None]},
        {"s": [LONG, "b"], "x": [2.0, 2.0], "n": [-5, 2147483647]},
        {"s": ["\U0010ffff" * 17, "c"], "x": [None, 7.5], "n": [3, 4]},
        {"s": [None, LONG + "a" * 3], "x": [3.0, float("nan")], "n": [None, None]},
    ]
    tables = [pa.table({k: pa.array(v, schema.field(k).type) for k, v in f.items()}, schema=schema) for f in files]
    for data in tables:
        t.append(data)
    by_path = {}
    for e in live_entries(t):
        by_path[e["file_path"]] = pq.read_table(f"{t.location}/{e['file_path']}")
    for text, expression in FILTERS:
        planned = {f.path for f in t.plan_files(text)}
        holding = {p for p, data in by_path.items() if data.filter(expression).num_rows}
        assert holding <= planned, text
        expected = pa.concat_tables(tables).filter(expression)
        assert nan_safe(t.scan(text).to_arrow()) == nan_safe(expected), text
    assert len(t.plan_files("n > 2147483647")) == 0  # and pruning does happen


def test_rows_come_back_in_the_read_schema_whatever_the_file_says(local_catalog):
    """READ-7: a data file with other column names, another column order and the large Arrow variants
    returns rows with the read schema's names, order and types (READ-3; TYPE-1: string and binary)."""
    schema = pa.schema([("id", pa.int64()), ("label", pa.string()), ("blob", pa.binary())])
    t = local_catalog.create_table("obs.t", schema=schema)
    t.append(pa.table({"id": [1], "label": ["own"], "blob": [b"\x01"]}, schema=schema))
    ids = {f.name: f.id for f in t.schema().fields}
    foreign = pa.table({
        "B": pa.array([b"\x02"], pa.large_binary()),
        "name_before_rename": pa.array(["foreign"], pa.large_string()),
        "ident": pa.array([2], pa.int64()),
    })
    foreign = foreign.cast(pa.schema([
        foreign.schema.field("B").with_metadata({"PARQUET:field_id": str(ids["blob"])}),
        foreign.schema.field("name_before_rename").with_metadata({"PARQUET:field_id": str(ids["label"])}),
        foreign.schema.field("ident").with_metadata({"PARQUET:field_id": str(ids["id"])})]))
    sink = pa.BufferOutputStream()
    pq.write_table(foreign, sink)
    raw = sink.getvalue().to_pybytes()
    rel = "data/foreign-00000.parquet"
    t.io.write_bytes(f"{t.location}/{rel}", raw)
    footer = pq.read_metadata(pa.BufferReader(raw))
    described = data_file_from_footer(rel, (), len(raw), footer, t.schema(), t.spec(), None)
    t.commit_change(FileChange("append", added=[described]))
    got = t.scan().to_arrow()
    assert got.schema == t.arrow_schema() and got.column_names == ["id", "label", "blob"]
    assert [f.type for f in got.schema] == [pa.int64(), pa.string(), pa.binary()]
    own = t.scan(filter="id = 1").to_arrow()
    assert own.schema == got.schema
    assert rows(got) == [(1, "own", b"\x01"), (2, "foreign", b"\x02")]
    assert rows(t.scan(columns=["blob", "id"]).to_arrow()) == [(b"\x01", 1), (b"\x02", 2)]
