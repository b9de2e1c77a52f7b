"""The compaction planner, without I/O (spec/compaction.md COMPACT-3..COMPACT-11)."""

from __future__ import annotations

import pytest

from lakefmt.compaction import CompactionOptions, PlannerFile, plan_groups, resolve_options
from lakefmt.compaction.planner import pack_bins
from lakefmt.errors import ValidationError
from lakefmt.manifest import DataFile

MiB = 1024 * 1024
GiB = 1024 * MiB
NOW = 1_800_000_000_000  # ms
HOUR = 3_600_000


def df(name: str, size: int, partition: tuple = (1,), *, spec_id: int = 0, sort_order_id: int | None = None,
       rows: int = 100) -> DataFile:
    return DataFile(path=f"data/{name}.parquet", partition=partition, record_count=rows, file_size_bytes=size,
                    spec_id=spec_id, sort_order_id=sort_order_id)


def pf(data_file: DataFile, *, age_ms: int = 2 * HOUR, compacted: bool = False, in_scope: bool = True) -> PlannerFile:
    return PlannerFile(data_file, added_ms=NOW - age_ms, compacted=compacted, in_scope=in_scope)


OPTS = CompactionOptions()  # 128 MiB target, 96 MiB threshold, 5 files, 1 GiB groups, 1 h min age


def test_skew_big_file_left_alone():
    """COMPACT-4: one 8 GB file beside thirty 4 MB files: only the thirty are rewritten."""
    files = [pf(df("big", 8 * GiB))] + [pf(df(f"s{i:02d}", 4 * MiB)) for i in range(30)]
    plan = plan_groups(files, OPTS, strategy="binpack", now_ms=NOW)
    [group] = plan.groups
    assert len(group.files) == 30
    assert all(f.file_size_bytes == 4 * MiB for f in group.files)
    [part] = plan.partitions
    assert [(s.data_file.path, s.reason) for s in part.skipped] == [("data/big.parquet", "too-big")]
    assert "too-big" in plan.explain()


def test_too_few_files():
    """COMPACT-6: fewer than min-input-files candidates: the partition is skipped."""
    files = [pf(df(f"s{i}", MiB)) for i in range(4)]
    plan = plan_groups(files, OPTS, strategy="binpack", now_ms=NOW)
    assert plan.groups == ()
    assert plan.partitions[0].reason == "too-few-files"
    assert {s.reason for s in plan.skipped} == {"too-few-files"}
    assert plan_groups(files, CompactionOptions(min_input_files=4), strategy="binpack", now_ms=NOW).groups


def test_too_young_partition_is_skipped_whole():
    """COMPACT-5: a partition whose newest ingested file is younger than min age is still open."""
    old = [pf(df(f"old{i}", MiB, (1,))) for i in range(6)]
    young = [pf(df(f"y{i}", MiB, (2,))) for i in range(5)] + [pf(df("fresh", MiB, (2,)), age_ms=60_000)]
    plan = plan_groups(old + young, OPTS, strategy="binpack", now_ms=NOW)
    by_partition = {p.partition: p for p in plan.partitions}
    assert len(by_partition[(1,)].groups) == 1
    assert by_partition[(2,)].groups == () and by_partition[(2,)].reason == "too-young"
    assert {s.reason for s in by_partition[(2,)].skipped} == {"too-young"}
    # 0 disables the check; compaction outputs never make a partition young.
    assert len(plan_groups(old + young, CompactionOptions(min_age_seconds=0), strategy="binpack",
                           now_ms=NOW).groups) == 2
    compacted = [pf(df(f"c{i}", MiB, (3,)), age_ms=1, compacted=True) for i in range(6)]
    assert len(plan_groups(compacted, OPTS, strategy="binpack", now_ms=NOW).groups) == 1


def test_most_fragmented_partition_first():
    """COMPACT-9: partitions with more files to rewrite come first."""
    files = ([pf(df(f"a{i}", MiB, (1,))) for i in range(6)] + [pf(df(f"b{i}", MiB, (2,))) for i in range(20)]
             + [pf(df(f"c{i}", MiB, (3,))) for i in range(11)])
    plan = plan_groups(files, OPTS, strategy="binpack", now_ms=NOW)
    assert [p.partition for p in plan.partitions] == [(2,), (3,), (1,)]
    assert [g.group_id for g in plan.groups] == ["g0001", "g0002", "g0003"]


def test_never_mixes_partitions_or_specs():
    """COMPACT-3: groups hold one partition of one spec."""
    files = ([pf(df(f"a{i}", MiB, (1,))) for i in range(5)] + [pf(df(f"b{i}", MiB, (1,), spec_id=1)) for i in range(5)]
             + [pf(df(f"c{i}", MiB, (2,))) for i in range(5)])
    plan = plan_groups(files, OPTS, strategy="binpack", now_ms=NOW)
    assert len(plan.groups) == 3
    for g in plan.groups:
        assert {(f.spec_id, f.partition) for f in g.files} == {(g.spec_id, g.partition)}


def test_max_group_size_splits_groups():
    """COMPACT-7: no group exceeds max-group-size; packing is balanced."""
    files = [pf(df(f"s{i:02d}", 10 * MiB)) for i in range(25)]
    plan = plan_groups(files, CompactionOptions(max_group_size=100 * MiB), strategy="binpack", now_ms=NOW)
    sizes = sorted(g.input_bytes for g in plan.groups)
    assert sizes == [80 * MiB, 80 * MiB, 90 * MiB]
    assert sum(len(g.files) for g in plan.groups) == 25
    assert len({f.path for g in plan.groups for f in g.files}) == 25


def test_pack_bins_respects_bound_and_is_deterministic():
    sizes = [70, 60, 50, 40, 30, 20, 10, 5, 5, 5]
    files = [pf(df(f"f{i}", s)) for i, s in enumerate(sizes)]
    bins = pack_bins(files, 100)
    assert all(sum(m.data_file.file_size_bytes for m in b) <= 100 for b in bins)
    assert sorted(m.data_file.path for b in bins for m in b) == sorted(m.data_file.path for m in files)
    assert [[m.data_file.path for m in b] for b in bins] == [[m.data_file.path for m in b]
                                                             for b in pack_bins(list(reversed(files)), 100)]


def test_already_compacted_single_sorted_file_dropped():
    """COMPACT-8: a single file already sorted by the target order is not rewritten alone."""
    opts = CompactionOptions(min_input_files=1)
    sorted_file = [pf(df("sorted", MiB, sort_order_id=1))]
    plan = plan_groups(sorted_file, opts, strategy="sort", now_ms=NOW, target_sort_order_id=1)
    assert plan.groups == () and plan.partitions[0].reason == "already-compacted"
    # Sorted by another order (or unsorted), it is rewritten to sort it.
    assert len(plan_groups([pf(df("u", MiB))], opts, strategy="sort", now_ms=NOW,
                           target_sort_order_id=1).groups) == 1
    # binpack never rewrites a file alone; a compaction output alone is already compacted.
    assert plan_groups([pf(df("u", MiB))], opts, strategy="binpack", now_ms=NOW).groups == ()
    plan = plan_groups([pf(df("c", MiB), compacted=True)], opts, strategy="zorder", now_ms=NOW)
    assert plan.groups == () and plan.partitions[0].reason == "already-compacted"


def test_filter_scope():
    """COMPACT-10: files out of scope are never rewritten but keep a partition young."""
    files = [pf(df(f"in{i}", MiB)) for i in range(5)] + [pf(df("out", MiB), age_ms=1, in_scope=False)]
    assert plan_groups(files, OPTS, strategy="binpack", now_ms=NOW).partitions[0].reason == "too-young"
    files[-1] = pf(df("out", MiB), in_scope=False)
    [group] = plan_groups(files, OPTS, strategy="binpack", now_ms=NOW).groups
    assert "data/out.parquet" not in {f.path for f in group.files}
    assert plan_groups([pf(df("x", MiB), in_scope=False)], OPTS, strategy="binpack", now_ms=NOW).partitions == ()


def test_every_file_is_accounted_for():
    """COMPACT-11: each in-scope file is in a group or has a reason."""
    files = ([pf(df("big", 100 * MiB))] + [pf(df(f"s{i}", MiB)) for i in range(7)]
             + [pf(df(f"y{i}", MiB, (2,)), age_ms=1) for i in range(3)] + [pf(df("lone", MiB, (3,)))])
    plan = plan_groups(files, OPTS, strategy="binpack", now_ms=NOW)
    grouped = {f.path for g in plan.groups for f in g.files}
    skipped = {s.data_file.path for s in plan.skipped}
    assert grouped | skipped == {m.data_file.path for m in files} and not grouped & skipped
    assert plan.skipped_by_reason() == {"too-big": 1, "too-young": 3, "too-few-files": 1}


def test_options_from_properties_and_overrides():
    """COMPACT-1: properties with defaults; the write target is the fallback; bad values are refused."""
    assert resolve_options({}).target_file_size == 128 * MiB
    assert resolve_options({"write.target-file-size-bytes": "1000"}).target_file_size == 1000
    opts = resolve_options({"compaction.target-file-size-bytes": "2000", "write.target-file-size-bytes": "1000",
                            "compaction.min-input-files": "3"}, min_input_files=7)
    assert (opts.target_file_size, opts.min_input_files, opts.small_file_threshold) == (2000, 7, 1500)
    with pytest.raises(ValidationError, match="compaction.small-file-threshold-ratio"):
        resolve_options({"compaction.small-file-threshold-ratio": "2"})
    with pytest.raises(ValidationError, match="compaction.quiet-windows"):
        resolve_options({"compaction.quiet-windows": "9-5"})
    with pytest.raises(ValidationError, match="unknown compaction option"):
        resolve_options({}, colour="blue")
