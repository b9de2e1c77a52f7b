"""What a swap that changed nothing means: a lost race or a lost write lease (CAT-4, COMMIT-7, COMMIT-19).

A local commit reads nothing before its swap: the ``UPDATE`` checks the pointer and the
lease together, and only a swap that changed no row asks which of the two failed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.commit import FileChange
from lakefmt.errors import WriteLeaseLostError
from tests.conftest import rows
from tests.maintenance.helpers import SCHEMA, all_files, batch


@pytest.fixture
def local(tmp_path: Path) -> lakefmt.Catalog:
    return lakefmt.Catalog(str(tmp_path / "warehouse"), create=True)


def take_over_lease(catalog: lakefmt.Catalog, table: lakefmt.Table, token: str) -> None:
    with catalog.session() as s:
        s.con.execute("UPDATE leases SET owner = 'another-writer', expires_at = ? WHERE table_uuid = ? "
                      "AND kind = 'write' AND lease_key = ?", [time.time() + 600, table.metadata.table_uuid, token])


def commit_log(catalog: lakefmt.Catalog, table: lakefmt.Table) -> list[tuple[int, str]]:
    with catalog.session() as s:
        return [(r.version, r.operation) for r in s.commit_records(table_uuid=table.metadata.table_uuid)]


def test_a_stale_commit_is_rebuilt_in_the_same_session_and_logged_once(local):
    # spec: COMMIT-7, COMMIT-19, CAT-4, CAT-5
    t = local.create_table("swap.t", SCHEMA, partition_by=["part"])
    t.append(batch(0, 30))
    other = local.load_table("swap.t")
    other.append(batch(100, 30))  # t's handle is now stale: its first swap changes nothing
    t.append(batch(200, 30))
    t = local.load_table("swap.t")
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(0, 30), batch(100, 30), batch(200, 30)]))
    assert sorted(commit_log(local, t)) == [(1, "create"), (2, "append"), (3, "append"), (4, "append")]
    assert t.check().ok


def test_a_commit_that_lost_both_the_race_and_its_lease_fails_with_the_lease_error(local):
    # spec: COMMIT-19, COMMIT-7
    t = local.create_table("swap.t", SCHEMA, partition_by=["part"])
    t.append(batch(0, 30))
    with pytest.raises(WriteLeaseLostError, match="expired or was taken over"), t.write_lease() as lease:
        files = t.write_data_files(batch(100, 30))
        local.load_table("swap.t").append(batch(200, 30))  # the pointer moves ...
        take_over_lease(local, t, lease.token)  # ... and the lease is lost
        before = all_files(local.load_table("swap.t")) - {f.path for f in files}
        t.commit_change(FileChange("append", added=files), cleanup_on_failure=files)
    t = local.load_table("swap.t")
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([batch(0, 30), batch(200, 30)]))
    assert all_files(t) == before  # the write's data files, manifests and metadata files: all deleted
    assert [v for v, _ in commit_log(local, t)].count(4) == 0 and t.check().ok
