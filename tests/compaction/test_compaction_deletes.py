"""Compaction of tables with deletion vectors (spec/compaction.md COMPACT-32..COMPACT-35, ROWDEL-4).

Rewritten files hold exactly the live rows, no deletion vector survives on a rewritten
file, a file with many deleted rows is a candidate on its own, and a delete that lands on
a group's input before the group commits is never undone. Deletes are real merge-on-read
deletes (``t.delete``); the race runs in a real second process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.compaction import CompactionOptions, PlannerFile, plan_groups
from lakefmt.compaction.runner import plan_table, run_plan
from lakefmt.deletion_vectors import DeletionVector
from lakefmt.errors import ValidationError
from lakefmt.manifest import DataFile
from tests.compaction.conftest import run_python, small_files_table
from tests.conftest import rows

MiB = 1024 * 1024
NOW = 1_800_000_000_000
PRELUDE = """
import json
import lakefmt
t = lakefmt.Catalog({warehouse!r}).load_table("artemis.downlinks")
"""


def delete_some(t: lakefmt.Table) -> None:
    """Two merge-on-read deletes; the second adds positions to vectors the first wrote."""
    t.delete("payload_id = 3")
    t.delete("sensor_kind = 'cam' AND mission_id = 1")
    assert any(f.deletion_vector is not None for f in t.plan_files())


def vector_paths(t: lakefmt.Table) -> set[str]:
    t.refresh()
    return {f.deletion_vector.path for f in t.plan_files() if f.deletion_vector is not None}


def stored_rows(t: lakefmt.Table) -> pa.Table:
    """The rows physically in the live data files, ignoring any deletion vector."""
    names = t.scan().to_arrow().column_names
    return pa.concat_tables([pq.read_table(f"{t.location}/{f.path}").select(names) for f in t.plan_files()])


@pytest.mark.parametrize("strategy, layout, method", [
    ("binpack", {"verify": "read-back"}, "stream"),
    ("sort", {}, "merge"),  # inputs sorted by the table's order: streaming merge
    ("sort", {"sort_by": ["value"]}, "memory-sort"),
    ("zorder", {"columns": ["payload_id", "sensor_kind"]}, "zorder")])
def test_rewritten_files_hold_exactly_the_live_rows(local_catalog, strategy, layout, method):
    """COMPACT-32, COMPACT-33, ROWDEL-11: every strategy drops deleted rows (rows rewritten = live rows); the outputs carry no vector and the
    current snapshot references none of the old vector files; older snapshots still read as before."""
    t = small_files_table(local_catalog, appends=6, rows=600)
    delete_some(t)
    pinned = t.current_snapshot().snapshot_id
    before = t.scan().to_arrow()
    deleted = sum(f.deleted_record_count for f in t.plan_files())
    old_vectors = vector_paths(t)
    assert deleted > 0 and old_vectors

    result = t.compaction.run(strategy, min_age_seconds=0, **layout)

    assert (result.groups_committed, result.groups_failed) == (3, 0), result.summary()
    assert {g.method for g in result.groups} == {method}
    assert result.rows_rewritten == before.num_rows and result.deleted_rows_dropped == deleted
    assert f"{deleted} deleted rows dropped" in result.summary()
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before)
    assert rows(stored_rows(t)) == rows(before)  # no deleted row is stored in a live file
    assert all(f.deletion_vector is None for f in t.plan_files())
    assert vector_paths(t).isdisjoint(old_vectors) and not vector_paths(t)
    summary = t.current_snapshot().summary
    assert summary["total-position-deletes"] == "0" and summary["total-delete-vectors"] == "0"
    assert summary["total-records"] == str(before.num_rows)
    assert rows(t.scan(snapshot_id=pinned).to_arrow()) == rows(before)
    assert t.check().ok
    # Nothing is left to compact (COMPACT-8): the outputs have no deleted rows.
    assert t.compaction.plan(strategy, min_age_seconds=0, **{k: v for k, v in layout.items()
                                                             if k != "verify"}).groups == ()


def single_file_table(catalog: lakefmt.Catalog, n: int = 1000) -> lakefmt.Table:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    t = catalog.create_table("ops.accounts", schema=schema)
    t.append(pa.table({"id": pa.array(range(n), pa.int64()), "name": [f"account-{i}" for i in range(n)]},
                      schema=schema))
    return t


def test_a_large_file_with_many_deleted_rows_is_rewritten_alone(local_catalog):
    """COMPACT-35, ROWDEL-12: one file larger than the small-file threshold, alone in its partition, with 40%
    of its rows deleted: a candidate at threshold 0.3 (reason ``deletes``), not at 0.5."""
    t = single_file_table(local_catalog)
    t.delete("id < 400")
    [f] = t.plan_files()
    assert (f.record_count, f.deleted_record_count) == (1000, 400)
    large = {"min_age_seconds": 0, "target_file_size": f.file_size_bytes}  # the file is "too big" otherwise

    plan = t.compaction.plan("binpack", delete_ratio_threshold=0.3, **large)
    [group] = plan.groups
    assert group.files == (f,) and group.for_deletes == (f.path,) and group.deleted_rows == 400
    text = plan.explain()
    assert "1 candidates (0 small, 1 for deletes)" in text and "deletes: 1 file with >= 30% of rows deleted" in text
    assert f"deletes: {f.path} (40% of 1000 rows deleted)" in text
    assert "deleted rows dropped: 400" in text

    higher = t.compaction.plan("binpack", delete_ratio_threshold=0.5, **large)
    assert higher.groups == () and [s.reason for s in higher.skipped] == ["too-big"]
    assert "for deletes" not in higher.explain()
    t.set_property("compaction.delete-ratio-threshold", "0.5")
    assert t.compaction.plan("binpack", **large).groups == ()  # the table property applies

    result = t.compaction.run("binpack", delete_ratio_threshold=0.3, **large)
    assert (result.groups_committed, result.rows_rewritten, result.deleted_rows_dropped) == (1, 600, 400)
    [out] = t.refresh().plan_files()
    assert out.deletion_vector is None and out.record_count == 600
    assert pq.read_table(f"{t.location}/{out.path}").column("id").to_pylist() == list(range(400, 1000))
    assert t.compaction.plan("binpack", delete_ratio_threshold=0.3, **large).groups == ()


def test_planner_adds_delete_heavy_files_to_the_small_ones():
    """COMPACT-35, ROWDEL-12, pure: a delete-heavy large file joins its partition's small files, a partition with
    fewer small files than min-input-files is still planned for it, and lightly deleted large files
    stay too big."""
    def file(name: str, size: int, deleted: int = 0, partition: tuple = (1,)) -> PlannerFile:
        dv = DeletionVector("data/deletes/dv-x.bin", 0, 40, deleted) if deleted else None
        data = DataFile(path=f"data/{name}.parquet", partition=partition, record_count=100,
                        file_size_bytes=size, deletion_vector=dv)
        return PlannerFile(data, added_ms=NOW - 10 * 3_600_000)

    files = [file("heavy", 200 * MiB, deleted=30), file("light", 200 * MiB, deleted=29),
             file("s1", MiB), file("s2", MiB), file("young", MiB, partition=(2,))]
    plan = plan_groups(files, CompactionOptions(), strategy="binpack", now_ms=NOW)
    [group] = plan.groups
    assert [f.path for f in group.files] == ["data/heavy.parquet", "data/s1.parquet", "data/s2.parquet"]
    assert group.for_deletes == ("data/heavy.parquet",)
    assert {(s.data_file.path, s.reason) for s in plan.skipped} == {
        ("data/light.parquet", "too-big"), ("data/young.parquet", "too-few-files")}
    # A partition still being written is left alone, deletes or not (COMPACT-5).
    young = plan_groups(files, CompactionOptions(min_age_seconds=100 * 3600), strategy="binpack", now_ms=NOW)
    assert young.groups == () and {s.reason for s in young.skipped} == {"too-young", "too-big"}


@pytest.mark.parametrize("value", ["0", "-0.1", "1.5", "many"])
def test_bad_delete_ratio_threshold_is_refused(local_catalog, value):
    """COMPACT-1/35: 0 < threshold <= 1, refused with the property's name before anything is written."""
    t = single_file_table(local_catalog)
    snapshot = t.current_snapshot().snapshot_id
    with pytest.raises(ValidationError, match="compaction.delete-ratio-threshold"):
        t.compaction.run("binpack", min_age_seconds=0, delete_ratio_threshold=value)
    t.set_property("compaction.delete-ratio-threshold", value)
    with pytest.raises(ValidationError, match="compaction.delete-ratio-threshold"):
        t.compaction.run("binpack", min_age_seconds=0)
    assert t.refresh().current_snapshot().snapshot_id == snapshot
    assert not any("compact-" in p.path for p in t.io.list_files(f"{t.location}/data"))


@pytest.mark.multiprocess
def test_missing_vector_file_fails_its_group_only(local_catalog):
    """COMPACT-19/32: an input whose deletion-vector file is gone cannot be read without resurrecting
    rows: its group fails with an error naming the file, nothing is written for it, the others commit."""
    t = small_files_table(local_catalog, appends=6, rows=600)
    t.delete("mission_id = 1 AND payload_id = 3")
    [vector] = vector_paths(t)
    t.io.delete_many([f"{t.location}/{vector}"])
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + """
r = t.compaction.run("binpack", min_age_seconds=0)
print(json.dumps({g.partition: [g.status, g.error] for g in r.groups}))
"""
    done = run_python(code)  # a fresh process: this one still caches the vectors it wrote
    assert done.returncode == 0, done.stderr
    groups = json.loads(done.stdout.strip().splitlines()[-1])
    assert {p: s for p, (s, _) in groups.items()} == {
        "mission_id=0": "committed", "mission_id=1": "failed", "mission_id=2": "committed"}
    error = groups["mission_id=1"][1]
    assert "MissingFileError" in error and vector in error
    assert not any("/compact-" in p.path for p in t.io.list_files(f"{t.location}/data/mission_id=1"))


def test_delete_between_plan_and_rewrite_is_applied(local_catalog):
    """COMPACT-34: a file that got more deleted rows after planning, before its partition started, is
    read with its new vector: the group commits and those rows stay deleted."""
    t = small_files_table(local_catalog, appends=6, rows=600)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    other = local_catalog.load_table("artemis.downlinks")
    other.delete("payload_id = 5")
    expected = other.scan().to_arrow()
    result = run_plan(t.refresh(), plan)
    assert result.groups_committed == 3 and result.deleted_rows_dropped > 0, result.summary()
    assert rows(t.refresh().scan().to_arrow()) == rows(expected)
    assert rows(stored_rows(t)) == rows(expected)


def _wait_for(path: Path, proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"process exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {path}")
        time.sleep(0.02)


@pytest.mark.multiprocess
def test_concurrent_delete_fails_only_its_group_and_stays_deleted(local_catalog, tmp_path):
    """ROWDEL-4, COMPACT-34: a compactor in another process has rewritten every group and waits
    before its first commit; a delete then lands on files of one partition. That group is reported
    as a conflict and its outputs deleted, the other groups commit, and the deleted rows stay deleted."""
    t = small_files_table(local_catalog, appends=6, rows=600)
    t.delete("payload_id = 3")  # the compactor reads these vectors
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + """
r = t.compaction.run("binpack", min_age_seconds=0, max_concurrent_groups=3)
print(json.dumps([[g.partition, g.status, g.error] for g in r.groups]))
"""
    proc = run_python(code, env={"LAKEFMT_PAUSE_AT": "compaction-before-commit", "LAKEFMT_PAUSE_FILE": str(paused),
                                 "LAKEFMT_RESUME_FILE": str(resume)}, wait=False)
    _wait_for(paused, proc)  # every group rewritten (3 at once), none committed
    t.refresh().delete("mission_id = 1 AND sensor_kind = 'imu'")
    expected = t.scan().to_arrow()
    resume.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    groups = {partition: (status, error) for partition, status, error in json.loads(out.strip().splitlines()[-1])}
    assert {p: s for p, (s, _) in groups.items()} == {
        "mission_id=0": "committed", "mission_id=1": "conflict", "mission_id=2": "committed"}
    assert "deleted by a concurrent commit" in groups["mission_id=1"][1]
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(expected)
    assert t.scan("mission_id = 1 AND sensor_kind = 'imu'").count() == 0
    mission_1 = t.plan_files("mission_id = 1")
    assert mission_1 and all(f.deletion_vector is not None and "/compact-" not in f.path for f in mission_1)
    assert not any("/compact-" in p.path for p in t.io.list_files(f"{t.location}/data/mission_id=1"))
    # The next run replans the group with the new vectors.
    again = t.compaction.run("binpack", min_age_seconds=0)
    assert again.groups_committed == 1
    assert rows(t.refresh().scan().to_arrow()) == rows(expected) == rows(stored_rows(t))
