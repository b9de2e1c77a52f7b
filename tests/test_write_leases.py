"""Write-intent leases for the whole of a write (spec/catalog.md CAT-10, spec/commits.md COMMIT-19).

A write that outlives ``write.lease-seconds`` keeps its files: the lease is renewed in
the background for as long as the write has uncommitted files. A commit whose lease
was lost, or whose added file is gone from storage, fails and commits nothing.

The first test runs a real writer process paused between its data files and its commit,
and a real second process removing orphans in a loop with no grace period. Run as a
script, this module is that orphan remover:
``python -m tests.test_write_leases '<json config>'``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.commit import FileChange
from lakefmt.errors import CommitFileMissingError, LakefmtError, WriteLeaseLostError
from tests.conftest import rows
from tests.maintenance.helpers import SCHEMA, all_files, batch, kill

REPO = Path(__file__).resolve().parents[1]


def remove_orphans_forever(config: dict) -> None:
    """Loop ``remove_orphan_files(older_than=0)``; log each finished run; stop when the stop file exists."""
    catalog = lakefmt.Catalog(config["warehouse"])
    table = catalog.load_table(config["table"])
    log = Path(config["log"])
    while not os.path.exists(config["stop"]):
        started = time.time()
        try:
            result = table.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
        except LakefmtError as exc:  # e.g. a concurrent commit moved the table: not this test's subject
            print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        with log.open("a") as f:
            f.write(json.dumps({"started": started, "deleted": list(result.orphan_files)}) + "\n")


def start_remover(catalog: lakefmt.Catalog, identifier: str, tmp_path: Path) -> tuple[subprocess.Popen[str], Path,
                                                                                       Path]:
    log, stop = tmp_path / f"remover-{uuid.uuid4().hex}.jsonl", tmp_path / f"stop-{uuid.uuid4().hex}"
    config = {"warehouse": catalog.warehouse, "table": identifier, "log": str(log), "stop": str(stop)}
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.test_write_leases", json.dumps(config)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, log, stop


def remover_runs(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def wait_until(condition, what: str, timeout: float = 180, procs: tuple[subprocess.Popen[str], ...] = ()) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"a helper process exited with {proc.returncode} while waiting for {what}:"
                                     f"\n{out}\n{err}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def local(tmp_path: Path) -> lakefmt.Catalog:
    return lakefmt.Catalog(str(tmp_path / "warehouse"), create=True)


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_an_append_outliving_its_lease_keeps_its_files_beside_a_looping_orphan_remover(local, tmp_path):
    """Issue 10 item 1: lease of 2 s, an append paused well past it, orphans removed with no grace period."""
    ttl = 2.0
    t = local.create_table("leases.t", SCHEMA, partition_by=["part"],
                             properties={"write.lease-seconds": str(int(ttl))})
    t.append(batch(0, 60))
    remover, log, stop = start_remover(local, "leases.t", tmp_path)
    marker, resume = tmp_path / "writer-paused", tmp_path / "writer-resume"
    config = {"warehouse": local.warehouse, "catalog_path": local.catalog_path, "storage_options": None,
              "table": "leases.t", "op": "append", "start": 1000, "rows": 300}
    env = dict(os.environ, LAKEFMT_PAUSE_AT="after-data-files", LAKEFMT_PAUSE_FILE=str(marker),
               LAKEFMT_RESUME_FILE=str(resume),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    writer = subprocess.Popen([sys.executable, "-m", "tests.maintenance.writer_process", json.dumps(config)],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(remover_runs(log)) >= 1, "the orphan remover's first run", procs=(remover,))
        wait_until(marker.exists, "the writer to write its data files", procs=(writer, remover))
        paused_at = time.time()
        in_flight = {p for p in all_files(t) if p.startswith("data/")} - {
            f.path for f in t.refresh().plan_files()}
        assert in_flight, "the paused writer has written no data file"
        # Without renewal the lease taken when the write started has expired by paused_at + ttl.
        # Wait for two complete orphan-removal runs that began after that moment.
        wait_until(lambda: sum(r["started"] > paused_at + ttl + 0.5 for r in remover_runs(log)) >= 2,
                   "two orphan-removal runs after the lease's first lifetime", procs=(writer, remover))
        assert in_flight <= all_files(t), "orphan removal deleted files of a live write"
        resume.write_text("go")
        out, err = writer.communicate(timeout=180)
        assert writer.returncode == 0, f"writer failed:\n{out}\n{err}"
    finally:
        stop.write_text("stop")
        if not resume.exists() and writer.poll() is None:
            kill(writer)  # failed before it was let go: it would stay paused
        for proc in (writer, remover):
            if proc.poll() is None:
                try:
                    proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    kill(proc)
    assert remover.returncode == 0, remover.stderr
    deleted = {p for r in remover_runs(log) for p in r["deleted"]}
    assert not deleted & in_flight
    t = local.load_table("leases.t")
    report = t.check()
    assert report.ok, report.format()
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(0, 60), batch(1000, 300)]))


def write_lease_row(catalog: lakefmt.Catalog, table: lakefmt.Table, token: str) -> tuple[str, float] | None:
    with catalog.session() as s:
        row = s.con.execute("SELECT owner, expires_at FROM leases WHERE table_uuid = ? AND kind = 'write' "
                            "AND lease_key = ?", [table.metadata.table_uuid, token]).fetchone()
    return None if row is None else (row[0], row[1])


def set_write_lease(catalog: lakefmt.Catalog, table: lakefmt.Table, token: str, *, owner: str,
                    expires_at: float) -> None:
    """What a stalled writer's lease looks like to others: expired, or taken over by another owner."""
    with catalog.session() as s:
        s.con.execute("UPDATE leases SET owner = ?, expires_at = ? WHERE table_uuid = ? AND kind = 'write' "
                      "AND lease_key = ?", [owner, expires_at, table.metadata.table_uuid, token])


@pytest.mark.parametrize("how", ["expired", "taken-over"])
def test_a_commit_whose_lease_was_lost_fails_and_commits_nothing(local, how):
    """COMMIT-19: the lease is checked under the catalog lock; the write's files are deleted."""
    t = local.create_table("leases.t", SCHEMA, partition_by=["part"])
    t.append(batch(0, 30))
    before_files, before_snapshot = all_files(t), t.current_snapshot().snapshot_id
    with pytest.raises(WriteLeaseLostError, match="expired or was taken over") as info, t.write_lease() as lease:
        files = t.write_data_files(batch(100, 30))
        assert len(files) == 3
        owner = lease.token if how == "expired" else "another-writer"
        set_write_lease(local, t, lease.token, owner=owner,
                        expires_at=time.time() - 1 if how == "expired" else time.time() + 600)
        t.commit_change(FileChange("append", added=files))
    assert "write.lease-seconds" in str(info.value)
    t = local.load_table("leases.t")
    assert t.current_snapshot().snapshot_id == before_snapshot
    assert all_files(t) == before_files  # data files, manifests, manifest list: all deleted
    assert rows(t.scan().to_arrow()) == rows(batch(0, 30)) and t.check().ok
    # A later write takes a new lease and succeeds.
    t.append(batch(200, 30))
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(0, 30), batch(200, 30)]))


def test_an_expired_lease_is_never_renewed(local):
    """CAT-10: renewal only extends a live lease of its own owner; once lost, it stays lost."""
    t = local.create_table("leases.t", SCHEMA)
    with t.write_lease() as lease:
        set_write_lease(local, t, lease.token, owner=lease.token, expires_at=time.time() - 1)
        assert lease.renew() is False and lease.lost
        assert write_lease_row(local, t, lease.token)[1] < time.time()
        assert t.write_token() == lease.token  # still held: no new token for files of this write
    assert t.write_token() != lease.token  # idle again: a fresh lease for the next write


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_commit_whose_added_file_is_missing_fails_and_commits_nothing(catalog, damage):
    """COMMIT-19: each added data file must exist with its recorded size before the swap."""
    t = catalog.create_table("leases.t", SCHEMA, partition_by=["part"])
    t.append(batch(0, 30))
    before_files, before_snapshot = all_files(t), t.current_snapshot().snapshot_id
    files = t.write_data_files(batch(100, 30))
    victim = f"{t.location}/{files[1].path}"
    if damage == "deleted":
        t.io.delete(victim)
    else:
        data = t.io.read_bytes(victim)
        t.io.delete(victim)
        t.io.write_bytes(victim, data[: len(data) // 2])
    with pytest.raises(CommitFileMissingError, match="missing from storage or shorter") as info:
        t.commit_change(FileChange("append", added=files), cleanup_on_failure=files)
    assert files[1].path in str(info.value)
    assert t.refresh().current_snapshot().snapshot_id == before_snapshot
    assert all_files(t) == before_files
    assert rows(t.scan().to_arrow()) == rows(batch(0, 30)) and t.check().ok


def test_the_lease_is_renewed_while_files_await_their_commit_and_not_after(local):
    """CAT-10: renewed before half its lifetime for as long as uncommitted files exist."""
    t = local.create_table("leases.t", SCHEMA, properties={"write.lease-seconds": "1"})
    files = t.write_data_files(batch(0, 10))  # outside any block: the files alone keep it renewed
    lease = t._write_lease
    assert lease is not None and lease.active
    first_expiry = write_lease_row(local, t, lease.token)[1]
    wait_until(lambda: write_lease_row(local, t, lease.token)[1] > first_expiry + 1.0,
               "the lease to be renewed past its first lifetime", timeout=60)
    assert all(t.io.exists(f"{t.location}/{f.path}") for f in files)
    t.commit_change(FileChange("append", added=files))
    assert not lease.active and not lease.lost
    assert rows(t.scan().to_arrow()) == rows(batch(0, 10))


@pytest.mark.timeout(300)
def test_a_compaction_outliving_its_lease_keeps_its_outputs(local):
    """CAT-10 for compaction: a run holds the write lease; orphan removal in the middle spares its outputs."""
    t = local.create_table("leases.t", SCHEMA, partition_by=["part"], properties={"write.lease-seconds": "1"})
    for i in range(6):
        t.append(batch(i * 30, 30))
    expected = rows(t.scan().to_arrow())
    outputs: list[str] = []

    def outlive_the_lease(point: str, info: dict) -> None:
        if point != "before-commit" or outputs:
            return
        outputs.extend(info["paths"])
        lease = t._write_lease
        started = time.time()
        wait_until(lambda: write_lease_row(local, t, lease.token)[1] > started + 2.0,
                   "the compaction's lease to be renewed past two lifetimes", timeout=120)
        other = local.load_table("leases.t")
        removed = other.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
        assert not set(removed.orphan_files) & {p.removeprefix(t.location + "/") for p in outputs}

    result = t.compaction.run("binpack", min_age_seconds=0, hook=outlive_the_lease)
    assert result.groups_committed == 3, result.summary()
    assert all(t.io.exists(p) for p in outputs)
    t = local.load_table("leases.t")
    assert t.check().ok and rows(t.scan().to_arrow()) == expected


if __name__ == "__main__":
    remove_orphans_forever(json.loads(sys.argv[1]))
