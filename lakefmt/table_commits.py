"""A table handle's commits: file changes, metadata updates, the current snapshot, replays (spec/commits.md).

These are the bodies of :class:`~lakefmt.table.Table`'s public commit API. Each commit
goes through :func:`~lakefmt.commit.commit_table` with the handle's write lease, which the
calling method holds (CAT-10), and leaves the handle on the metadata it committed:

* :func:`commit_file_change`: a change of the file set as one snapshot (COMMIT-1..7),
  refused when an added file is gone from storage (COMMIT-19), its own files deleted on
  failure unless the swap's outcome is unknown (COMMIT-11, COMMIT-21);
* :func:`commit_build` and :func:`checked_updates`: metadata-only commits, rebuilt on the new
  base when another writer got there first;
* :func:`rollback_to` and :func:`set_current_snapshot`: moving the current snapshot, as a
  commit (MAINT-13, COMMIT-16);
* :func:`last_committed_batch` and :func:`check_writer_batch`: idempotent commits
  (PROGRESS-1, PROGRESS-3).

Example:
    >>> with t.write_lease() as lease:
    ...     commit_file_change(t, lease, FileChange("append", added=files))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakefmt.commit import Build, FileChange, SnapshotProducer, commit_table
from lakefmt.errors import CommitFileMissingError, CommitStateUnknownError, ValidationError
from lakefmt.hooks import checkpoint
from lakefmt.idempotency import WriterBatch, last_batch_in_history
from lakefmt.updates import AssertCurrentSnapshot, Requirement, SetCurrentSnapshot, Update

if TYPE_CHECKING:
    from lakefmt.catalog_file import CatalogSession
    from lakefmt.leases import WriteLease
    from lakefmt.manifest import DataFile
    from lakefmt.metadata import Snapshot, TableMetadata
    from lakefmt.table import Table


def commit_file_change(table: Table, lease: WriteLease, change: FileChange, *,
                       cleanup_on_failure: Sequence[DataFile] = (),
                       after_swap: Callable[[CatalogSession], object] | None = None) -> Snapshot:
    """See :meth:`lakefmt.table.Table.commit_change` (COMMIT-1..7, COMMIT-11, COMMIT-19, COMMIT-21)."""
    checkpoint("after-data-files")
    producer = SnapshotProducer(table.io, table.location, change, token=lease.token)
    added = {f"{table.location}/{f.path}": f.file_size_bytes for f in change.added}
    try:
        missing = table.io.missing_or_short(added)
        if missing:
            raise CommitFileMissingError(
                f"{len(missing)} of the {len(added)} data file(s) this {change.operation} adds to {table.name} "
                f"are missing from storage or shorter than written, e.g. {missing[0]}: something deleted them "
                "before the commit. Nothing was committed; write the data again")
        table.metadata, table.metadata_location = commit_table(
            table.catalog, table.identifier, (table.metadata, table.metadata_location), producer.build,
            operation=change.operation, snapshot_id=producer.snapshot_id,
            summary={"operation": change.operation}, token=lease.token, writer_batch=change.writer_batch,
            lease=lease, after_swap=after_swap)
    except CommitStateUnknownError:
        raise
    except BaseException:
        producer.cleanup()
        cleanup = [f"{table.location}/{f.path}" for f in cleanup_on_failure]
        table.io.delete_many(cleanup)
        lease.settle(cleanup)
        raise
    lease.settle(added)
    snapshot = table.metadata.current_snapshot
    assert snapshot is not None
    return snapshot


def commit_build(table: Table, lease: WriteLease, build: Build, *, operation: str) -> TableMetadata:
    """Commit what ``build(base)`` produces, rebuilt on a new base after a lost race (COMMIT-1..6)."""
    table.metadata, table.metadata_location = commit_table(
        table.catalog, table.identifier, (table.metadata, table.metadata_location), build, operation=operation,
        token=lease.token, lease=lease)
    return table.metadata


def checked_updates(updates: Sequence[Update], requirements: Sequence[Requirement] = ()) -> Build:
    """A build committing ``updates`` on any base that meets every one of ``requirements``."""
    def build(base: TableMetadata) -> tuple[list[Update], list[str]]:
        for requirement in requirements:
            requirement.check(base)
        return list(updates), []

    return build


def rollback_to(table: Table, snapshot_id: int) -> Snapshot:
    """See :meth:`lakefmt.table.Table.rollback_to` (MAINT-13, COMMIT-16)."""
    table.refresh()
    if snapshot_id not in {s.snapshot_id for s in table.metadata.ancestors(table.metadata.current_snapshot_id)}:
        table.metadata.snapshot_by_id(snapshot_id, table=table.name)  # NoSuchSnapshotError if not retained
        raise ValidationError(f"snapshot {snapshot_id} is not an ancestor of the current snapshot "
                              f"{table.metadata.current_snapshot_id}; use set_current_snapshot")
    return _set_current(table, snapshot_id, "rollback")


def set_current_snapshot(table: Table, snapshot_id: int) -> Snapshot:
    """See :meth:`lakefmt.table.Table.set_current_snapshot` (MAINT-13, COMMIT-16)."""
    table.refresh()
    return _set_current(table, snapshot_id, "set-current-snapshot")


def _set_current(table: Table, snapshot_id: int, operation: str) -> Snapshot:
    snapshot = table.metadata.snapshot_by_id(snapshot_id, table=table.name)
    current = table.metadata.current_snapshot_id
    if current != snapshot_id:  # already current: nothing to commit
        table.commit_updates([SetCurrentSnapshot(snapshot_id)], requirements=[AssertCurrentSnapshot(current)],
                             operation=operation)
    return snapshot


def last_committed_batch(table: Table, writer_id: str) -> int | None:
    """See :meth:`lakefmt.table.Table.last_committed_batch` (PROGRESS-1)."""
    WriterBatch(writer_id, 0)  # validates the id
    with table.catalog.session() as s:
        recorded = s.last_committed_batch(table.metadata.table_uuid, writer_id, migrate=False)
    in_history = last_batch_in_history(table.metadata, writer_id)
    return max((b for b in (recorded, in_history) if b is not None), default=None)


def check_writer_batch(table: Table, idempotency: WriterBatch | tuple[str, int] | None) -> WriterBatch | None:
    """Validate ``idempotency`` and refuse a known replay before any file is written (PROGRESS-3).

    The commit checks again, under the catalog lock, against what is recorded then.
    """
    if idempotency is None:
        return None
    writer_batch = WriterBatch.of(idempotency)
    writer_batch.check(table.last_committed_batch(writer_batch.writer_id), where="checked before writing")
    return writer_batch
