"""Compaction rules checked on real tables (spec/compaction.md COMPACT-13, COMPACT-27, COMPACT-33)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakefmt
from lakefmt.compaction import RewriteTask, rewrite_group
from tests.compaction.conftest import small_files_table
from tests.conftest import downlinks, rows

NUMBERS = pa.schema([pa.field("id", pa.int64()), pa.field("x", pa.float64())])


def numbers(start: int, n: int, seed: int) -> pa.Table:
    """``n`` rows with ids from ``start`` and random doubles (which compress poorly)."""
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "x": pa.array(np.random.default_rng(seed).random(n), pa.float64())}, schema=NUMBERS)


def complete_outputs(t: lakefmt.Table) -> list[Path]:
    """Compaction outputs in storage whose Parquet footer is written (the file was rolled or closed)."""
    out = []
    for path in Path(t.location, "data").glob("compact-*.parquet"):
        try:
            pq.read_metadata(path)
        except (OSError, pa.ArrowException):
            continue  # still being written
        out.append(path)
    return out


def test_binpack_streams_and_rolls_outputs_at_the_target_size(local_catalog):
    """COMPACT-13: bin-pack writes its first outputs before it has read the last input (it never
    holds the group), and each output but the last is rolled once the bytes written reach the target."""
    t = local_catalog.create_table("ops.numbers", NUMBERS)
    for i in range(10):
        t.append(numbers(i * 40_000, 40_000, seed=i))
    inputs = t.plan_files()
    assert len(inputs) == 10
    before = t.scan().to_arrow()
    target = 600_000
    seen: list[int] = []  # complete outputs in storage each time the rewrite is about to read a file

    def before_each_input() -> float:
        seen.append(len(complete_outputs(t)))
        return 0.0

    result = t.compaction.run("binpack", min_age_seconds=0, target_file_size=target,
                              should_pause=before_each_input)

    assert (result.groups_committed, result.files_rewritten) == (1, 10), result.summary()
    assert len(seen) >= len(inputs) and seen[-1] >= 1, seen  # outputs finished while inputs were still unread
    outputs = sorted(t.refresh().plan_files(), key=lambda f: f.path)
    assert len(outputs) >= 3 and all(f.path.split("/")[-1].startswith("compact-") for f in outputs)
    sizes = [f.file_size_bytes for f in outputs]
    assert all(size >= target for size in sizes[:-1]), sizes
    assert all(size < 2 * target for size in sizes), sizes
    after = t.scan().to_arrow()
    assert after.num_rows == before.num_rows
    by_id = [("id", "ascending")]
    assert after.take(pc.sort_indices(after, sort_keys=by_id)).equals(
        before.take(pc.sort_indices(before, sort_keys=by_id)))


def test_no_more_group_rewrites_at_once_than_max_concurrent_groups(local_catalog):
    """COMPACT-27: with compaction.max-concurrent-groups = 2, two group rewrites overlap and never three."""
    t = small_files_table(local_catalog, appends=4, rows=400, partition_by=("payload_id",),
                          properties={"compaction.max-concurrent-groups": "2"})
    before = t.scan().to_arrow()
    total = len(t.compaction.plan("binpack", min_age_seconds=0, min_input_files=2).groups)
    assert total >= 6
    assert _peak_rewrites(t, "binpack", total, 2) == 2
    assert rows(t.refresh().scan().to_arrow()) == rows(before)


def _peak_rewrites(t, strategy: str, total: int, hold_until: int, **kwargs) -> int:  # type: ignore[no-untyped-def]
    """The most group rewrites a run had going at once; each is held until ``hold_until`` run at once
    (or none is left to start): a run allowing more would show them in the peak."""
    state = {"active": 0, "started": 0, "peak": 0}
    changed = threading.Condition()

    def rewriter(task: RewriteTask):
        with changed:
            state["active"] += 1
            state["started"] += 1
            state["peak"] = max(state["peak"], state["active"])
            changed.notify_all()
            changed.wait_for(lambda: state["active"] >= hold_until or state["started"] == total, timeout=60)
        try:
            return rewrite_group(t.io, task)
        finally:
            with changed:
                state["active"] -= 1
                changed.notify_all()

    result = t.compaction.run(strategy, min_age_seconds=0, min_input_files=2, engine=rewriter, **kwargs)
    assert result.groups_committed == total == state["started"], result.summary()
    return state["peak"]


def test_by_default_binpack_runs_four_groups_at_once_and_sort_two(local_catalog):
    """COMPACT-27: with compaction.max-concurrent-groups unset (0), a bin-pack run has 4 group
    rewrites going at once, a sort run 2; the rows are unchanged."""
    t = small_files_table(local_catalog, appends=4, rows=400, partition_by=("payload_id",))
    assert t.compaction.options().max_concurrent_groups == 0
    before = t.scan().to_arrow()
    total = len(t.compaction.plan("binpack", min_age_seconds=0, min_input_files=2).groups)
    assert total >= 6
    assert _peak_rewrites(t, "binpack", total, 4) == 4
    assert rows(t.refresh().scan().to_arrow()) == rows(before)
    for i in range(4, 8):
        t.append(downlinks(400, seed=i))
    total = len(t.compaction.plan("sort", sort_by=["ts"], min_age_seconds=0, min_input_files=2).groups)
    assert total >= 4
    assert _peak_rewrites(t, "sort", total, 2, sort_by=["ts"]) == 2


def test_an_input_with_other_than_its_record_count_fails_its_group_only(local_catalog):
    """COMPACT-33: an input that does not yield exactly its record_count rows (the file was replaced)
    fails its group, with a vector or without one (even when two swapped files keep the group's total),
    and nothing is committed for it; the group that commits has added-records = deleted-records = the
    live rows of the files it removed."""
    t = small_files_table(local_catalog, appends=6, rows=600)
    t.delete("mission_id IN (0, 1) AND payload_id = 3")  # vectors in missions 0 and 1, none in mission 2
    files = t.plan_files()
    by_mission: dict[int, list] = {}
    for f in files:
        by_mission.setdefault(f.partition[0], []).append(f)
    assert all(f.deletion_vector is not None for f in by_mission[1])
    assert all(f.deletion_vector is None for f in by_mission[2])

    def swap_two(mission: int) -> tuple[str, str]:
        """Swap the contents of two files of the mission that hold different row counts."""
        one = by_mission[mission][0]
        other = next(f for f in by_mission[mission] if f.record_count != one.record_count)
        first, second = Path(t.location, one.path), Path(t.location, other.path)
        contents = first.read_bytes()
        shutil.copyfile(second, first)
        second.write_bytes(contents)
        return one.path, other.path

    replaced = {1: swap_two(1), 2: swap_two(2)}
    live_0 = sum(f.live_record_count for f in by_mission[0])
    assert live_0 < sum(f.record_count for f in by_mission[0])

    result = t.compaction.run("binpack", min_age_seconds=0)

    status = {g.partition: g for g in result.groups}
    assert {p: g.status for p, g in status.items()} == {
        "mission_id=0": "committed", "mission_id=1": "failed", "mission_id=2": "failed"}
    assert "deletion vector covers" in status["mission_id=1"].error
    error = status["mission_id=2"].error  # the group's total alone would not tell; either file is named first
    assert any(f"input {path} holds" in error for path in replaced[2]), error
    t.refresh()
    live = {f.path for f in t.plan_files()}
    for mission in (1, 2):  # nothing committed for the failed groups, and no output left behind
        assert {f.path for f in by_mission[mission]} <= live and set(replaced[mission]) <= live
        assert not list(Path(t.location, "data", f"mission_id={mission}").glob("compact-*"))
    summary = t.snapshot(status["mission_id=0"].snapshot_id).summary
    assert summary["added-records"] == summary["deleted-records"] == str(live_0)
    assert summary["deleted-data-files"] == str(len(by_mission[0]))
