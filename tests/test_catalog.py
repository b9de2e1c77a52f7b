"""The DuckDB catalog and the errors of bad input (spec/catalog.md CAT-*, WRITE-3, EXPR-3, EXPR-4).

Every refusal here is checked twice: the right error type, and nothing written
(no new file under the warehouse, no new catalog row, no new snapshot).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import lakefmt
from lakefmt import manifest_cache
from lakefmt.catalog import CatalogSession
from tests.conftest import DOWNLINKS_SCHEMA, downlinks

SIMPLE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                    pa.field("ts", pa.timestamp("us", tz="UTC"))])


def simple_rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": [f"n{i}" for i in range(start, start + n)],
                     "ts": pa.array([1_767_225_600_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC"))},
                    schema=SIMPLE)


def warehouse_state(catalog: lakefmt.Catalog) -> tuple:
    """Everything a refused operation must leave alone: files, tables, namespaces, commits."""
    files = sorted((f.path, f.size) for f in catalog.io.list_files(catalog.warehouse)
                   if not f.path.endswith(("catalog.duckdb", "catalog.duckdb.lock", ".wal")))
    return (files, catalog.list_tables(), catalog.list_namespaces(), len(catalog.commit_log()))


# -- namespaces (CAT-13) ------------------------------------------------------------------------------

def test_namespaces_create_list_drop(catalog):
    catalog.create_namespace("artemis", {"owner": "flight-ops"})
    catalog.create_namespace("orion")
    assert catalog.list_namespaces() == ["artemis", "orion"]
    with pytest.raises(lakefmt.NamespaceExistsError):
        catalog.create_namespace("artemis")
    catalog.create_table("orion.t", schema=SIMPLE)
    before = warehouse_state(catalog)
    with pytest.raises(lakefmt.ValidationError, match="not empty"):
        catalog.drop_namespace("orion")
    assert warehouse_state(catalog) == before
    catalog.drop_namespace("artemis")
    assert catalog.list_namespaces() == ["orion"]
    with pytest.raises(lakefmt.NoSuchNamespaceError):
        catalog.drop_namespace("artemis")


# -- tables ---------------------------------------------------------------------------------------------

def test_create_load_list_rename_drop(catalog):
    t = catalog.create_table("artemis.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["day(ts)"])
    catalog.create_table("artemis.other", schema=SIMPLE)
    with pytest.raises(lakefmt.TableExistsError):
        catalog.create_table("artemis.downlinks", schema=SIMPLE)
    t.append(downlinks(200))
    assert catalog.list_tables() == ["artemis.downlinks", "artemis.other"]
    assert catalog.list_tables("artemis") == ["artemis.downlinks", "artemis.other"]
    assert catalog.table_exists("artemis.downlinks") and not catalog.table_exists("artemis.nope")
    loaded = catalog.load_table(("artemis", "downlinks"))
    assert loaded.metadata.table_uuid == t.metadata.table_uuid
    assert loaded.scan().count() == 200

    catalog.rename_table("artemis.downlinks", "gateway.downlinks")  # files stay where they are (CAT-7)
    assert catalog.list_tables() == ["artemis.other", "gateway.downlinks"]
    moved = catalog.load_table("gateway.downlinks")
    assert moved.location == t.location and moved.scan().count() == 200
    with pytest.raises(lakefmt.NoSuchTableError):
        catalog.load_table("artemis.downlinks")
    with pytest.raises(lakefmt.NoSuchTableError):
        catalog.rename_table("artemis.downlinks", "x.y")
    with pytest.raises(lakefmt.TableExistsError):
        catalog.rename_table("gateway.downlinks", "artemis.other")

    other = catalog.load_table("artemis.other")
    catalog.drop_table("artemis.other")  # without purge: files are kept (CAT-8)
    assert any(True for _ in catalog.io.list_files(other.location))
    catalog.drop_table("gateway.downlinks", purge=True)
    assert list(catalog.io.list_files(t.location)) == []
    assert catalog.list_tables() == []
    with pytest.raises(lakefmt.NoSuchTableError):
        catalog.drop_table("gateway.downlinks")


HOSTILE = ["a; DROP TABLE x", "../../etc", "ns.tab le", "", "x" * 200, "ns.a.b", "ns." + "x" * 200,
           "../ns.t", "ns./t", "ns.t\x00", "ns.'; DELETE FROM tables; --", "ns.t;", "1ns.t", "ns.ünïcode",
           # CAT-2 is a full match: a trailing newline is not part of a name; identifiers are text
           "ns.t\n", "ns\n.t", "ns.t\r\n", "\nns.t", ("ns", "t\n"), 123, None, ("ns", 5), b"ns.t", ["ns"],
           ("ns", "t", "u"), 1.5]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_table_names_are_refused_and_nothing_is_written(local_catalog, name):
    local_catalog.create_table("ns.existing", schema=SIMPLE)
    before = warehouse_state(local_catalog)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.create_table(name, schema=SIMPLE)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.load_table(name)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.rename_table("ns.existing", name)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.drop_table(name, purge=True)
    assert warehouse_state(local_catalog) == before
    assert local_catalog.load_table("ns.existing").scan().count() == 0


@pytest.mark.parametrize("name", ["a; DROP TABLE x", "../../etc", "tab le", "", "x" * 200, "a.b", "ns/t",
                                  "ns\n", "ns\r\n", 5, b"ns"])
def test_hostile_namespace_names_are_refused(local_catalog, name):
    before = warehouse_state(local_catalog)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.create_namespace(name)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.drop_namespace(name)
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.list_tables(name)
    assert warehouse_state(local_catalog) == before


def test_longest_valid_name_is_accepted(local_catalog):
    name = "n" * 128
    local_catalog.create_table(f"{name}.{name}", schema=SIMPLE)
    assert local_catalog.list_tables() == [f"{name}.{name}"]


# -- compare-and-swap (CAT-4, CAT-5) --------------------------------------------------------------------

def _commit_rows(catalog: lakefmt.Catalog) -> list[tuple]:
    with catalog.session() as s:
        return s.con.execute("SELECT version, old_metadata_location, new_metadata_location, operation "
                             "FROM commit_log WHERE namespace = 'ns' AND name = 't' ORDER BY version").fetchall()


def test_compare_and_swap_on_a_session(local_catalog):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    current = t.metadata_location
    assert len(_commit_rows(local_catalog)) == 1  # the create
    new = current.replace("/v", "/vNEW-")
    with local_catalog.session() as s:
        assert isinstance(s, CatalogSession)
        assert s.current_location("ns", "t") == current
        assert s.compare_and_swap("ns", "t", current + ".stale", new, operation="append", snapshot_id=None,
                                  summary={}) is False
    assert local_catalog.current_metadata_location("ns.t") == current
    assert len(_commit_rows(local_catalog)) == 1  # a failed swap logs nothing

    with local_catalog.session() as s:
        assert s.compare_and_swap("ns", "t", current, new, operation="append", snapshot_id=7,
                                  summary={"added-records": "3"}) is True
    assert local_catalog.current_metadata_location("ns.t") == new
    rows = _commit_rows(local_catalog)
    assert len(rows) == 2
    version, old_loc, new_loc, op = rows[-1]
    assert (old_loc, new_loc, op) == (current, new, "append")
    assert version == rows[0][0] + 1
    record = local_catalog.commit_log("ns.t")[0]
    assert record.snapshot_id == 7 and record.summary == {"added-records": "3"}
    assert record.committed_at.tzinfo is not None

    # The same expected location cannot win twice: the pointer moved on.
    with local_catalog.session() as s:
        assert s.compare_and_swap("ns", "t", current, new + "2", operation="append", snapshot_id=None,
                                  summary={}) is False
    assert len(_commit_rows(local_catalog)) == 2


def test_catalog_sql_takes_names_as_parameters(local_catalog):
    """Valid but SQL-looking names never reach SQL text: every statement is parameterized."""
    t = local_catalog.create_table("select_.from_", schema=SIMPLE)
    t.append(simple_rows(3))
    with duckdb.connect(local_catalog.catalog_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tables").fetchone() == (1,)


# -- corrupt and missing metadata (READ-1) -----------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "not-an-object", "missing-keys",
                                    "future-version", "delete"])
def test_corrupt_metadata_json_fails_to_load(local_catalog, damage):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.append(simple_rows(10))
    path = Path(t.metadata_location)
    text = path.read_text()
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff{{{not json")
    elif damage == "empty":
        path.write_text("")
    elif damage == "not-an-object":
        path.write_text("[1, 2, 3]")
    elif damage == "missing-keys":
        obj = json.loads(text)
        del obj["schemas"]
        path.write_text(json.dumps(obj))
    elif damage == "future-version":
        obj = json.loads(text)
        obj["format-version"] = 99
        path.write_text(json.dumps(obj))
    else:
        path.unlink()
    before = warehouse_state(local_catalog)
    with pytest.raises(lakefmt.CorruptMetadataError):
        local_catalog.load_table("ns.t")
    assert warehouse_state(local_catalog) == before


def test_missing_manifest_fails_the_scan(local_catalog):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.append(simple_rows(10))
    t.append(simple_rows(10, start=10))
    metadata_dir = Path(t.location) / "metadata"
    manifests = sorted(metadata_dir.glob("*.manifest.parquet"))
    assert manifests
    for m in manifests:
        m.unlink()
    manifest_cache.clear()  # as in a process that never read these manifests
    fresh = local_catalog.load_table("ns.t")
    with pytest.raises(lakefmt.CorruptMetadataError, match="missing"):
        fresh.scan().to_arrow()
    with pytest.raises(lakefmt.CorruptMetadataError):
        fresh.plan_files("id = 3")


def test_missing_manifest_list_and_data_file_fail_cleanly(local_catalog):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.append(simple_rows(10))
    (data_file,) = t.plan_files()
    os.remove(f"{t.location}/{data_file.path}")
    with pytest.raises(lakefmt.CorruptMetadataError, match="missing"):
        local_catalog.load_table("ns.t").scan().to_arrow()
    os.remove(f"{t.location}/{t.current_snapshot().manifest_list}")
    manifest_cache.clear()
    with pytest.raises(lakefmt.CorruptMetadataError, match="missing"):
        local_catalog.load_table("ns.t").plan_files()


# -- bad properties (META-12) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "abc", "", "nan", "1.5", "inf"])
def test_bad_target_file_size_is_refused(local_catalog, value):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    before = warehouse_state(local_catalog)
    with pytest.raises(lakefmt.ValidationError, match="write.target-file-size-bytes"):
        local_catalog.create_table("ns.u", schema=SIMPLE, properties={"write.target-file-size-bytes": value})
    with pytest.raises(lakefmt.ValidationError, match="write.target-file-size-bytes"):
        t.set_properties(**{"write__target-file-size-bytes": value})
    with pytest.raises(lakefmt.ValidationError, match="write.target-file-size-bytes"):
        t.set_property("write.target-file-size-bytes", value)
    assert warehouse_state(local_catalog) == before
    assert "write.target-file-size-bytes" not in local_catalog.load_table("ns.t").properties


def test_good_property_is_committed(local_catalog):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.set_property("write.target-file-size-bytes", 1024 * 1024)
    assert local_catalog.load_table("ns.t").properties["write.target-file-size-bytes"] == str(1024 * 1024)


# -- data that does not fit the schema (WRITE-3) ---------------------------------------------------------------

def _bad_batches() -> dict[str, pa.Table]:
    good = simple_rows(3)
    naive = pa.table({"id": pa.array([1], pa.int64()), "name": ["a"],
                      "ts": pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us"))})
    return {
        "extra column": good.append_column("altitude", pa.array([1.0, 2.0, 3.0])),
        "incompatible type": pa.table({"id": ["one", "two"], "name": ["a", "b"]}),
        "lossy type": pa.table({"id": pa.array([1.5, 2.0], pa.float64())}),
        "nulls in a required column": pa.table({"id": pa.array([1, None], pa.int64()), "name": ["a", "b"]}),
        "required column missing": pa.table({"name": ["a"]}),
        "naive timestamp into timestamptz": naive,
        "duplicate columns": pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"]),
        "not a table": {"id": [1]},  # type: ignore[dict-item]
    }


@pytest.mark.parametrize("case", list(_bad_batches()))
def test_append_with_a_different_schema_is_refused(local_catalog, case):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.append(simple_rows(5))
    before = warehouse_state(local_catalog)
    with pytest.raises(lakefmt.SchemaMismatchError):
        t.append(_bad_batches()[case])
    assert warehouse_state(local_catalog) == before
    assert len(local_catalog.load_table("ns.t").snapshots()) == 1
    with pytest.raises(lakefmt.SchemaMismatchError):
        t.overwrite(_bad_batches()[case])
    assert len(local_catalog.load_table("ns.t").snapshots()) == 1


def test_compatible_data_is_widened_on_append(local_catalog):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.append(pa.table({"id": pa.array([1, 2], pa.int32()), "name": pa.array(["a", "b"], pa.large_string())}))
    got = t.scan().to_arrow()
    assert got.schema.field("id").type == pa.int64() and got.column("ts").null_count == 2


# -- filters (EXPR-3, EXPR-4) ------------------------------------------------------------------------------------

def test_filter_errors(local_catalog):
    t = local_catalog.create_table("ns.t", schema=SIMPLE)
    t.append(simple_rows(5))
    with pytest.raises(lakefmt.UnknownColumnError, match="altitude"):
        t.scan(filter="altitude > 3")
    with pytest.raises(lakefmt.UnknownColumnError):
        t.plan_files(lakefmt.col("nope") == 1)
    with pytest.raises(lakefmt.UnknownColumnError):
        t.delete("nope = 1")
    for bad in ["id = 'abc'", "id = 1.5", "ts > 'not a time'", "name > 3", "id = 99999999999999999999999"]:
        with pytest.raises(lakefmt.FilterError):
            t.scan(filter=bad)
    with pytest.raises(lakefmt.FilterError):
        t.scan(filter="id = = 3")
    with pytest.raises(lakefmt.UnknownColumnError):
        t.scan(columns=["id", "nope"])
    assert len(local_catalog.load_table("ns.t").snapshots()) == 1
