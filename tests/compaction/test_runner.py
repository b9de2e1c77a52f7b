"""Running compaction in one process: commits, conflicts, idempotence, leases, pacing, manifests
(spec/compaction.md COMPACT-18..COMPACT-31)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest

from lakefmt.compaction import QuietWindows, TokenBucket
from lakefmt.compaction.leasing import LEASE_KIND, PartitionLeases
from lakefmt.compaction.manifests import planning_seconds
from lakefmt.compaction.runner import lease_key, plan_table, run_plan
from lakefmt.errors import ValidationError
from lakefmt.leases import Leases
from lakefmt.manifest_io import read_manifest, read_manifest_list
from tests.compaction.conftest import small_files_table
from tests.conftest import rows


def test_run_commits_one_replace_per_group_and_pinned_reader_is_unaffected(catalog):
    """COMPACT-18/20: a group of at least the target size gets its own replace snapshot;
    readers of the old snapshot see the same rows."""
    t = small_files_table(catalog, properties={"compaction.target-file-size-bytes": "30000"})
    before = t.scan().to_arrow()
    pinned = t.current_snapshot().snapshot_id
    seen = []
    result = t.compaction.run("binpack", min_age_seconds=0, max_concurrent_groups=1,
                              progress=lambda done, total, g: seen.append((done, total)))
    assert all(g.input_bytes >= 30000 for g in result.groups)
    assert (result.groups_planned, result.groups_committed, result.files_before) == (3, 3, 24)
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert len(result.snapshot_ids) == 3 and result.rows_rewritten == before.num_rows
    assert [t.snapshot(s).operation for s in result.snapshot_ids] == ["replace"] * 3
    assert rows(t.scan(snapshot_id=pinned).to_arrow()) == rows(before)
    assert rows(t.scan().to_arrow()) == rows(before)
    assert "3 committed" in result.summary() and "CompactionResult(" in repr(result)


def test_small_groups_share_one_commit(local_catalog):
    """COMPACT-18: groups smaller than the target that finish while others run are committed
    together, as one replace snapshot that names every group; rows are unchanged. COMPACT-20:
    its summary has added-records = deleted-records and names the groups under lakefmt.compaction.group."""
    t = small_files_table(local_catalog)
    before = t.scan().to_arrow()
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert (result.groups_committed, result.files_before, result.files_after) == (3, 24, 3)
    [snapshot_id] = result.snapshot_ids
    assert {g.snapshot_id for g in result.groups} == {snapshot_id}
    summary = t.snapshot(snapshot_id).summary
    assert sorted(summary["lakefmt.compaction.group"].split(",")) == sorted(g.group_id for g in result.groups)
    assert summary["added-records"] == summary["deleted-records"] == str(before.num_rows)
    assert rows(t.scan().to_arrow()) == rows(before)


def test_shared_commit_conflict_drops_only_the_group_that_lost_its_files(local_catalog):
    """COMPACT-18: when a shared commit conflicts, each group is committed on its own; only the
    group whose inputs were removed is dropped, and its outputs are deleted."""
    t = small_files_table(local_catalog)
    other = local_catalog.load_table("artemis.downlinks")
    paths: dict[str, list[str]] = {}

    def race(point, info):
        if point == "before-commit":
            paths[info["group_id"]] = info["paths"]
            if len(paths) == 3:
                other.delete("mission_id = 1")

    result = t.compaction.run("binpack", min_age_seconds=0, hook=race)
    statuses = sorted(g.status for g in result.groups)
    assert statuses == ["committed", "committed", "conflict"]
    [lost] = [g for g in result.groups if g.status == "conflict"]
    assert not any(t.io.exists(p) for p in paths[lost.group_id])
    assert len(result.snapshot_ids) == 2
    assert rows(t.refresh().scan().to_arrow()) == rows(other.refresh().scan().to_arrow())
    assert Leases(local_catalog).live(t.metadata.table_uuid, LEASE_KIND) == []  # released when the run ended


@contextmanager
def sessions_counted(t, opened: list[str]) -> Iterator[None]:
    """The very same catalog, each catalog session it opens counted in ``opened``."""
    session = t.catalog.session

    def counted(*args, **kwargs):
        opened.append("session")
        return session(*args, **kwargs)

    t.catalog.session = counted
    try:
        yield
    finally:
        del t.catalog.session


def test_leases_a_commit_completes_are_released_in_its_own_session(local_catalog):
    """COMPACT-22: the leases of the partitions a commit completes are deleted in the catalog session
    of that commit, after its swap: a run of small partitions opens no catalog session after the
    commit they share, and leaves no lease behind."""
    t = small_files_table(local_catalog)
    before = t.scan().to_arrow()
    opened: list[str] = []

    def mark(point, info):
        if point == "before-commit" and "commit" not in opened:
            opened.append("commit")

    with sessions_counted(t, opened):
        result = t.compaction.run("binpack", min_age_seconds=0, hook=mark)
    assert result.groups_committed == 3 and len(result.snapshot_ids) == 1
    assert opened[opened.index("commit"):] == ["commit", "session"]  # the commit's, and none after it
    assert Leases(local_catalog).live(t.metadata.table_uuid, LEASE_KIND) == []
    assert rows(t.scan().to_arrow()) == rows(before)


def test_run_reads_the_pointer_and_takes_its_write_lease_in_one_session(local_catalog, monkeypatch):
    """COMPACT-39, COMPACT-37, CAT-10: a run of small partitions opens two catalog sessions: the
    pointer read with the run's write lease and, once the plan is ready, every partition lease;
    then the commit (which releases them)."""
    # spec: COMPACT-39, COMPACT-37, CAT-10
    import lakefmt.compaction

    monkeypatch.setattr(lakefmt.compaction, "PLAN_WAIT_SECONDS", 60.0)  # a loaded machine plans late
    t = small_files_table(local_catalog)
    before = t.scan().to_arrow()
    opened: list[str] = []
    with sessions_counted(t, opened):
        result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_committed == 3 and len(result.snapshot_ids) == 1
    assert len(opened) == 2
    token = t.write_token()  # the run's lease, still live: no new one is taken
    assert [x.key for x in Leases(local_catalog).live(t.metadata.table_uuid, "write")] == [token]
    assert Leases(local_catalog).live(t.metadata.table_uuid, LEASE_KIND) == []
    assert rows(t.scan().to_arrow()) == rows(before)


def test_run_on_a_stale_handle_compacts_the_current_snapshot(local_catalog):
    """COMPACT-39: a handle loaded before other commits plans the table as it is when the run starts."""
    # spec: COMPACT-39
    t = small_files_table(local_catalog, appends=4)
    stale = local_catalog.load_table("artemis.downlinks")
    t.append(t.scan().to_arrow().slice(0, 500))
    t.append(t.scan().to_arrow().slice(0, 300))
    current = rows(t.scan().to_arrow())
    assert stale.metadata_location != t.metadata_location and len(stale.plan_files()) == 12
    result = stale.compaction.run("binpack", min_age_seconds=0)
    assert result.files_before == len(t.plan_files()) == 15  # the appends since the handle was loaded count
    assert result.groups_committed == result.groups_planned > 0 and result.groups_failed == 0
    assert rows(t.refresh().scan().to_arrow()) == current


def test_run_renews_an_idle_write_lease_in_its_first_session(local_catalog):
    """CAT-10: an idle write lease past half its lifetime is renewed, not replaced, in the session
    that reads the pointer; the run's files carry its token."""
    # spec: CAT-10
    t = small_files_table(local_catalog)
    token = t.write_token()
    ttl = t._write_lease.ttl
    t._write_lease.expires_at = time.time() + ttl / 4  # as if taken three quarters of its lifetime ago
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_committed == result.groups_planned > 0
    assert t.write_token() == token
    (lease,) = Leases(local_catalog).live(t.metadata.table_uuid, "write")
    assert lease.key == token and lease.expires_at > time.time() + ttl / 2
    assert all(token in f.path for f in t.plan_files())


@pytest.mark.parametrize("strategy", ["binpack", "sort", "zorder"])
def test_compaction_twice_is_a_no_op(local_catalog, strategy):
    """COMPACT-8: the second run plans no group and commits nothing."""
    t = small_files_table(local_catalog, properties={"compaction.target-file-size-bytes": "30000"})
    layout = {"columns": ["payload_id", "sensor_kind"]} if strategy == "zorder" else {}
    first = t.compaction.run(strategy, min_age_seconds=0, **layout)
    assert first.groups_committed == 3
    snapshot = t.current_snapshot().snapshot_id
    for min_inputs in (5, 1):
        plan = t.compaction.plan(strategy, min_age_seconds=0, min_input_files=min_inputs, **layout)
        assert plan.groups == (), plan.explain()
    second = t.compaction.run(strategy, min_age_seconds=0, **layout)
    assert second.groups_planned == 0 and second.status == "nothing-to-do"
    assert t.refresh().current_snapshot().snapshot_id == snapshot


def test_default_min_age_skips_fresh_partitions(local_catalog):
    """COMPACT-5: with the default min age, just-ingested partitions are left alone."""
    t = small_files_table(local_catalog, appends=5)
    plan = t.compaction.plan("binpack")
    assert plan.groups == () and {p.reason for p in plan.partitions} == {"too-young"}
    later = t.compaction.plan("binpack", now=datetime.now(timezone.utc) + timedelta(hours=2))
    assert len(later.groups) == 3


def test_stale_plan_conflicts_and_deletes_outputs(local_catalog):
    """COMPACT-18: files replaced by another compactor since planning: the group is dropped."""
    t = small_files_table(local_catalog, appends=6)
    other = local_catalog.load_table("artemis.downlinks")
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    other.compaction.run("binpack", min_age_seconds=0, filter="mission_id = 1")
    written: list[str] = []
    result = run_plan(t, plan, hook=lambda point, info: written.extend(info["paths"]) if point == "outputs-written"
                      else None)
    statuses = sorted(g.status for g in result.groups)
    assert statuses == ["committed", "committed", "conflict"]
    assert rows(t.refresh().scan().to_arrow()) == rows(other.scan().to_arrow())
    assert t.scan().count() == 6 * 1200
    # The conflicting group was not even rewritten: its files were gone when its turn came.
    assert len(written) == 2


def test_conflict_at_commit_time(local_catalog):
    """COMPACT-18: a source removed between rewrite and commit: outputs deleted, nothing committed."""
    t = small_files_table(local_catalog, appends=5, partition_by=())
    other = local_catalog.load_table("artemis.downlinks")
    outputs: list[str] = []

    def race(point, info):
        if point == "before-commit":
            outputs.extend(info["paths"])
            other.delete("mission_id = 0")

    result = t.compaction.run("binpack", min_age_seconds=0, hook=race)
    [group] = result.groups
    assert group.status == "conflict" and result.groups_committed == 0
    assert all(not t.io.exists(p) for p in outputs)
    assert t.refresh().current_snapshot().operation == "delete"


def test_filter_scopes_the_run(local_catalog):
    """COMPACT-10: only partitions matching the filter are compacted."""
    t = small_files_table(local_catalog)
    result = t.compaction.run("binpack", min_age_seconds=0, filter="mission_id = 2")
    assert result.groups_committed == 1
    assert len(t.plan_files("mission_id = 2")) == 1 and len(t.plan_files("mission_id = 0")) == 8


def test_live_lease_is_respected_expired_one_taken_over(local_catalog):
    """COMPACT-22/23: a partition leased by a live compactor is skipped; an expired lease is taken over."""
    t = small_files_table(local_catalog)
    plan = t.compaction.plan("binpack", min_age_seconds=0)
    leases = Leases(local_catalog)
    uuid = t.metadata.table_uuid
    busy, dead = plan.partitions[0], plan.partitions[1]
    busy_key, dead_key = (lease_key(t.metadata, p.spec_id, p.partition) for p in (busy, dead))
    assert busy_key == f"0:{busy.label}"  # <spec id>:<partition path>
    assert leases.acquire(uuid, LEASE_KIND, busy_key, owner="live-compactor", ttl=600)
    assert leases.acquire(uuid, LEASE_KIND, dead_key, owner="dead-compactor", ttl=0.05)
    time.sleep(0.1)
    result = t.compaction.run("binpack", min_age_seconds=0)
    status = {g.partition: g.status for g in result.groups}
    assert status[busy.label] == "lease-held"
    assert status[dead.label] == "committed"
    assert result.groups_committed == 2 and result.groups_skipped == 1
    # Our own leases are released; the live one is untouched.
    assert [(lease.key, lease.owner) for lease in leases.live(uuid, LEASE_KIND)] == [
        (busy_key, "live-compactor")]


def test_quiet_window_run_does_nothing(local_catalog):
    """COMPACT-26: inside a quiet window a run that respects windows does nothing."""
    now = datetime.now(timezone.utc)
    start, end = now - timedelta(minutes=5), now + timedelta(minutes=5)
    window = f"{start:%H:%M}-{end:%H:%M}"
    t = small_files_table(local_catalog, properties={"compaction.quiet-windows": window})
    snapshot = t.current_snapshot().snapshot_id
    result = t.compaction.run("binpack", min_age_seconds=0, respect_windows=True)
    assert result.status == "quiet-window" and result.groups_planned == 0
    assert t.refresh().current_snapshot().snapshot_id == snapshot
    assert t.compaction.run("binpack", min_age_seconds=0).groups_committed == 3  # an explicit run still works


def test_quiet_windows_parse_and_wrap():
    windows = QuietWindows.parse("09:00-17:00, 22:00-02:00")
    at = lambda h, m=0: datetime(2026, 1, 1, h, m, tzinfo=timezone.utc)
    assert windows.contains(at(9)) and windows.contains(at(16, 59)) and not windows.contains(at(17))
    assert windows.contains(at(23)) and windows.contains(at(1, 59)) and not windows.contains(at(2))
    assert not windows.contains(at(8, 59))
    assert str(windows) == "09:00-17:00,22:00-02:00"
    assert not QuietWindows.parse("").contains(at(12))
    for bad in ("9-17", "25:00-26:00", "10:00-10:00", "10:61-11:00"):
        with pytest.raises(ValidationError):
            QuietWindows.parse(bad)


def test_token_bucket_paces_reads():
    """COMPACT-25: with no burst, consuming Y bytes at X bytes/s takes Y/X seconds (virtual clock)."""
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    bucket = TokenBucket(1000, clock=lambda: clock[0], sleep=sleep)
    for _ in range(10):
        bucket.consume(500)
    assert clock[0] == pytest.approx(5.0)
    clock[0] += 100  # idle time accrues no burst beyond the configured one
    bucket.consume(1000)
    assert clock[0] == pytest.approx(106.0)


def test_read_budget_bounds_rewrite_speed(local_catalog):
    """COMPACT-25: a read budget of X MB/s makes rewriting Y MB take at least Y/X seconds."""
    t = small_files_table(local_catalog, appends=6)
    plan = t.compaction.plan("binpack", min_age_seconds=0)
    y_mb = plan.bytes_to_rewrite / 1e6
    x = y_mb / 1.0  # budget: the inputs alone take 1 s to read
    started = time.perf_counter()
    result = t.compaction.run("binpack", min_age_seconds=0, read_mb_per_s=x, max_concurrent_groups=3)
    elapsed = time.perf_counter() - started
    assert result.groups_committed == 3
    assert elapsed >= y_mb / x
    assert result.throttled_seconds > 0


def test_back_off_hook_pauses(local_catalog):
    """COMPACT-28: should_pause() is consulted and its pauses are honoured."""
    t = small_files_table(local_catalog, appends=5)
    answers = [0.2, 0.0]
    calls = []

    def should_pause() -> float:
        calls.append(time.perf_counter())
        return answers.pop(0) if answers else 0.0

    started = time.perf_counter()
    result = t.compaction.run("binpack", min_age_seconds=0, should_pause=should_pause, max_concurrent_groups=1)
    assert result.groups_committed == 3
    assert len(calls) > 3 and time.perf_counter() - started >= 0.2


def test_plan_validation_and_explain(local_catalog):
    """COMPACT-2: a run uses binpack, sort or zorder; sort without a given or default sort order
    is refused with ValidationError, and a sort order given for the run is used."""
    t = small_files_table(local_catalog, sort_by=())
    with pytest.raises(ValidationError, match="sort order"):
        t.compaction.plan("sort")
    with pytest.raises(ValidationError, match="unknown compaction strategy"):
        t.compaction.plan("shuffle")
    with pytest.raises(ValidationError, match="binpack"):
        t.compaction.plan("binpack", columns=["payload_id"])
    plan = t.compaction.plan("sort", sort_by=["ts"], min_age_seconds=0)
    assert plan.target_sort_order_id is None and plan.sort_keys[0][0] == "ts"
    text = plan.explain()
    assert "mission_id=0" in text and "group g0001" in text


def test_rewrite_manifests(local_catalog):
    """COMPACT-29: few manifests, same live files, entries keep their ids; planning gets cheaper."""
    t = small_files_table(local_catalog, appends=30, rows=200, properties={"commit.manifest.min-count-to-merge": "0"})
    files_before = sorted((f.path, f.record_count) for f in t.plan_files())
    entry_ids = _entry_ids(t)
    snapshot = t.current_snapshot()
    assert len(read_manifest_list(t.io, f"{t.location}/{snapshot.manifest_list}")) == 30
    result = t.compaction.rewrite_manifests(probe_filter="mission_id = 1")
    assert result.manifests_before == 30 and result.manifests_after == 1 and result.entries == 90
    assert result.snapshot_id == t.current_snapshot().snapshot_id
    new = t.current_snapshot()
    assert new.operation == "replace" and new.summary["total-data-files"] == snapshot.summary["total-data-files"]
    assert sorted((f.path, f.record_count) for f in t.plan_files()) == files_before
    assert _entry_ids(t) == entry_ids  # snapshot ids and sequence numbers kept
    assert result.planning_seconds_after < result.planning_seconds_before
    assert t.compaction.rewrite_manifests().snapshot_id is None  # nothing left to merge
    assert planning_seconds(t, "mission_id = 1") > 0


def test_rewrite_manifests_clusters_by_partition(local_catalog):
    """COMPACT-29: entries sorted by partition, so each new manifest covers a narrow range."""
    t = small_files_table(local_catalog, appends=30, rows=200, properties={"commit.manifest.min-count-to-merge": "0"})
    manifests = read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")
    per_entry = sum(m.length for m in manifests) / 90
    result = t.compaction.rewrite_manifests(target_size=int(per_entry * 30) + 1)
    assert result.manifests_after == 3
    manifests = read_manifest_list(t.io, f"{t.location}/{t.current_snapshot().manifest_list}")
    assert all(m.partitions[0].lower_bound == m.partitions[0].upper_bound for m in manifests)  # one mission each
    assert len(t.scan("mission_id = 1").plan().tasks) == 30
    assert t.scan("mission_id = 1").plan().manifests_read == 1


def _entry_ids(t):
    snapshot = t.current_snapshot()
    out = {}
    for m in read_manifest_list(t.io, f"{t.location}/{snapshot.manifest_list}"):
        for e in read_manifest(t.io, f"{t.location}/{m.path}", m, t.metadata.spec_by_id(m.spec_id), t.schema()):
            if e.is_live:
                out[e.data_file.path] = (e.snapshot_id, e.sequence_number)
    return out


def test_should_stop_starts_no_further_partition_and_releases_leases(local_catalog):
    """COMPACT-31: once asked to stop, no partition starts; running groups commit; leases are released."""
    t = small_files_table(local_catalog, properties={"compaction.target-file-size-bytes": "30000"})
    before = t.scan().to_arrow()
    done: list[str] = []
    result = t.compaction.run("binpack", min_age_seconds=0, max_concurrent_groups=1,
                              should_stop=lambda: bool(done),
                              progress=lambda _d, _t, g: done.append(g.status))
    # Each group is at least the target size, so it is committed alone as soon as it is rewritten.
    # The stop comes with the first commit; the second partition started just before that
    # commit (rewrites never wait on commits), so it finishes and commits; the third never starts.
    assert result.status == "stopped"
    assert result.groups_committed == 2 and result.groups_skipped == 1
    assert [g.status for g in result.groups].count("stopped") == 1
    assert Leases(local_catalog).live(t.metadata.table_uuid, LEASE_KIND) == []
    assert rows(t.refresh().scan().to_arrow()) == rows(before) and t.check().ok
    again = t.compaction.run("binpack", min_age_seconds=0)
    assert again.groups_committed == 1 and again.status == "done"


def test_leases_taken_while_planning_are_released_when_no_partition_starts(local_catalog, monkeypatch):
    """COMPACT-37, COMPACT-31: the partition leases taken in the planning session (COMPACT-39) are
    released when the run stops before its first partition; another compactor then takes them."""
    # spec: COMPACT-37, COMPACT-31, COMPACT-39
    import lakefmt.compaction

    monkeypatch.setattr(lakefmt.compaction, "PLAN_WAIT_SECONDS", 60.0)
    t = small_files_table(local_catalog)
    taken: list[list[str]] = []
    take_in = PartitionLeases.take_in

    def recorded(self: PartitionLeases, s: object, keys: list[str]) -> None:
        take_in(self, s, keys)
        taken.append(sorted(self._taken_at))

    monkeypatch.setattr(PartitionLeases, "take_in", recorded)
    result = t.compaction.run("binpack", min_age_seconds=0, should_stop=lambda: True)
    assert len(taken) == 1 and len(taken[0]) == 3  # every partition's lease, in the planning session
    assert result.status == "stopped" and result.groups_committed == 0 and result.groups_skipped == 3
    assert Leases(local_catalog).live(t.metadata.table_uuid, LEASE_KIND) == []
    other = t.catalog.load_table(".".join(t.identifier))
    assert other.compaction.run("binpack", min_age_seconds=0, owner="compactor:b").groups_committed == 3


def test_plan_reports_each_partitions_ingest_time(local_catalog):
    """COMPACT-5: the plan carries each partition's ingest time (the newest non-replace snapshot adding to it)."""
    t = small_files_table(local_catalog, appends=2)
    last_append = t.current_snapshot().timestamp_ms
    plan = t.compaction.plan("binpack", min_age_seconds=0)
    assert {p.ingested_ms for p in plan.partitions} == {last_append}
