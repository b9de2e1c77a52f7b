"""Many real processes writing one table through one catalog file (CAT-4..CAT-6, COMMIT-1..COMMIT-10).

Workers are started with the ``spawn`` context, so each is a fresh interpreter with its
own DuckDB connections and its own lock on ``<catalog>.lock``. Every test ends by checking
the table as the spec describes it: a linear snapshot chain, one commit-log row per
commit, every row exactly once, and a spec-only reader finding the same rows.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks, rows
from tests.mp_workers import ROWS_PER_APPEND, TAGGED_SCHEMA, append_many, run_operation, to_ipc
from tests.test_spec_reader import spec_only_read

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]

PROCESSES = 4
APPENDS = 50
CTX = multiprocessing.get_context("spawn")


def run_processes(target, arg_lists: list[tuple]) -> list[tuple]:
    """Start one process per argument tuple (with a shared start barrier); return their reports."""
    barrier = CTX.Barrier(len(arg_lists))
    results = CTX.Queue()
    procs = [CTX.Process(target=target, args=(*args, barrier, results)) for args in arg_lists]
    for p in procs:
        p.start()
    reports = []
    try:
        for _ in procs:
            reports.append(results.get(timeout=540))
    except queue.Empty:
        pytest.fail(f"workers did not report in time; got {reports}")
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    errors = [r for r in reports if r[0] != "ok"]
    assert not errors, "\n".join(str(e[2]) for e in errors)
    return reports


def data_files_on_disk(table: lakefmt.Table) -> set[str]:
    root = Path(table.location)
    return {str(p.relative_to(root)) for p in (root / "data").rglob("*.parquet")}


def test_four_processes_fifty_appends_each(tmp_path: Path):
    warehouse = str(tmp_path / "wh")
    catalog = lakefmt.Catalog(warehouse, create=True)
    created = catalog.create_table("mp.tagged", schema=TAGGED_SCHEMA, partition_by=["proc"])
    run_processes(append_many, [(warehouse, "mp.tagged", proc, APPENDS) for proc in range(PROCESSES)])

    t = catalog.load_table("mp.tagged")
    total = PROCESSES * APPENDS
    snaps = t.snapshots()
    assert len(snaps) == total

    # A linear chain: each snapshot's parent is the one before it, sequence numbers 1..N (SNAP-3).
    by_sequence = sorted(snaps, key=lambda s: s.sequence_number)
    assert [s.sequence_number for s in by_sequence] == list(range(1, total + 1))
    assert by_sequence[0].parent_snapshot_id is None
    for prev, snap in itertools.pairwise(by_sequence):
        assert snap.parent_snapshot_id == prev.snapshot_id
    assert t.current_snapshot().snapshot_id == by_sequence[-1].snapshot_id
    assert [s.snapshot_id for s in t.metadata.ancestors(t.metadata.current_snapshot_id)] == [
        s.snapshot_id for s in reversed(by_sequence)]
    assert all(h.is_current_ancestor for h in t.history())
    assert len({s.snapshot_id for s in snaps}) == total
    assert all(s.operation == "append" for s in snaps)

    # One metadata version per commit plus the create; lost attempts left no metadata file (COMMIT-7).
    metadata_files = sorted((Path(t.location) / "metadata").glob("*.metadata.json"))
    assert len(metadata_files) == total + 1
    log = catalog.commit_log("mp.tagged")
    appends = [r for r in log if r.operation == "append"]
    assert len(appends) == total and len(log) == total + 1
    # Each row names the snapshot its commit added, even after retries (CAT-5).
    assert {r.snapshot_id for r in appends} == {s.snapshot_id for s in snaps}
    versions = sorted(r.version for r in log)
    assert versions == list(range(versions[0], versions[0] + total + 1))
    chain = sorted(log, key=lambda r: r.version)
    assert chain[0].new_metadata_location == created.metadata_location
    for prev, rec in itertools.pairwise(chain):  # each swap moved the pointer from the previous location
        assert rec.old_metadata_location == prev.new_metadata_location
    assert chain[-1].new_metadata_location == t.metadata_location

    # Every row exactly once.
    got = t.scan().to_arrow()
    counts = Counter(zip(got.column("proc").to_pylist(), got.column("i").to_pylist(), got.column("k").to_pylist()))
    expected = {(p, i, k) for p in range(PROCESSES) for i in range(APPENDS) for k in range(ROWS_PER_APPEND)}
    assert set(counts) == expected and set(counts.values()) == {1}
    assert t.current_snapshot().summary["total-records"] == str(total * ROWS_PER_APPEND)

    # The files on disk are exactly the live files: no orphan from a lost race.
    assert data_files_on_disk(t) == {f.path for f in t.plan_files()}
    # A reader that knows only spec/ sees the same rows.
    assert rows(spec_only_read(catalog.catalog_path, "mp", "tagged").select(got.column_names)) == rows(got)


def _downlinks_table(catalog: lakefmt.Catalog) -> tuple[lakefmt.Table, pa.Table]:
    t = catalog.create_table("race.downlinks", schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"])
    base = downlinks(1500, missions=3)
    t.append(base)
    return t, base


def test_overwrite_conflicts_with_a_concurrent_append_it_would_touch(tmp_path: Path):
    warehouse = str(tmp_path / "wh")
    catalog = lakefmt.Catalog(warehouse, create=True)
    _, base = _downlinks_table(catalog)
    stale = catalog.load_table("race.downlinks")  # the overwrite is planned on this snapshot

    # Another process appends rows of mission 2 after the overwrite was planned...
    added = downlinks(300, seed=7, missions=3).filter(pc.field("mission_id") == 2)
    run_processes(run_operation, [(warehouse, "race.downlinks", "append", to_ipc(added))])
    after_append = catalog.load_table("race.downlinks")
    snapshots_before = len(after_append.snapshots())

    # ...so an overwrite of mission 2 planned before it must fail: it would silently drop those rows.
    replacement = downlinks(50, seed=9, missions=3).filter(pc.field("mission_id") == 2)
    with pytest.raises(lakefmt.CommitConflictError, match="concurrent"):
        stale.overwrite(replacement, filter="mission_id = 2")

    now = catalog.load_table("race.downlinks")
    assert len(now.snapshots()) == snapshots_before
    assert now.metadata_location == after_append.metadata_location
    assert rows(now.scan().to_arrow()) == rows(pa.concat_tables([base, added]))
    assert data_files_on_disk(now) == {f.path for f in now.plan_files()}  # the overwrite's files are gone
    assert [r.operation for r in catalog.commit_log("race.downlinks")] == ["append", "append", "create"]

    # Re-planned on the current snapshot, the same overwrite succeeds.
    now.overwrite(replacement, filter="mission_id = 2")
    assert rows(now.scan().to_arrow()) == rows(pa.concat_tables([base.filter(pc.field("mission_id") != 2),
                                                                 replacement]))


def test_overwrite_elsewhere_does_not_conflict_with_an_append(tmp_path: Path):
    warehouse = str(tmp_path / "wh")
    catalog = lakefmt.Catalog(warehouse, create=True)
    _, base = _downlinks_table(catalog)
    stale = catalog.load_table("race.downlinks")
    added = downlinks(300, seed=7, missions=3).filter(pc.field("mission_id") == 1)
    run_processes(run_operation, [(warehouse, "race.downlinks", "append", to_ipc(added))])
    replacement = downlinks(50, seed=9, missions=3).filter(pc.field("mission_id") == 2)
    stale.overwrite(replacement, filter="mission_id = 2")
    expected = pa.concat_tables([base.filter(pc.field("mission_id") != 2), added, replacement])
    assert rows(catalog.load_table("race.downlinks").scan().to_arrow()) == rows(expected)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_delete_replans_when_a_file_it_touches_was_removed_concurrently(tmp_path: Path, mode: str):
    """The stale delete's files are gone; it is planned again on the new snapshot (ROWDEL-5)."""
    warehouse = str(tmp_path / "wh")
    catalog = lakefmt.Catalog(warehouse, create=True)
    t, base = _downlinks_table(catalog)
    t.set_property("write.delete.mode", mode)
    stale = catalog.load_table("race.downlinks")
    run_processes(run_operation, [(warehouse, "race.downlinks", "delete", "mission_id = 0")])
    stale.delete("mission_id IN (0, 1) AND payload_id = 1")
    now = catalog.load_table("race.downlinks")
    keep = (pc.field("mission_id") != 0) & ~((pc.field("mission_id") == 1) & (pc.field("payload_id") == 1))
    assert rows(now.scan().to_arrow()) == rows(base.filter(keep))
    assert [s.operation for s in now.snapshots()] == ["append", "delete", "delete"]


@pytest.mark.parametrize("round_", range(3))
def test_append_and_delete_on_different_partitions_both_succeed(tmp_path: Path, round_: int):
    """Started together from a barrier, in either order both commits succeed (COMMIT-10)."""
    warehouse = str(tmp_path / "wh")
    catalog = lakefmt.Catalog(warehouse, create=True)
    _, base = _downlinks_table(catalog)
    added = downlinks(400, seed=11 + round_, missions=3).filter(pc.field("mission_id") == 1)
    reports = run_processes(run_operation, [
        (warehouse, "race.downlinks", "delete", "mission_id = 0"),
        (warehouse, "race.downlinks", "append", to_ipc(added)),
    ])
    assert sorted(r[1] for r in reports) == ["append", "delete"]
    now = catalog.load_table("race.downlinks")
    assert sorted(s.operation for s in now.snapshots()) == ["append", "append", "delete"]
    by_sequence = sorted(now.snapshots(), key=lambda s: s.sequence_number)
    for prev, snap in itertools.pairwise(by_sequence):
        assert snap.parent_snapshot_id == prev.snapshot_id
    expected = pa.concat_tables([base.filter(pc.field("mission_id") != 0), added])
    assert rows(now.scan().to_arrow()) == rows(expected)
    assert data_files_on_disk(now) >= {f.path for f in now.plan_files()}
