"""``check``: a healthy table passes; each kind of damage is reported with its requirement ID (MAINT-14)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from lakefmt import manifest_cache
from lakefmt.commit import FileChange
from lakefmt.conversions import to_bytes
from lakefmt.maintenance.jsonschema_lite import metadata_schema, validate_metadata
from lakefmt.manifest_io import read_manifest_list, write_manifest_list
from lakefmt.types import LONG
from tests.maintenance.helpers import batch, make_table

SPEC = Path(__file__).resolve().parents[2] / "spec"
PACKAGE = Path(__file__).resolve().parents[2] / "lakefmt"


def requirements(table) -> set[str]:
    manifest_cache.clear()  # the damage below is done behind the cache's back
    return {v.requirement for v in table.check().violations}


@pytest.fixture
def table(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 30))
    t.append(batch(30, 30))
    t.delete("id < 5")
    return t


def test_a_healthy_table_passes_at_every_level(catalog):
    t = make_table(catalog)
    t.append(batch(0, 30))
    t.delete("id < 5")
    with t.update_schema() as u:
        u.add_column("extra", "string")
    t.append(batch(100, 10))
    for level in ("metadata", "files", "full"):
        report = t.maintenance.check(level=level)
        assert report.ok, report.format()
    report = t.check()
    assert (report.snapshots, report.manifest_lists) == (3, 3) and report.data_files > 0
    assert "OK" in report.format()


def append_doctored(t, **changes) -> None:
    files = t.write_data_files(batch(1000, 12))
    bad = replace(files[0], **changes)
    t.commit_change(FileChange("append", added=[bad, *files[1:]]))


@pytest.mark.parametrize(("changes", "requirement"), [
    ({"record_count": 999}, "WRITE-6"),
    ({"file_size_bytes": 5}, "WRITE-6"),
    ({"value_counts": {1: 77}}, "MAN-6"),
    ({"lower_bounds": {1: to_bytes(LONG, 1005)}}, "MAN-7"),  # above the smallest id (1000 or so)
    ({"upper_bounds": {1: to_bytes(LONG, 1000)}}, "MAN-7"),  # below the largest id
    ({"partition": ("zzz",)}, "PART-9"),
    ({"path": "data/part=a/does-not-exist.parquet"}, "LAYOUT-5"),
    ({"path": "/elsewhere/file.parquet"}, "MAN-8"),
])
def test_damaged_manifest_entries_are_reported(table, changes, requirement):
    append_doctored(table, **changes)
    found = requirements(table)
    assert requirement in found, table.check().format()


def test_a_file_live_twice_is_reported(table):
    again = table.plan_files()[0]
    table.commit_change(FileChange("append", added=[again]))
    assert "READ-9" in requirements(table)


def test_a_deleted_data_file_is_reported(table):
    victim = table.plan_files()[0]
    table.io.delete(f"{table.location}/{victim.path}")
    report = table.check()
    assert [v.requirement for v in report.violations] == ["LAYOUT-5"]
    assert report.violations[0].path == victim.path and not report.ok


def test_manifest_list_counts_are_checked(table):
    location = f"{table.location}/{table.current_snapshot().manifest_list}"
    rows = read_manifest_list(table.io, location)
    rows[0] = replace(rows[0], existing_files_count=rows[0].existing_files_count + 3)
    table.io.delete(location)
    write_manifest_list(table.io, location, rows)
    assert "ML-3" in requirements(table)


def test_a_missing_manifest_is_reported(table):
    manifest = read_manifest_list(table.io, f"{table.location}/{table.current_snapshot().manifest_list}")[0]
    table.io.delete(f"{table.location}/{manifest.path}")
    assert "READ-10" in requirements(table)


def rewrite_metadata(table, change) -> None:
    doc = json.loads(table.io.read_bytes(table.metadata_location))
    change(doc)
    table.io.delete(table.metadata_location)
    table.io.write_bytes(table.metadata_location, json.dumps(doc).encode())


def test_metadata_against_the_json_schema(table):
    rewrite_metadata(table, lambda d: d.update({"bogus": 1}))
    assert "META-2" in requirements(table)


def test_location_and_sequence_numbers(table):
    def damage(doc):
        doc["location"] = "/somewhere/else"
        doc["snapshots"][1]["sequence-number"] = doc["snapshots"][0]["sequence-number"]

    rewrite_metadata(table, damage)
    assert {"LAYOUT-3", "SNAP-3"} <= requirements(table)


def test_dangling_references(table):
    rewrite_metadata(table, lambda d: d.update({"current-schema-id": 42}))
    assert "META-3" in requirements(table)


def test_the_packaged_schema_is_the_spec_schema():
    packaged = (PACKAGE / "table-metadata.schema.json").read_bytes()
    assert packaged == (SPEC / "table-metadata.schema.json").read_bytes()
    assert metadata_schema() == json.loads((SPEC / "table-metadata.schema.json").read_text())


def test_the_built_in_validator_agrees_with_jsonschema(table):
    pytest.importorskip("jsonschema")
    good = json.loads(table.io.read_bytes(table.metadata_location))
    mutations = [
        lambda d: d.update({"format-version": 2}),
        lambda d: d.pop("schemas"),
        lambda d: d.update({"extra": True}),
        lambda d: d["snapshots"][0].update({"manifest-list": "/abs/path"}),
        lambda d: d["snapshots"][0].update({"manifest-list": "metadata/../x"}),
        lambda d: d["snapshots"][0]["summary"].pop("total-records"),
        lambda d: d.update({"current-snapshot-id": 0}),
        lambda d: d.update({"current-snapshot-id": None}),
        lambda d: d.update({"sort-orders": [{"order-id": 1, "fields": []}]}),
        lambda d: d["schemas"][0]["fields"][0].update({"type": "varchar"}),
        lambda d: d["metadata-log"].append({"timestamp-ms": 1, "metadata-file": "s3://b/x"}),
        lambda d: d.update({"last-sequence-number": True}),
        lambda d: d.update({"table-uuid": "NOT-A-UUID"}),
    ]
    assert validate_metadata(good, use_jsonschema=False) == validate_metadata(good, use_jsonschema=True) == []
    for mutate in mutations:
        doc = copy.deepcopy(good)
        mutate(doc)
        lite = validate_metadata(doc, use_jsonschema=False)
        full = validate_metadata(doc, use_jsonschema=True)
        assert bool(lite) == bool(full), (lite, full)
