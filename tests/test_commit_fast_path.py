"""The small-append commit path: attempts prepared outside the catalog lock (COMMIT-7),
one sync per commit (COMMIT-20) and the catalog's write-ahead log (CAT-22).

Real parts only: a DuckDB catalog file on disk, several handles and processes on one table.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import lakefmt
from lakefmt.catalog_access import WAL_CHECKPOINT_BYTES
from tests.conftest import rows
from tests.maintenance.helpers import all_files

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])


def batch(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [part] * n}, schema=SCHEMA)


def wal(catalog: lakefmt.Catalog) -> Path:
    return Path(catalog.catalog_path + ".wal")


def wal_size(catalog: lakefmt.Catalog) -> int:
    return wal(catalog).stat().st_size if wal(catalog).exists() else 0


@pytest.fixture
def table(tmp_path: Path) -> lakefmt.Table:
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    return catalog.create_table("fast.t", SCHEMA, partition_by=["part"])


def test_stale_handles_rebuild_and_leave_no_unreferenced_file(table):
    """Two handles append in turn: each commit is prepared on a stale base, rebuilt under the lock, and the
    stale attempt's manifest list and metadata file are deleted (COMMIT-7, COMMIT-14)."""
    other = table.catalog.load_table("fast.t")
    expected = []
    for i in range(6):
        handle = table if i % 2 == 0 else other
        data = batch(i * 10, 10, "ab"[i % 2])
        handle.append(data)
        expected.append(data)
    for handle in (table, other):
        handle.release_write_token()
    final = table.catalog.load_table("fast.t")
    assert rows(final.scan().to_arrow()) == rows(pa.concat_tables(expected))
    assert len(final.metadata.snapshots) == 6
    reachable = final.maintenance.reachable_files()
    assert {p for p in all_files(final) if p not in reachable} == set()
    assert final.check().ok


def test_commits_live_in_the_log_until_a_checkpoint(table):
    """Appends leave their commits in the write-ahead log, which stays bounded; readers and new processes'
    catalogs see every commit; a checkpoint folds it into the file (CAT-22)."""
    catalog = table.catalog
    assert wal_size(catalog) == 0  # creating the table checkpointed
    expected = []
    sizes = []
    for i in range(40):
        data = batch(i, 1)
        table.append(data)
        expected.append(data)
        sizes.append(wal_size(catalog))
    assert max(sizes) > 0, "appends checkpointed at every session"
    assert max(sizes) < WAL_CHECKPOINT_BYTES + 8 * 1024, sizes  # checkpointed once past the threshold
    assert min(sizes[10:]) < max(sizes[10:])  # ...and more than once
    reader = lakefmt.Catalog(catalog.warehouse, read_only=True)
    assert rows(reader.load_table("fast.t").scan().to_arrow()) == rows(pa.concat_tables(expected))
    assert len(catalog.commit_log("fast.t")) == 41


def test_a_copy_of_the_file_alone_holds_every_commit_after_a_checkpoint(table, tmp_path):
    catalog = table.catalog
    for i in range(3):
        table.append(batch(i, 1))
    assert wal_size(catalog) > 0
    catalog.checkpoint()
    assert wal_size(catalog) == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copyfile(catalog.catalog_path, copy / "catalog.duckdb")
    con = duckdb.connect(str(copy / "catalog.duckdb"), read_only=True)
    try:
        logged = con.execute("SELECT count(*) FROM commit_log WHERE name = 't'").fetchone()
        location = con.execute("SELECT metadata_location FROM tables WHERE name = 't'").fetchone()
    finally:
        con.close()
    assert logged == (4,)
    assert location == (catalog.current_metadata_location("fast.t"),)


def test_a_refused_operation_leaves_the_catalog_files_unchanged(table):
    """A failed session checkpoints nothing: the file and its log stay byte for byte (CAT-22)."""
    catalog = table.catalog
    table.append(batch(0, 1))
    before = {p: Path(p).read_bytes() for p in (catalog.catalog_path, str(wal(catalog)))}
    assert before[str(wal(catalog))]
    with pytest.raises(lakefmt.TableExistsError):
        catalog.create_table("fast.t", SCHEMA)
    assert {p: Path(p).read_bytes() for p in before} == before


def test_the_files_of_a_refused_replay_are_deleted(table):
    """An idempotent append replayed after its commit: the prepared attempt's files are deleted (PROGRESS-3)."""
    table.append(batch(0, 2), idempotency=("w", 1))
    other = table.catalog.load_table("fast.t")
    files_before = all_files(other)
    with pytest.raises(lakefmt.AlreadyCommittedError):
        other.append(batch(0, 2), idempotency=("w", 1))
    assert all_files(other) == files_before
    assert rows(other.refresh().scan().to_arrow()) == rows(batch(0, 2))
