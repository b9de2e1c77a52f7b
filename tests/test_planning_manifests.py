"""Planning decodes manifests a column at a time and caches them; what it plans must not change (READ-5, MAN-2).

The column-wise manifest decoder is compared with a straightforward row-by-row decoding of
the same Parquet rows, on manifests with ADDED, EXISTING and DELETED entries, null partition
values and null bounds. Planning is compared with evaluating every live
entry directly, with and without partition predicates, from a cold cache and a warm one.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.deletion_vectors import DeletionVector
from lakefmt import manifest_cache
from lakefmt.conversions import to_physical
from lakefmt.evaluators import MetricsEvaluator, PartitionEvaluator, to_arrow_expression
from lakefmt.expressions import bind
from lakefmt.manifest import DataFile, EntryStatus, ManifestEntry
from lakefmt.manifest_io import _read_parquet, read_manifest, read_manifest_list

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def rows(day: int, n: int, offset: int) -> pa.Table:
    return pa.table({
        "ts": pa.array([None if i % 17 == 0 else T0 + timedelta(days=day, minutes=i) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "device": pa.array([(i * 37 + offset) % 50 for i in range(n)], pa.int64()),
        "kind": pa.array([None if day == 2 else f"k{i % 3}" for i in range(n)], pa.string()),
        "v": pa.array([float(i + offset) for i in range(n)]),
    })


@pytest.fixture
def table(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    t = local_catalog.create_table("db.plan", rows(0, 1, 0).schema, partition_by=["day(ts)", "bucket(4, device)"])
    for day in range(4):
        t.append(rows(day, 60, day))
    t.set_property("write.delete.mode", "copy-on-write")
    t.delete("device = 3")  # rewrites files: DELETED and EXISTING entries
    t.set_property("write.delete.mode", "merge-on-read")
    t.delete("device = 4 AND v < 100")  # deletion vectors in EXISTING entries (DV-5)
    t.append(rows(5, 40, 9))
    return t


def row_wise(io, location, manifest, spec, schema) -> list[ManifestEntry]:
    """The reference: one dict per row (``to_pylist``), as the format describes the columns (MAN-2)."""
    types = [t for _, t in spec.partition_type(schema)]
    out = []
    for r in _read_parquet(io, location, "manifest").to_pylist():
        part = r.get("partition") or {}
        f = DataFile(r["file_path"], tuple(to_physical(t, part.get(pf.name)) for pf, t in zip(spec.fields, types)),
                     r["record_count"], r["file_size_bytes"], spec.spec_id, r["file_format"],
                     dict(r["value_counts"] or ()), dict(r["null_value_counts"] or ()),
                     dict(r["lower_bounds"] or ()), dict(r["upper_bounds"] or ()), r.get("sort_order_id"),
                     DeletionVector(**r["deletion_vector"]) if r.get("deletion_vector") else None)
        e = ManifestEntry(EntryStatus(r["status"]), f, r["snapshot_id"], r["sequence_number"])
        out.append(e.inherit(manifest.added_snapshot_id, manifest.sequence_number))
    return out


def manifests(t: lakefmt.Table):
    md = t.metadata
    for snapshot in md.snapshots:
        for m in read_manifest_list(t.io, f"{md.location}/{snapshot.manifest_list}"):
            yield m, md.spec_by_id(m.spec_id)


def same_entries(a: list[ManifestEntry], b: list[ManifestEntry]) -> bool:
    def values(f: DataFile) -> list:  # every field, statistics included (decoded on first access)
        return [getattr(f, field.name) for field in dataclasses.fields(f)]

    return [(e.status, e.snapshot_id, e.sequence_number, values(e.data_file)) for e in a] == \
           [(e.status, e.snapshot_id, e.sequence_number, values(e.data_file)) for e in b]


def test_column_wise_decoding_equals_row_wise(table):
    statuses = set()
    for m, spec in manifests(table):
        location = f"{table.metadata.location}/{m.path}"
        want = row_wise(table.io, location, m, spec, table.metadata.schema)
        statuses |= {e.status for e in want}
        assert same_entries(read_manifest(table.io, location, m, spec, table.metadata.schema), want)
        manifest_cache.clear()
        assert same_entries(manifest_cache.read_entries(table.io, location, m, spec, table.metadata.schema), want)
        assert same_entries(manifest_cache.read_entries(table.io, location, m, spec, table.metadata.schema), want)
    assert statuses == set(EntryStatus)
    nulls = [e.data_file.partition for m, spec in manifests(table)
             for e in row_wise(table.io, f"{table.metadata.location}/{m.path}", m, spec, table.metadata.schema)]
    assert any(None in p for p in nulls) and {len(p) for p in nulls} == {2}


def reference_plan(t: lakefmt.Table, text: str | None) -> set[str]:
    md = t.metadata
    schema = md.schema
    bound = bind(text, schema)
    metrics = MetricsEvaluator(bound, schema)
    out = set()
    for m in read_manifest_list(t.io, f"{md.location}/{md.current_snapshot.manifest_list}"):
        spec = md.spec_by_id(m.spec_id)
        partitions = PartitionEvaluator(bound, spec, schema)
        for e in row_wise(t.io, f"{md.location}/{m.path}", m, spec, schema):
            if e.is_live and partitions.might_match(e.data_file.partition) and metrics.might_match(e.data_file):
                out.add(e.data_file.path)
    return out


@pytest.mark.parametrize("text", [
    None,
    "ts >= '2026-01-02T00:00:00+00:00' AND ts < '2026-01-03T00:00:00+00:00'",
    "device = 7",
    "device = 7 AND ts < '2026-01-02T00:00:00+00:00'",
    "kind = 'k1'",
    "kind IS NULL OR ts IS NULL",
    "v > 50",
])
def test_planned_files_equal_evaluating_every_entry(table, text):
    want = reference_plan(table, text)
    for _ in range(2):
        manifest_cache.clear()
        cold = table.scan(filter=text).plan()
        warm = table.scan(filter=text).plan()
        assert {f.path for f in cold.files} == {f.path for f in warm.files} == want
        assert len(cold.files) == len(want)  # no file planned twice
    schema = table.metadata.schema
    everything = table.scan().to_arrow()
    expected = everything.filter(to_arrow_expression(bind(text, schema), lambda i: schema.field_by_id(i).name))
    assert sorted(table.scan(filter=text).to_arrow().to_pylist(), key=repr) == sorted(expected.to_pylist(), key=repr)
