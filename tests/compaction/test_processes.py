"""Compaction next to other processes: appenders, a second compactor, a SIGKILL
(spec/compaction.md COMPACT-18, COMPACT-21..COMPACT-24). Real OS processes, no mocks.

The processes synchronize on files they create at named points, never on sleeps, and
leases never expire by themselves during a test: a test that needs a lease to expire
moves its ``expires_at`` into the past in the catalog (CAT-9), as its lifetime passing
would, so the tests hold on a loaded machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

import lakefmt
from lakefmt.compaction.runner import lease_key
from lakefmt.leases import Leases
from tests.compaction.conftest import run_python, small_files_table
from tests.conftest import downlinks, rows

pytestmark = pytest.mark.multiprocess

PRELUDE = """
import json, os, sys, time
import lakefmt
cat = lakefmt.Catalog({warehouse!r})
t = cat.load_table("artemis.downlinks")
"""


def _wait_for(path: Path, proc, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"process exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {path}")
        time.sleep(0.02)


def _expire_leases(catalog: lakefmt.Catalog, table_uuid: str, owner: str) -> int:
    """End ``owner``'s leases on the table as if their lifetime had passed (CAT-9); returns how many."""
    with catalog.session() as s:
        count = s.con.execute("SELECT count(*) FROM leases WHERE table_uuid = ? AND owner = ?",
                              [table_uuid, owner]).fetchone()[0]
        s.con.execute("UPDATE leases SET expires_at = ? WHERE table_uuid = ? AND owner = ?",
                      [time.time() - 1, table_uuid, owner])
    return count


def _replace_snapshots(t: lakefmt.Table) -> list[lakefmt.Snapshot]:
    ancestors = {s.snapshot_id for s in t.metadata.ancestors(t.metadata.current_snapshot_id)}
    return [s for s in t.snapshots() if s.operation == "replace" and s.snapshot_id in ancestors]


def test_appends_during_compaction_lose_nothing(local_catalog, tmp_path):
    """COMPACT-18, COMPACT-30: an appender in another process commits while groups are committed; the
    compaction commits lose the race, are rebuilt from the new base and keep the appended files: no row is lost."""
    t = small_files_table(local_catalog, appends=6)
    expected = [t.scan().to_arrow()]
    started, first = tmp_path / "started", tmp_path / "first-append"
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + f"""
from tests.conftest import downlinks
open({str(started)!r}, "w").close()
for i in range(6):
    t.append(downlinks(400, seed=1000 + i))
    if i == 0:
        open({str(first)!r}, "w").close()
"""
    appender = None

    def hook(point, info):
        nonlocal appender
        if point == "before-commit" and appender is None:
            appender = run_python(code, wait=False)
            _wait_for(first, appender)  # a concurrent append lands before our first commit

    result = t.compaction.run("sort", min_age_seconds=0, hook=hook, max_concurrent_groups=1)
    _, err = appender.communicate(timeout=120)
    assert appender.returncode == 0, err
    assert result.groups_committed == 3 and result.groups_failed == 0, result.summary()
    expected += [downlinks(400, seed=1000 + i) for i in range(6)]
    t.refresh()
    assert t.scan().count() == 6 * 1200 + 6 * 400
    import pyarrow as pa
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables(expected))


def test_two_compactors_never_double_rewrite(local_catalog, tmp_path):
    """COMPACT-22/24: two compactor processes at once: every source file is replaced exactly once."""
    t = small_files_table(local_catalog, appends=6, rows=600, partition_by=("mission_id", "payload_id"))
    before = t.scan().to_arrow()
    files_before = {f.path for f in t.plan_files()}
    sizes = [f.file_size_bytes for f in t.plan_files()]
    target = 2 * max(sizes)
    assert 6 * min(sizes) >= target  # each partition's 6 files are at least the target together
    barrier = tmp_path / "at-commit"
    barrier.mkdir()
    # Each compactor stops before its first commit until both got there: they hold different
    # partitions at the same moment, so both commit, whatever the machine's load.
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + f"""
barrier = {str(barrier)!r}
arrived = []

def hook(point, info):
    if point != "before-commit" or arrived:
        return
    arrived.append(True)
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 120  # a safety net only
    while len(os.listdir(barrier)) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the other compactor never reached its first commit")
        time.sleep(0.005)

# Every file a candidate, every group worth a commit of its own (COMPACT-18).
r = t.compaction.run("binpack", min_age_seconds=0, max_concurrent_groups=1, hook=hook,
                     target_file_size={target}, small_file_ratio=1.0)
print(json.dumps({{"statuses": [g.status for g in r.groups], "rewritten": r.files_rewritten}}))
"""
    procs = [run_python(code, wait=False) for _ in range(2)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before)  # nothing duplicated, nothing lost
    replaced = _replace_snapshots(t)
    partitions = len({f.partition for f in t.plan_files()})
    assert len(replaced) == partitions  # one replace per partition, not two
    assert sum(int(s.summary["deleted-data-files"]) for s in replaced) == len(files_before)
    assert sum(r["rewritten"] for r in reports) == len(files_before)
    committed = [s for r in reports for s in r["statuses"] if s == "committed"]
    assert len(committed) == partitions
    assert all("committed" in r["statuses"] for r in reports), reports  # they really ran at once
    assert len(os.listdir(barrier)) == 2


def test_sigkill_before_commit_leaves_table_intact(local_catalog, tmp_path):
    """COMPACT-21/23: a compactor killed between writing outputs and committing leaves the table
    readable with all rows; its leases are honoured while live, and taken over once expired."""
    t = small_files_table(local_catalog, appends=6)
    before = t.scan().to_arrow()
    snapshot = t.current_snapshot().snapshot_id
    files_on_disk = {info.path for info in t.io.list_files(f"{t.location}/data")}
    marker = tmp_path / "paused"
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + """
t.compaction.run("binpack", min_age_seconds=0, lease_seconds=3600, max_concurrent_groups=1,
                 target_file_size=30000)  # each group is worth a commit of its own (COMPACT-18)
"""
    proc = run_python(code, env={"LAKEFMT_PAUSE_AT": "compaction-before-commit",
                                 "LAKEFMT_PAUSE_FILE": str(marker)}, wait=False)
    _wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # The killed compactor wrote outputs, but nothing references them.
    orphans = {info.path for info in t.io.list_files(f"{t.location}/data")} - files_on_disk
    assert orphans and all("/compact-" in p for p in orphans)
    t = local_catalog.load_table("artemis.downlinks")
    assert t.current_snapshot().snapshot_id == snapshot
    assert rows(t.scan().to_arrow()) == rows(before)
    # Its leases are still live: the partition whose commit it was about to make, and the next
    # one, started before that commit. Both are skipped until the leases expire, then taken over.
    early = t.compaction.run("binpack", min_age_seconds=0)
    assert sorted(g.status for g in early.groups) == ["committed", "lease-held", "lease-held"]
    owners = {lease.owner for lease in Leases(local_catalog).live(t.metadata.table_uuid, "partition")}
    assert len(owners) == 1  # the killed process's, named for it (COMPACT-22)
    dead = owners.pop()
    assert dead.startswith(f"compactor:{socket.gethostname()}:{proc.pid}:")
    assert _expire_leases(local_catalog, t.metadata.table_uuid, dead) == 2
    late = t.compaction.run("binpack", min_age_seconds=0)
    assert [g.status for g in late.groups] == ["committed", "committed"]
    assert rows(t.scan().to_arrow()) == rows(before) and len(t.plan_files()) == 3


def test_dead_compactor_lease_is_taken_over(local_catalog, tmp_path):
    """COMPACT-23: a lease left by a process that exited is honoured until it expires, then taken over."""
    t = small_files_table(local_catalog, appends=5)
    plan = t.compaction.plan("binpack", min_age_seconds=0)
    keys = [lease_key(t.metadata, p.spec_id, p.partition) for p in plan.partitions]
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + f"""
from lakefmt.leases import Leases
assert Leases(cat).acquire_many(t.metadata.table_uuid, "partition", {keys!r}, owner="dead-compactor", ttl=3600)
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert t.compaction.run("binpack", min_age_seconds=0).groups_skipped == 3
    assert _expire_leases(local_catalog, t.metadata.table_uuid, "dead-compactor") == 3
    assert t.compaction.run("binpack", min_age_seconds=0).groups_committed == 3


def test_small_partitions_leased_in_one_session_refuse_another_compactor(local_catalog, tmp_path):
    """COMPACT-37, COMPACT-22/23: partitions that fit in one target file have their leases taken in one
    catalog session (one transaction: one expiry), held by the compactor until their groups are done; a
    second compactor in another process meanwhile rewrites none of them, and they are all released after."""
    t = small_files_table(local_catalog, appends=5)
    before = t.scan().to_arrow()
    snapshot = t.current_snapshot().snapshot_id
    plan = t.compaction.plan("binpack", min_age_seconds=0)
    keys = sorted(lease_key(t.metadata, p.spec_id, p.partition) for p in plan.partitions)
    assert len(plan.groups) == 3 and sum(g.input_bytes for g in plan.groups) <= plan.options.target_file_size
    marker, resume = tmp_path / "paused", tmp_path / "resume"
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + """
r = t.compaction.run("binpack", min_age_seconds=0, max_concurrent_groups=1, lease_seconds=3600)
print(json.dumps({"statuses": [g.status for g in r.groups], "commits": len(r.snapshot_ids)}))
"""
    first = run_python(code, env={"LAKEFMT_PAUSE_AT": "compaction-before-commit", "LAKEFMT_PAUSE_FILE": str(marker),
                                  "LAKEFMT_RESUME_FILE": str(resume)}, wait=False)
    try:
        _wait_for(marker, first)
        held = Leases(local_catalog).live(t.metadata.table_uuid, "partition")
        assert sorted(lease.key for lease in held) == keys
        assert len({lease.owner for lease in held}) == 1 and held[0].owner.startswith(f"compactor:{socket.gethostname()}:{first.pid}:")
        assert len({lease.expires_at for lease in held}) == 1  # taken in one transaction (COMPACT-23)
        second = t.compaction.run("binpack", min_age_seconds=0)
        assert [g.status for g in second.groups] == ["lease-held"] * 3
        assert second.groups_committed == 0 and t.current_snapshot().snapshot_id == snapshot
    finally:
        resume.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"statuses": ["committed"] * 3, "commits": 1}
    assert Leases(local_catalog).live(t.metadata.table_uuid, "partition") == []
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before) and len(t.plan_files()) == 3


def test_partition_held_elsewhere_is_skipped_its_neighbours_leased_one_by_one(local_catalog):
    """COMPACT-37 with COMPACT-22/23: when another process holds one of the partitions a compactor would
    lease together, the batch is not taken (all or none); each partition is then leased at its own start:
    the held one is skipped, the others are rewritten, and the other holder's lease is left alone."""
    t = small_files_table(local_catalog, appends=5)
    before = t.scan().to_arrow()
    plan = t.compaction.plan("binpack", min_age_seconds=0)
    labels = {lease_key(t.metadata, p.spec_id, p.partition): p.label for p in plan.partitions}
    busy = list(labels)[1]  # not the first to start: it is in the first partition's batch
    code = PRELUDE.format(warehouse=local_catalog.warehouse) + f"""
from lakefmt.leases import Leases
assert Leases(cat).acquire(t.metadata.table_uuid, "partition", {busy!r}, owner="other-compactor", ttl=3600)
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    result = t.compaction.run("binpack", min_age_seconds=0, max_concurrent_groups=1)
    status = {g.partition: g.status for g in result.groups}
    assert status == {label: "lease-held" if key == busy else "committed" for key, label in labels.items()}
    assert [(lease.key, lease.owner) for lease in Leases(local_catalog).live(t.metadata.table_uuid, "partition")] \
        == [(busy, "other-compactor")]
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before) and len(t.plan_files()) == 5 + 2
