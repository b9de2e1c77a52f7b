"""Reachability: one normal form for paths (MAINT-2) and each file read once (MAINT-1)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import lakefmt.maintenance.reachability as reachability_module
from lakefmt.maintenance import reachable_only_from, relativize, table_location, table_reachability
from lakefmt.manifest_io import read_manifest_list
from tests.maintenance.helpers import all_files, batch, make_table


@pytest.mark.parametrize(("location", "path", "expected"), [
    ("s3://b/wh/t-1", "data/x.parquet", "data/x.parquet"),
    ("s3a://b/wh/t-1", "s3://b/wh/t-1/data/x.parquet", "data/x.parquet"),
    ("s3://b/wh/t-1", "s3n://b/wh/t-1/data/x.parquet", "data/x.parquet"),
    ("s3://b/wh/t-1/", "s3a://b/wh/t-1/metadata/v000001-a.metadata.json", "metadata/v000001-a.metadata.json"),
    ("/wh/t-1", "file:///wh/t-1/data/a/b.parquet", "data/a/b.parquet"),
    ("file:///wh/t-1", "/wh/t-1/data//./b.parquet", "data/b.parquet"),
    ("/wh/t-1", "data/p=1/../p=2/f.parquet", "data/p=2/f.parquet"),
    ("/wh/t-1", "../t-2/data/f.parquet", None),            # climbs out of the location
    ("/wh/t-1", "/wh/t-10/data/f.parquet", None),          # a sibling that shares the prefix
    ("s3://b/wh/t-1", "s3://other/wh/t-1/data/f", None),   # another bucket
    ("s3://b/wh/t-1", "/wh/t-1/data/f", None),             # another store
])
def test_one_normal_form_relative_to_the_table_location(location, path, expected):
    assert relativize(location, path) == expected


def test_table_location_follows_the_metadata_file():
    assert table_location("s3a://b/wh/ns/t-1/metadata/v000003-x.metadata.json") == "s3://b/wh/ns/t-1"


def test_reachability_covers_the_tree_and_excludes_deleted_entries(catalog):
    t = make_table(catalog)
    t.append(batch(0, 9))
    removed = {f.path for f in t.plan_files("part = 'a'")}
    t.delete("part = 'a'")
    r = t.maintenance.reachable_files()
    # Every file of the table is reachable: the delete's parent still reads part=a.
    assert set(all_files(t)) == {p for p in all_files(t) if p in r}
    assert removed <= set(r.data_files)
    assert r.outside == frozenset()
    # From the current snapshot alone, the deleted files are not reachable (MAINT-1).
    current = table_reachability(t.io, t.metadata, t.metadata_location, snapshots=[t.current_snapshot()])
    assert not removed & set(current.data_files)
    only_old = reachable_only_from(t.io, [t.snapshot(t.current_snapshot().parent_snapshot_id)], current)
    assert set(only_old.data_files) == removed
    assert all(size > 0 for size in r.data_files.values()) and r.data_bytes == sum(r.data_files.values())


def test_each_manifest_list_and_manifest_is_read_once(local_catalog, monkeypatch):
    t = make_table(local_catalog)
    for i in range(12):
        t.append(batch(i * 3, 3))  # 12 snapshots sharing manifests
    reads: Counter[str] = Counter()
    real = reachability_module.read_columns

    def counting(io, location, columns, *, what):
        reads[location] += 1
        return real(io, location, columns, what=what)

    monkeypatch.setattr(reachability_module, "read_columns", counting)
    r = t.maintenance.reachable_files()
    assert len(r.manifest_lists) == 12
    distinct = {m.path for s in t.snapshots()
                for m in read_manifest_list(t.io, f"{t.location}/{s.manifest_list}")}
    assert len(r.manifests) == len(distinct) < sum(
        len(read_manifest_list(t.io, f"{t.location}/{s.manifest_list}")) for s in t.snapshots())
    assert set(reads.values()) == {1} and len(reads) == 12 + len(distinct)


@given(st.lists(st.text(alphabet="ab/.:%=\n", max_size=8), max_size=4))
def test_paths_taken_as_they_are_need_no_normalizing(paths):
    """The quick screen of _collect lets a path through unchanged only if relativize would not change it."""
    joined = "\n" + "\n".join(paths) + "\n"
    if paths and not any(marker in joined for marker in reachability_module._UNUSUAL):
        for path in paths:
            assert relativize("s3://b/t", path) == path
