"""Crash safety of the commit protocol and orphan removal after a crash (COMMIT-1 … 6, MAINT-8 … 11).

A writer process is killed with SIGKILL at each named step of a commit. Afterwards the
table passes ``check``, every committed row is readable, and orphan removal — with the
grace period lifted and the dead writer's lease ended — deletes exactly the files the
dead writer left behind, and nothing else.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.conftest import rows
from tests.maintenance.helpers import (
    all_files,
    batch,
    end_write_leases_of,
    kill,
    make_table,
    spawn_paused_writer,
)

POINTS = ["after-data-files", "after-manifests", "after-manifest-list", "after-metadata-file", "before-swap",
          "after-swap"]

pytestmark = pytest.mark.multiprocess


def crash_and_reclaim(catalog, tmp_path, point: str, op: str, **config) -> None:
    t = make_table(catalog)
    t.append(batch(0, 30))
    t.append(batch(30, 30))
    base = t.metadata.current_snapshot_id
    committed_before = t.scan().to_arrow()
    before = all_files(t)

    kill(spawn_paused_writer(catalog, "maint.t", point, tmp_path, op=op, **config))

    t = catalog.load_table("maint.t")
    committed = point == "after-swap"
    assert (t.metadata.current_snapshot_id != base) == committed
    if not committed:
        expected = committed_before
    elif op == "append":
        expected = pa.concat_tables([committed_before, batch(config["start"], config["rows"])])
    else:
        expected = committed_before.filter(pc.invert(pc.equal(committed_before["part"], "a")))
    report = t.check()
    assert report.ok, report.format()
    assert rows(t.scan().to_arrow()) == rows(expected)

    left = all_files(t) - before
    reachable = t.maintenance.reachable_files()
    dead_writers_orphans = {p for p in left if p not in reachable}
    assert left, "the writer wrote nothing before the kill"
    if committed:
        assert dead_writers_orphans == set()
    else:
        assert dead_writers_orphans == left  # nothing of the dead writer is referenced
    assert end_write_leases_of(catalog, t, left) == 1  # the dead writer's lease, as if it had expired
    result = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert set(result.orphan_files) == dead_writers_orphans
    assert result.failed_deletes == ()
    assert all_files(t) == before | (left - dead_writers_orphans)
    assert t.check().ok
    assert rows(t.scan().to_arrow()) == rows(expected)


@pytest.mark.parametrize("point", POINTS)
def test_killed_appender_leaves_a_valid_table_and_reclaimable_orphans(catalog, tmp_path, point):
    crash_and_reclaim(catalog, tmp_path, point, "append", start=1000, rows=40)


@pytest.mark.parametrize("point", ["after-manifests", "after-metadata-file", "after-swap"])
def test_killed_copy_on_write_delete(local_catalog, tmp_path, point):
    # A delete rewrites manifests (COMMIT-9) and data files of the partition it touches.
    crash_and_reclaim(local_catalog, tmp_path, point, "delete", filter="part = 'a'")
