"""Table: the public face of one lakefmt table (reads, writes, schema changes, commits).

Every change goes down the same path: build a :class:`~lakefmt.commit.FileChange`
or a list of metadata updates, then :func:`~lakefmt.commit.commit_table` swaps the
catalog pointer (spec/commits.md). Compaction and maintenance use the public
methods of this class (``write_data_files``, ``commit_change``, ``commit_updates``),
never the modules below it. The bodies of the commit methods are in
:mod:`lakefmt.table_commits`, those of the row-level ones in :mod:`lakefmt.row_deletes`.

Example:
    >>> t = cat.load_table("artemis.downlinks")
    >>> t.append(batch)                                        # one snapshot
    >>> t.scan(filter="payload_id = 3", columns=["ts"]).to_arrow()
    >>> t.delete(filter="payload_id = 7")
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from lakefmt import row_deletes, table_commits
from lakefmt.commit import Build, FileChange
from lakefmt.errors import ValidationError
from lakefmt.expressions import Expression
from lakefmt.idempotency import WriterBatch
from lakefmt.leases import WriteLease, current_or_new_write_lease
from lakefmt.manifest import DataFile
from lakefmt.metadata import Snapshot, TableMetadata, read_metadata
from lakefmt.partitioning import PartitionSpec
from lakefmt.properties import (
    COMPRESSION_LEVEL, MIN_COMPRESSION_SAVING, PAGE_SIZE_BYTES, ROW_GROUP_ROWS, TARGET_FILE_SIZE, WRITE_LEASE_SECONDS,
    int_property, number_property, validate_properties,
)
from lakefmt.scan import DataScan
from lakefmt.schema import Schema
from lakefmt.sorting import SortOrder
from lakefmt.table_creation import new_table_metadata  # noqa: F401 - where it used to be
from lakefmt.updates import RemoveProperties, Requirement, SetProperties, Update, UpgradeFormatVersion
from lakefmt.write import WriteOptions, conform, write_data_files

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog
    from lakefmt.catalog_file import CatalogSession
    from lakefmt.schema_update import SchemaUpdate
    from lakefmt.compaction import Compaction
    from lakefmt.maintenance import CheckReport, Maintenance, TableStats

F = TypeVar("F", bound=Callable[..., Any])


def under_write_lease(method: F) -> F:
    """Run a function whose first argument is a :class:`Table` inside its :meth:`Table.write_lease`.

    Every writing method of the table uses it; so does a long job that writes files
    named with the table's writer token, such as a compaction run (CAT-10, COMMIT-21).
    """
    @functools.wraps(method)
    def wrapper(self: Table, *args: Any, **kwargs: Any) -> Any:
        with self.write_lease():
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class HistoryEntry:
    """One entry of the snapshot log: when a snapshot became current."""

    made_current_at: datetime
    snapshot_id: int
    parent_snapshot_id: int | None
    operation: str
    is_current_ancestor: bool
    summary: dict[str, str]


class Table:
    """A handle on one table; it caches the metadata it last saw (``refresh()`` re-reads it)."""

    def __init__(self, catalog: Catalog, identifier: tuple[str, str], metadata: TableMetadata,
                 metadata_location: str) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.metadata = metadata
        self.metadata_location = metadata_location
        self._write_lease: WriteLease | None = None

    def __repr__(self) -> str:
        return f"Table({self.name!r}, snapshot={self.metadata.current_snapshot_id})"

    # -- what the table is -------------------------------------------------------
    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    @property
    def io(self) -> Any:
        return self.catalog.io

    @property
    def location(self) -> str:
        return self.metadata.location

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.properties)

    def schema(self) -> Schema:
        return self.metadata.schema

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(f.name, f.type.to_arrow(), nullable=not f.required)
                          for f in self.metadata.schema.fields])

    def spec(self) -> PartitionSpec:
        return self.metadata.spec

    def sort_order(self) -> SortOrder:
        return self.metadata.sort_order

    def refresh(self, location: str | None = None) -> Table:
        """Load the current metadata, if it changed since this object last saw it.

        ``location`` is a metadata location the caller has just read from the catalog
        (inside its own catalog session); without it the catalog is asked.
        """
        location = location or self.catalog.current_metadata_location(self.identifier)
        if location != self.metadata_location:
            self.metadata, self.metadata_location = read_metadata(self.io, location), location
        return self

    def current_snapshot(self) -> Snapshot | None:
        return self.metadata.current_snapshot

    def snapshots(self) -> list[Snapshot]:
        return list(self.metadata.snapshots)

    def snapshot(self, snapshot_id: int) -> Snapshot:
        return self.metadata.snapshot_by_id(snapshot_id, table=self.name)

    def history(self) -> list[HistoryEntry]:
        """When each snapshot became current, oldest first."""
        ancestors = {s.snapshot_id for s in self.metadata.ancestors(self.metadata.current_snapshot_id)}
        out = []
        for entry in self.metadata.snapshot_log:
            try:
                snap = self.metadata.snapshot_by_id(entry.value)
            except KeyError:
                continue
            out.append(HistoryEntry(datetime.fromtimestamp(entry.timestamp_ms / 1000, timezone.utc),
                                    snap.snapshot_id, snap.parent_snapshot_id, snap.operation,
                                    snap.snapshot_id in ancestors, dict(snap.summary)))
        return out

    @property
    def compaction(self) -> Compaction:
        """Compaction of this table's small files and manifests (spec/compaction.md)."""
        from lakefmt.compaction import Compaction  # maintenance sits above the table layer

        return Compaction(self)

    @property
    def maintenance(self) -> Maintenance:
        """Snapshot expiry, orphan-file removal, statistics and checks (spec/maintenance.md)."""
        from lakefmt.maintenance import Maintenance  # maintenance sits above the table layer

        return Maintenance(self)

    def stats(self) -> TableStats:
        """Live, historical and orphan storage, per partition too (see :meth:`Maintenance.stats`)."""
        return self.maintenance.stats()

    def check(self) -> CheckReport:
        """Validate the table at rest against spec/ (see :meth:`Maintenance.check`)."""
        return self.maintenance.check()

    # -- reading -----------------------------------------------------------------
    def scan(self, filter: str | Expression | None = None, columns: Sequence[str] | None = None, *,
             snapshot_id: int | None = None, as_of: datetime | None = None) -> DataScan:
        """A scan of the current snapshot, or of ``snapshot_id`` / the snapshot current ``as_of``."""
        return DataScan.create(self.io, self.metadata, filter=filter, columns=columns,
                               snapshot_id=snapshot_id, as_of=as_of, table=self.name)

    def plan_files(self, filter: str | Expression | None = None, *, snapshot_id: int | None = None,
                   as_of: datetime | None = None) -> list[DataFile]:
        """The data files a scan with ``filter`` would read (from manifests only)."""
        return self.scan(filter, snapshot_id=snapshot_id, as_of=as_of).plan_files()

    # -- writing -----------------------------------------------------------------
    def write_token(self) -> str:
        """This handle's writer token, under a live write-intent lease in the catalog (CAT-10).

        Every file this handle writes carries the token in its name, so orphan removal
        leaves in-flight files alone. The lease is taken on first use; while a write
        holds it (:meth:`write_lease`) or files of :meth:`write_data_files` await their
        commit, it is renewed in the background; a crashed writer's lease expires.
        """
        return self._lease().token

    def _lease(self, session: CatalogSession | None = None) -> WriteLease:
        self._write_lease = current_or_new_write_lease(
            self._write_lease, self.catalog, self.metadata.table_uuid,
            int_property(self.metadata.properties, WRITE_LEASE_SECONDS), label=self.name, session=session)
        return self._write_lease

    def write_token_in(self, session: CatalogSession) -> str:
        """:meth:`write_token`, the lease taken or renewed in the caller's open catalog ``session``
        (a job that has catalog work of its own to do first saves a session)."""
        return self._lease(session).token

    def write_lease(self) -> AbstractContextManager[WriteLease]:
        """Hold this handle's write-intent lease for a write and its commit, however long they take.

        Inside the block the lease is renewed in the background before half of
        ``write.lease-seconds`` has passed (CAT-10), so orphan removal never takes the
        files being written, and a commit fails with :class:`WriteLeaseLostError` rather
        than commit files whose lease lapsed (COMMIT-19). If the block raises, the files
        :meth:`write_data_files` wrote in it and that were not committed are deleted and
        the lease is released (COMMIT-21). Every writing method of this class uses it;
        a caller writes and commits its own files the same way.

        Example:
            >>> with t.write_lease():
            ...     files = t.write_data_files(batch)              # may take hours
            ...     t.commit_change(FileChange("append", added=files))
        """
        return self._lease().writing(self.io.delete_many)

    def release_write_token(self) -> None:
        """End this handle's write-intent lease (files it wrote since are committed or deleted)."""
        if self._write_lease is not None:
            self._write_lease.release()
            self._write_lease = None

    def write_options(self, *, kind: str = "part", target_file_size: int | None = None,
                      compression_level: int | None = None) -> WriteOptions:
        props = self.metadata.properties
        return WriteOptions(
            target_file_size=int_property(props, TARGET_FILE_SIZE, target_file_size),
            compression_level=int_property(props, COMPRESSION_LEVEL, compression_level),
            row_group_rows=int_property(props, ROW_GROUP_ROWS),
            min_compression_saving=number_property(props, MIN_COMPRESSION_SAVING),
            page_size_bytes=int_property(props, PAGE_SIZE_BYTES),
            kind=kind,
            token=self.write_token(),
        )

    def write_data_files(self, data: Any, *, kind: str = "part", target_file_size: int | None = None,
                         compression_level: int | None = None) -> list[DataFile]:
        """Write ``data`` as data files of this table without committing them (WRITE-1..WRITE-7).

        The write lease is renewed in the background until the files are committed by
        :meth:`commit_change` or the lease is released (CAT-10). If the write fails, the
        files it created are deleted (COMMIT-21).
        """
        table = conform(data, self.metadata.schema)  # refuse bad data before taking a lease (WRITE-3)
        with self.write_lease():
            return self._write_conformed(table, self.write_options(
                kind=kind, target_file_size=target_file_size, compression_level=compression_level), sync=True)

    def _write_conformed(self, table: pa.Table, options: WriteOptions, *, sync: bool = False) -> list[DataFile]:
        """Write data files under the held write lease, which protects them until they are settled (CAT-10).

        Without ``sync`` the files become durable in the commit's own sync, together with
        its metadata files, before the swap (COMMIT-20).
        """
        files = write_data_files(self.io, self.location, table, self.metadata.schema, self.metadata.spec,
                                 self.metadata.sort_order, options, sync=sync)
        self._lease().protect(f"{self.location}/{f.path}" for f in files)
        return files

    @under_write_lease
    def append(self, data: Any, *, summary: dict[str, str] | None = None,
               idempotency: WriterBatch | tuple[str, int] | None = None) -> Snapshot | None:
        """Add rows as one new snapshot (fast append, COMMIT-8). Appends never conflict.

        Appending zero rows commits nothing and returns the current snapshot (COMMIT-18).
        With ``idempotency=(writer_id, batch_id)`` the append commits at most once: if the
        writer already committed this batch or a later one to this table, it raises
        :class:`~lakefmt.errors.AlreadyCommittedError` and commits nothing (PROGRESS-3).
        """
        writer_batch = table_commits.check_writer_batch(self, idempotency)
        files = self._write_conformed(conform(data, self.metadata.schema), self.write_options())
        if not files:
            return self.metadata.current_snapshot
        return self.commit_change(FileChange("append", added=files, summary=dict(summary or {}),
                                             writer_batch=writer_batch), cleanup_on_failure=files)

    @under_write_lease
    def overwrite(self, data: Any, filter: str | Expression | None = None, *,
                  summary: dict[str, str] | None = None,
                  idempotency: WriterBatch | tuple[str, int] | None = None) -> Snapshot:
        """Replace the rows matching ``filter`` (all rows if None) by ``data``, in one snapshot.

        The matching rows are removed as ``write.delete.mode`` says: deletion vectors
        (merge-on-read, ROWDEL-2) or rewritten files (copy-on-write, COMMIT-12). Every new
        row must satisfy the filter, otherwise :class:`ValidationError` is raised before
        anything is written. ``idempotency`` is as for :meth:`append`.
        """
        writer_batch = table_commits.check_writer_batch(self, idempotency)
        bound, rows = row_deletes.overwrite_rows(self, data, filter)  # refused before anything is written
        added = self._write_conformed(rows, self.write_options())
        return row_deletes.replace_rows(self, bound, added, summary=summary, writer_batch=writer_batch)

    @under_write_lease
    def delete(self, filter: str | Expression, *, summary: dict[str, str] | None = None) -> Snapshot | None:
        """Delete the rows matching ``filter``; None if nothing matched.

        Under ``write.delete.mode`` = ``merge-on-read`` (the default) only deletion vectors
        are written (ROWDEL-2), and the table moves to format version 2 with its first one
        (FMT-4); under ``copy-on-write`` the files holding matching rows are rewritten
        (COMMIT-12). See :func:`lakefmt.row_deletes.delete_rows`.
        """
        return row_deletes.delete_rows(self, filter, summary=summary)

    def commit_replanned(self, plan: Callable[[], tuple[FileChange, list[DataFile]] | None]) -> Snapshot | None:
        """Commit a row-level change, planning it again on the current table when it conflicts.

        ``plan()`` reads the table as it is now and returns the change with the files it
        wrote for this attempt alone (deleted when the attempt fails), or None when there
        is nothing to do. Only conflicts over the files the change touches are planned
        again — a concurrent compaction or delete removed a file or deleted rows of it — as
        the operation's rows are then found anew in the new snapshot (ROWDEL-5). A conflict
        of its filter with rows a concurrent commit added (COMMIT-10) is raised, as is the
        last conflict after ``commit.retry.num-retries`` replans.
        """
        return row_deletes.commit_replanned(self, plan)

    def write_survivors(self, tables: Sequence[pa.Table]) -> list[DataFile]:
        """Write the remaining rows of files a copy-on-write change removes (COMMIT-12)."""
        if not tables:
            return []
        return self._write_conformed(conform(pa.concat_tables(tables), self.metadata.schema), self.write_options())

    def discard(self, files: Sequence[DataFile]) -> None:
        """Delete uncommitted files this handle wrote, and stop protecting them (COMMIT-21)."""
        paths = [f"{self.location}/{f.path}" for f in files]
        self.io.delete_many(paths)
        self._lease().settle(paths)

    def upgrade_format_version(self, format_version: int = 2) -> TableMetadata:
        """Move the table to ``format_version`` (FMT-4); a table is never downgraded.

        A merge-on-read delete does this with its first deletion vector; upgrade
        explicitly to let only version 2 readers read the table from now on.
        """
        if format_version < self.metadata.format_version:
            raise ValidationError(f"table {self.name} is at format version {self.metadata.format_version}; "
                                  f"it cannot be downgraded to {format_version} (FMT-4)")
        return self.commit_updates([UpgradeFormatVersion(format_version)], operation="upgrade-format-version")

    # -- row-level changes by key (lakefmt.merge) ----------------------------------------
    def upsert(self, data: Any, on: Sequence[str], **options: Any) -> Any:
        """Update the rows whose ``on`` key matches a row of ``data`` and insert the others, in one
        snapshot (ROWDEL-6); see :func:`lakefmt.merge.upsert`."""
        from lakefmt.merge import upsert

        return upsert(self, data, on=on, **options)

    def merge(self, source: Any, on: Sequence[str]) -> Any:
        """A MERGE of ``source`` into this table on the ``on`` key, as delta-rs builds it (ROWDEL-7); see
        :class:`lakefmt.merge.MergeBuilder`."""
        from lakefmt.merge import MergeBuilder

        return MergeBuilder(self, source, on=on)

    def erase(self, filter: str | Expression, **options: Any) -> Any:
        """Delete the matching rows and every stored copy of them, with a report proving it
        (spec/deletes.md, erasure); see :meth:`Maintenance.erase`."""
        return self.maintenance.erase(filter, **options)

    # -- idempotent commits (spec/catalog.md, PROGRESS-1..PROGRESS-4) ----------------------
    def last_committed_batch(self, writer_id: str) -> int | None:
        """The highest batch id ``writer_id`` committed to this table, or None (PROGRESS-1).

        Read from the catalog's writer progress, which snapshot expiry never removes (and,
        for commits of implementations that did not record it, from the snapshot history).
        A writer that restarts resumes after this batch.
        """
        return table_commits.last_committed_batch(self, writer_id)

    # -- the public commit API -------------------------------------------------------
    @under_write_lease
    def commit_change(self, change: FileChange, *, cleanup_on_failure: Sequence[DataFile] = (),
                      after_swap: Callable[[CatalogSession], object] | None = None) -> Snapshot:
        """Commit a change of the file set as one snapshot, retrying on lost races (COMMIT-1..7).

        Before the swap the added files must still be in storage and the write lease still
        live, else nothing is committed (:class:`CommitFileMissingError`,
        :class:`WriteLeaseLostError`, COMMIT-19). On failure the files named in
        ``cleanup_on_failure`` are deleted, unless the outcome of the swap is unknown (COMMIT-11).
        ``after_swap(session)`` runs in the swap's catalog session once the swap succeeded
        (its errors are logged, never raised: the commit is done).
        """
        return table_commits.commit_file_change(self, self._lease(), change, cleanup_on_failure=cleanup_on_failure,
                                                after_swap=after_swap)

    @under_write_lease
    def commit_updates(self, updates: Sequence[Update], *, requirements: Sequence[Requirement] = (),
                       operation: str = "update") -> TableMetadata:
        """Commit metadata-only updates (schema, properties, snapshot pointer) guarded by requirements."""
        build = table_commits.checked_updates(updates, requirements)
        return table_commits.commit_build(self, self._lease(), build, operation=operation)

    @under_write_lease
    def commit_build(self, build: Build, *, operation: str) -> TableMetadata:
        """Commit whatever ``build(base) -> (updates, files written)`` produces, rebuilding on a new base
        when another writer got there first (COMMIT-1..6). Used for metadata-only snapshots such as
        manifest rewrites."""
        return table_commits.commit_build(self, self._lease(), build, operation=operation)

    # -- moving the current snapshot ----------------------------------------------------
    def rollback_to(self, snapshot_id: int) -> Snapshot:
        """Make an ancestor of the current snapshot current again, as a commit (MAINT-13, COMMIT-16).

        Raises :class:`ValidationError` if ``snapshot_id`` is not an ancestor of the current
        snapshot (use :meth:`set_current_snapshot` for any retained snapshot).
        """
        return table_commits.rollback_to(self, snapshot_id)

    def set_current_snapshot(self, snapshot_id: int) -> Snapshot:
        """Make any retained snapshot current, as a commit (MAINT-13, COMMIT-16)."""
        return table_commits.set_current_snapshot(self, snapshot_id)

    # -- schema and properties ---------------------------------------------------------
    def update_schema(self) -> SchemaUpdate:
        """Change columns by field id; commit on leaving the ``with`` block or by ``commit()``."""
        from lakefmt.schema_update import SchemaUpdate  # the builder sits beside the table

        return SchemaUpdate(self)

    def set_properties(self, **properties: Any) -> None:
        props = {k.replace("__", "."): str(v) for k, v in properties.items()}
        validate_properties({**self.metadata.properties, **props})
        self.commit_updates([SetProperties(tuple(props.items()))], operation="set-properties")

    def set_property(self, name: str, value: Any) -> None:
        validate_properties({**self.metadata.properties, name: str(value)})
        self.commit_updates([SetProperties(((name, str(value)),))], operation="set-properties")

    def remove_properties(self, *names: str) -> None:
        self.commit_updates([RemoveProperties(tuple(names))], operation="remove-properties")
