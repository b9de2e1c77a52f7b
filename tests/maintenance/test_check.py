"""``check``: a healthy table passes; each kind of damage is reported with its requirement ID (MAINT-14)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lakefmt import manifest_cache
from lakefmt.commit import FileChange
from lakefmt.conversions import to_bytes
from lakefmt.errors import CorruptMetadataError
from lakefmt.maintenance.metadata_schema import metadata_schema, validate_metadata
from lakefmt.manifest_io import read_manifest, read_manifest_list, write_manifest, write_manifest_list
from lakefmt.types import LONG
from tests.conftest import rows
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
    if "path" not in changes:
        t.commit_change(FileChange("append", added=[bad, *files[1:]]))
        return
    # A commit refuses to add a file missing from storage: doctor its manifest after the commit.
    t.commit_change(FileChange("append", added=files))
    snap, meta = t.current_snapshot(), t.metadata
    for m in read_manifest_list(t.io, f"{t.location}/{snap.manifest_list}"):
        if m.added_snapshot_id == snap.snapshot_id:
            location, spec = f"{t.location}/{m.path}", meta.spec_by_id(m.spec_id)
            entries = [replace(e, data_file=bad) if e.data_file.path == files[0].path else e
                       for e in read_manifest(t.io, location, m, spec, meta.schema, inherit=False)]
            t.io.delete(location)
            write_manifest(t.io, location, m.path, entries, spec, meta.schema, snapshot_id=snap.snapshot_id,
                           sequence_number=snap.sequence_number)


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
    report = table.check()
    assert [(v.requirement, v.path) for v in report.violations] == [("LAYOUT-5", manifest.path)]


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


def test_schema_violations_are_reported_with_the_validators_message(table):
    doc = json.loads(table.io.read_bytes(table.metadata_location))
    assert validate_metadata(doc) == []
    rewrite_metadata(table, lambda d: d.update({"format-version": 3}))
    violations = [v for v in table.maintenance.check(level="metadata").violations if v.requirement == "META-2"]
    assert len(violations) == 1 and "format-version must be one of [1, 2]" in violations[0].message
    assert violations[0].path == table.metadata_location
    rewrite_metadata(table, lambda d: d.update({"format-version": 2}) or d["snapshots"][0].update(
        {"manifest-list": "/abs/path"}))
    (violation,) = [v for v in table.maintenance.check(level="metadata").violations if v.requirement == "META-2"]
    assert "manifest-list must match pattern" in violation.message


def damage_manifest(table, how: str) -> str:
    manifest = read_manifest_list(table.io, f"{table.location}/{table.current_snapshot().manifest_list}")[0]
    path = Path(f"{table.location}/{manifest.path}")
    if how == "deleted":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return manifest.path


@pytest.mark.parametrize(("how", "requirement"), [("deleted", "LAYOUT-5"), ("truncated", "READ-10")])
def test_check_reads_storage_not_the_manifest_cache(table, how, requirement):
    """A long-lived process has every manifest cached; check() still sees storage as it is (MAINT-14)."""
    expected = rows(table.scan().to_arrow())  # warms the in-process manifest cache
    damaged = damage_manifest(table, how)
    assert rows(table.scan().to_arrow()) == expected  # the cache answers as if nothing happened
    report = table.maintenance.check(level="metadata")
    assert [(v.requirement, v.path) for v in report.violations] == [(requirement, damaged)], report.format()
    manifest_cache.clear()  # what the README says to do after editing storage by hand
    with pytest.raises(CorruptMetadataError):
        table.scan().to_arrow()
