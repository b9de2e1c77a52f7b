"""Planning many files: manifests merged by size tier on append, statistics decoded on first use.

Appends merge small manifests by tier (COMMIT-22) and what a scan plans must not change:
every live file once (READ-5, READ-9), old snapshots as they were (READ-2), deletion vectors
on the planned files (DV-5, READ-14). A planned file's statistics are decoded from its
manifest only when asked for, and equal what the manifest holds (MAN-6, MAN-7).
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import manifest_cache
from lakefmt.errors import CorruptMetadataError
from lakefmt.manifest import DataFile, EntryStatus, ManifestFile, merge_groups
from lakefmt.manifest_io import read_manifest, read_manifest_list
from tests.conftest import rows

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
SCHEMA = pa.schema([pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("id", pa.int64()),
                    pa.field("kind", pa.string())])


def batch(i: int, n: int = 3) -> pa.Table:
    return pa.table({"ts": pa.array([T0 + timedelta(days=i % 4, minutes=j) for j in range(n)],
                                    pa.timestamp("us", tz="UTC")),
                     "id": pa.array([i * 100 + j for j in range(n)], pa.int64()),
                     "kind": pa.array([f"k{(i + j) % 3}" for j in range(n)])}, schema=SCHEMA)


def manifest_rows(t: lakefmt.Table, snapshot=None) -> list[ManifestFile]:
    snap = snapshot or t.metadata.current_snapshot
    return read_manifest_list(t.io, f"{t.location}/{snap.manifest_list}")


def tier(n: int, base: int) -> int:
    t = 0
    while n >= base:
        n //= base
        t += 1
    return t


def fake(path: str, live: int) -> ManifestFile:
    return ManifestFile(path, 1000, 0, 1, 1, live, 0, 0, live, 0, 0)


# -- COMMIT-22: which manifests an append merges -----------------------------------------------------------

def test_merge_groups_merges_a_full_tier_and_cascades_in_one_write():
    # spec: COMMIT-22
    ones = [fake(f"one{i}", 1) for i in range(3)]  # tier 0 of base 3, one more than k = 2
    assert [[m.path for m in g] for g in merge_groups(ones, 2)] == [["one0", "one1", "one2"]]
    assert merge_groups(ones[:2], 2) == []  # a tier of k manifests stays
    # Three of tier 0 make 3 entries (tier 1), which joins two of tier 1: the cascade is one group of five.
    threes = [fake("three0", 3), fake("three1", 4)]
    groups = merge_groups(ones + threes, 2)
    assert len(groups) == 1 and {m.path for m in groups[0]} == {m.path for m in ones + threes}
    assert merge_groups(ones + threes, 0) == []  # 0: never merge
    # Different tiers of fewer than k + 1 each are left alone.
    assert merge_groups([fake("a", 1), fake("b", 1), fake("c", 5), fake("d", 8), fake("e", 30)], 2) == []


def test_appends_merge_by_tier_and_plan_every_file_once(local_catalog: lakefmt.Catalog):
    # spec: COMMIT-22, COMMIT-8, MAN-10, ML-6, READ-5, READ-9
    t = local_catalog.create_table("plan.tiers", SCHEMA, partition_by=["day(ts)"],
                                   properties={"commit.manifest.min-count-to-merge": "2"})
    counts, snapshots = [], []
    for i in range(20):
        t.append(batch(i))
        snapshots.append(t.current_snapshot())
        ms = manifest_rows(t)
        counts.append(len(ms))
        current = t.current_snapshot().snapshot_id
        own = [m for m in ms if m.added_snapshot_id == current and m.added_files_count]
        assert len(own) == 1
        per_tier: dict[int, int] = {}
        for m in ms:
            if m is not own[0]:
                per_tier[tier(m.live_files_count, 3)] = per_tier.get(tier(m.live_files_count, 3), 0) + 1
        assert all(n <= 2 for n in per_tier.values()), per_tier  # at most k per tier besides the append's own
        assert sum(m.live_files_count for m in ms) == i + 1
    assert max(counts) <= 7 and counts[:3] == [1, 2, 3] and counts[3] == 2
    merged = [m for m in manifest_rows(t) if m.existing_files_count]
    assert merged
    for m in merged:
        entries = read_manifest(t.io, f"{t.location}/{m.path}", m, t.metadata.spec_by_id(m.spec_id),
                                t.metadata.schema, inherit=False)
        assert all(e.status == EntryStatus.EXISTING and e.snapshot_id and e.sequence_number for e in entries)
    plan = t.scan().plan()
    assert len(plan.tasks) == len({task.location for task in plan.tasks}) == 20
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(i) for i in range(20)]))
    # READ-2: an old snapshot plans the files it had, whatever was merged since
    for i in (0, 4, 11):
        old = t.scan(snapshot_id=snapshots[i].snapshot_id)
        assert rows(old.to_arrow()) == rows(pa.concat_tables([batch(j) for j in range(i + 1)]))
        assert len(old.plan().tasks) == i + 1


def test_default_merging_keeps_the_list_short(local_catalog: lakefmt.Catalog):
    # spec: COMMIT-22, META-12
    t = local_catalog.create_table("plan.default", SCHEMA)
    assert "commit.manifest.min-count-to-merge" not in t.metadata.properties  # the default, 10
    for i in range(25):
        t.append(batch(i, 1))
    ms = manifest_rows(t)
    assert len(ms) < 15 and sum(m.live_files_count for m in ms) == 25
    assert len(t.scan().plan().tasks) == 25


# -- statistics decoded on first use (MAN-6, MAN-7) ---------------------------------------------------------

@pytest.fixture
def table(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    t = local_catalog.create_table("plan.stats", SCHEMA, partition_by=["day(ts)"], format_version=2)
    for i in range(4):
        t.append(batch(i, 5))
    t.delete("id = 101 OR id = 302")  # deletion vectors (DV-5)
    return t


def fields_of(f: DataFile) -> list:
    return [getattr(f, field.name) for field in dataclasses.fields(f)]


def test_planned_statistics_equal_the_manifest(table):
    # spec: MAN-6, MAN-7, READ-5
    want = {}
    for m in manifest_rows(table):
        for e in read_manifest(table.io, f"{table.location}/{m.path}", m, table.metadata.spec_by_id(m.spec_id),
                               table.metadata.schema):
            if e.is_live:
                want[e.data_file.path] = fields_of(e.data_file)
                assert e.data_file.lower_bounds and e.data_file.value_counts
    manifest_cache.clear()
    files = table.scan().plan_files()
    assert all("value_counts" not in vars(f) for f in files)  # not decoded by planning
    assert {f.path: fields_of(f) for f in files} == want
    assert all("_stats" not in vars(f) and "_stats_row" not in vars(f) for f in files)


def test_statistics_decode_once_under_threads_and_survive_pickling_and_replace(table):
    # spec: MAN-6, MAN-7
    manifest_cache.clear()
    files = table.scan().plan_files()
    start = threading.Barrier(4)
    seen: list[list] = []

    def read_all() -> None:
        start.wait()
        seen.append([fields_of(f) for f in files])

    threads = [threading.Thread(target=read_all) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(seen) == 4 and all(s == seen[0] for s in seen)

    manifest_cache.clear()
    fresh = table.scan().plan_files()
    copies = pickle.loads(pickle.dumps(fresh))  # what a Spark task receives: every field, no decoder
    assert [fields_of(f) for f in copies] == seen[0]
    assert all("_stats" not in vars(f) for f in copies)
    moved = dataclasses.replace(fresh[0], sort_order_id=7)  # reads every field, statistics included
    assert moved.sort_order_id == 7 and fields_of(moved)[:10] == fields_of(fresh[0])[:10]
    with pytest.raises(AttributeError):
        fresh[0].no_such_field  # noqa: B018


def test_planned_files_carry_their_deletion_vectors(table):
    # spec: DV-5, READ-14
    manifest_cache.clear()
    files = table.scan().plan_files()
    with_vectors = [f for f in files if f.deletion_vector is not None]
    assert len(with_vectors) == 2 and all(f.deleted_record_count == 1 for f in with_vectors)
    assert table.scan().count() == 18
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == sorted(
        i * 100 + j for i in range(4) for j in range(5) if i * 100 + j not in (101, 302))


def test_a_filtered_plan_decodes_the_statistics_it_prunes_with(table):
    # spec: READ-4, READ-5, EXPR-8
    manifest_cache.clear()
    planned = table.scan(filter="id >= 300").plan_files()
    assert len(planned) == 1 and planned[0].lower_bounds  # the other files' id bounds are below 300
    everything = table.scan().to_arrow()
    assert rows(table.scan(filter="id >= 300").to_arrow()) == rows(
        everything.filter(pa.compute.greater_equal(everything["id"], 300)))


def test_the_cache_is_keyed_by_path_and_never_stale(table):
    # spec: LAYOUT-4, READ-1
    first = {f.path for f in table.scan().plan_files()}
    table.append(batch(9, 2))
    after = {f.path for f in table.scan().plan_files()}  # warm cache, new manifest list
    assert first < after and len(after) == len(first) + 1
    old = table.scan(snapshot_id=table.metadata.snapshots[-2].snapshot_id)
    assert {f.path for f in old.plan_files()} == first


def test_a_statistics_column_of_the_wrong_type_fails_the_plan(table):
    # spec: READ-10, MAN-2
    m = next(m for m in manifest_rows(table) if m.live_files_count)
    location = f"{table.location}/{m.path}"
    data = pq.read_table(location)
    broken = data.set_column(data.column_names.index("lower_bounds"), "lower_bounds",
                             pa.array(["x"] * data.num_rows))
    pq.write_table(broken.replace_schema_metadata(data.schema.metadata), location)
    manifest_cache.clear()  # what a fresh process would see
    with pytest.raises(CorruptMetadataError, match="lower_bounds.*not a map"):
        table.scan().plan()
