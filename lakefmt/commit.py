"""The commit loop (spec/commits.md, COMMIT-1..COMMIT-13; idempotent commits: spec/catalog.md,
PROGRESS-1..PROGRESS-4).

:func:`commit_table` runs the protocol: build against the base (a
:class:`~lakefmt.snapshot_producer.SnapshotProducer`'s ``build``, or any list of
metadata updates), write the metadata file, swap the catalog pointer, and on a lost
race re-read the base and build again. Each swap checks the writer's lease under the
catalog lock, in its own ``UPDATE`` (COMMIT-19), and every folder that gained a file is made
durable before it (COMMIT-20).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakefmt.errors import CommitConflictError, CommitError, CommitStateUnknownError, MissingFileError
from lakefmt.hooks import checkpoint
from lakefmt.idempotency import WriterBatch
from lakefmt.io import FileIO
from lakefmt.metadata import TableMetadata, read_metadata
from lakefmt.properties import (
    COMMIT_MAX_WAIT_MS,
    COMMIT_MIN_WAIT_MS,
    COMMIT_RETRIES,
    METADATA_PREVIOUS_MAX,
    int_property,
)
from lakefmt.snapshot_history import write_pending
from lakefmt.snapshot_producer import FileChange, RowDeletes, SnapshotProducer, new_snapshot_id
from lakefmt.updates import Update, apply_updates

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog
    from lakefmt.catalog_file import CatalogSession
    from lakefmt.leases import WriteLease

__all__ = ["Build", "FileChange", "RowDeletes", "SnapshotProducer", "commit_table", "new_snapshot_id",
           "relative_to"]

Build = Callable[[TableMetadata], tuple[list[Update], list[str]]]
log = logging.getLogger(__name__)


@dataclass
class _Attempt:
    """One prepared attempt: the new metadata file, built on the metadata at ``expected``."""

    expected: str
    base: TableMetadata
    metadata: TableMetadata
    location: str
    files: list[str]  # every file this attempt wrote that the next one does not reuse, the metadata file last


def commit_table(catalog: Catalog, identifier: tuple[str, str], cached: tuple[TableMetadata, str],
                 build: Build, *, operation: str, snapshot_id: int | None = None,
                 summary: dict[str, Any] | None = None, token: str | None = None,
                 writer_batch: WriterBatch | None = None,
                 lease: WriteLease | None = None,
                 after_swap: Callable[[CatalogSession], object] | None = None) -> tuple[TableMetadata, str]:
    """Run the commit protocol (COMMIT-1..6) and return the new metadata and its location.

    ``build`` is called with a base and returns the updates and the files it wrote
    for that attempt. The first attempt is prepared against ``cached`` outside the
    catalog lock, metadata file included. The fsyncs that make its files durable
    (COMMIT-20) start before the lock is taken and run while the lock is taken and the
    catalog file attached; the swap waits for them (a 10-row append at 1,000 commits took
    ~1.5 ms less; the lock is held longer only when the fsyncs outlast the attach). If no
    other writer moved the pointer meanwhile, the session only swaps it: the swap's
    transaction checks the pointer and the lease, and nothing is read before it (two
    statements of ~0.6 ms of CPU each fewer, of ~12 ms for a 10-row append). Only a swap that changed nothing reads
    the pointer, to tell a lost race from a lost lease. If another writer moved it, the
    change is rebuilt on the new base under the lock and swapped in the same session (COMMIT-7): rebuilding outside the lock and trying again was measured slower
    with 4 processes appending to one table, as most such attempts lost the race
    again. ``lease`` is the write lease protecting the operation's files: the swap checks
    it, and a lost lease fails the commit with ``WriteLeaseLostError`` (COMMIT-19).

    With ``writer_batch`` the commit is idempotent (PROGRESS-3): in the same catalog
    session as the swap, before it, the writer's recorded progress is checked, and the
    swap's transaction records the batch. A replay raises :class:`AlreadyCommittedError`
    and deletes the files this call wrote.

    ``after_swap(session)`` runs in the swap's session once the swap succeeded, so that
    catalog work that must follow the commit (a compactor releasing its partition leases)
    costs no session of its own. The commit is done by then: an error it raises is logged
    and swallowed, never reported as the commit's.
    """
    namespace, name = identifier
    io = catalog.io
    cached_meta, cached_location = cached
    props = cached_meta.properties
    retries = int_property(props, COMMIT_RETRIES)
    wait_ms = int_property(props, COMMIT_MIN_WAIT_MS)
    max_wait_ms = int_property(props, COMMIT_MAX_WAIT_MS)

    def prepare(base: TableMetadata, base_location: str, *, durable: bool = True) -> _Attempt:
        """Build on ``base``, write the metadata file and make every file durable (COMMIT-3..5, COMMIT-20);
        without ``durable`` their fsyncs are only started, and ``io.sync()`` must be called before the swap."""
        if base.table_uuid != cached_meta.table_uuid:
            raise CommitConflictError(f"table {namespace}.{name} was dropped and re-created "
                                      "since this commit was planned (COMMIT-7)")
        updates, files = build(base)
        try:
            new_meta = apply_updates(base, updates, timestamp_ms=int(time.time() * 1000),
                                     previous_location=relative_to(base.location, base_location),
                                     metadata_log_max=int_property(base.properties, METADATA_PREVIOUS_MAX))
            version = _version(base_location) + 1
            # Snapshots that moved out of the metadata file go to new history files first (META-16, LAYOUT-13).
            new_meta, history_files = write_pending(io, new_meta, version, lambda: _unique_name(token))
            files += history_files
            new_location = f"{base.location}/metadata/v{version:06d}-{_unique_name(token)}.metadata.json"
            io.write_bytes(new_location, new_meta.dump_bytes())
            files.append(new_location)
            if durable:
                io.sync()  # COMMIT-20: every file of the commit is durable before the swap
            else:
                io.start_sync()  # while the catalog lock is taken and the file attached; waited for before the swap
            checkpoint("after-metadata-file")
        except BaseException:
            io.delete_many(files)
            raise
        return _Attempt(base_location, base, new_meta, new_location, files)

    attempt: _Attempt | None = None
    # A served catalog under contention: built once, in the table's turn (CATHTTP-25), the files written so far
    # made durable before the turn is asked for, so that it is held only for the attempt's own files.
    if not catalog.take_commit_turn(namespace, name, before=io.sync):
        try:
            attempt = prepare(cached_meta, cached_location, durable=False)
        except (CommitConflictError, MissingFileError):
            # Maybe stale: decide against the current base under the lock. A concurrent snapshot expiry
            # may have deleted the cached snapshot's manifests (MAINT-5); an append still commits (ROWDEL-10).
            attempt = None
    for _attempt in range(retries + 1):
        with contextlib.ExitStack() as opened:
            try:
                session = opened.enter_context(catalog.session())
            except BaseException:  # no swap was tried (a lock timeout, say): nothing of the attempt stays (COMMIT-21)
                if attempt is not None:
                    io.delete_many(attempt.files)
                raise
            for built_in_session in (False, True):
                try:
                    if writer_batch is not None and not built_in_session:
                        writer_batch.check(session.last_committed_batch(cached_meta.table_uuid,
                                                                writer_batch.writer_id, migrate=True),
                                           where="catalog writer_progress")
                    if attempt is None:
                        current = session.current_location(namespace, name)
                        attempt = _prepare_on_current(prepare, io, session, namespace, name, current,
                                                      cached_meta if current == cached_location else None)
                        if attempt is None:
                            break  # the base vanished: the pointer moved meanwhile
                    if lease is not None and lease.lost:
                        lease.verify_in_session(session)  # known lost: raises without asking (COMMIT-19)
                    io.sync()  # COMMIT-20: the fsyncs started by prepare() are done
                except BaseException:
                    if attempt is not None:
                        io.delete_many(attempt.files)
                    raise
                checkpoint("before-swap")
                # The swap's transaction checks the pointer and the lease (CAT-4, COMMIT-19): nothing is read
                # before it. Only a swap that changed nothing asks why, in the same session.
                if _swap(session, namespace, name, attempt, operation=operation, snapshot_id=snapshot_id,
                         summary=summary, writer_batch=writer_batch,
                         lease_token=None if lease is None else lease.token):
                    checkpoint("after-swap")
                    if after_swap is not None:
                        try:
                            after_swap(session)
                        except Exception as exc:  # noqa: BLE001 - the commit itself succeeded
                            log.warning("after the commit to %s.%s: %s", namespace, name, exc)
                    return attempt.metadata, attempt.location
                try:
                    moved = session.current_location(namespace, name) != attempt.expected
                    if not moved and lease is not None:
                        lease.verify_in_session(session)  # COMMIT-19: raises WriteLeaseLostError
                except BaseException:
                    io.delete_many(attempt.files)
                    raise
                io.delete_many(attempt.files)  # built on a base that is no longer current
                attempt = None
                if not moved or built_in_session:
                    break  # a writer outside the catalog lock moved the pointer: wait, then try again
        if not catalog.holds_commit_turn(namespace, name):  # with its turn, the next attempt is not raced
            time.sleep(min(wait_ms, max_wait_ms) / 1000 * (0.5 + random.random()))
            wait_ms = max(1, wait_ms * 2)
    raise CommitError(f"commit to {namespace}.{name} lost the race {retries + 1} times; giving up")


def _prepare_on_current(prepare: Callable[[TableMetadata, str], _Attempt], io: FileIO, session: CatalogSession,
                        namespace: str, name: str, current: str, cached: TableMetadata | None) -> _Attempt | None:
    """Prepare an attempt on the current metadata; None when that base vanished meanwhile (a lost race).

    Without a catalog lock (a catalog served over HTTP) a concurrent snapshot expiry may delete
    files of a base that another commit has just replaced; the pointer has then moved. Under
    the lock, or when the pointer has not moved, a missing file is damage and is raised.
    """
    try:
        return prepare(cached if cached is not None else read_metadata(io, current), current)
    except MissingFileError:
        if session.current_location(namespace, name) == current:
            raise
        return None


def _swap(session: CatalogSession, namespace: str, name: str, attempt: _Attempt, *, operation: str,
          snapshot_id: int | None, summary: dict[str, Any] | None, writer_batch: WriterBatch | None,
          lease_token: str | None = None) -> bool:
    """The compare-and-swap of a prepared attempt, with its commit-log row (CAT-4, CAT-5)."""
    new_meta, base = attempt.metadata, attempt.base
    new_snapshot = new_meta.current_snapshot
    # CAT-5: only a snapshot this commit added is logged (a rollback moves to an old one). A snapshot the
    # commit added has a sequence number above the base's (SNAP-3): no history file is read to know.
    if new_snapshot is not None and new_snapshot.sequence_number > base.last_sequence_number:
        log_summary = {**(summary or {}), **new_snapshot.summary}  # CAT-5: the snapshot's summary
        log_snapshot_id = new_snapshot.snapshot_id
    else:
        log_summary, log_snapshot_id = dict(summary or {}), snapshot_id
    try:
        return session.compare_and_swap(namespace, name, attempt.expected, attempt.location, operation=operation,
                                        snapshot_id=log_snapshot_id, summary=log_summary,
                                        writer_batch=writer_batch, lease_token=lease_token)
    except Exception as exc:  # the outcome of the swap is unknown: keep every file (COMMIT-11)
        raise CommitStateUnknownError(f"catalog swap for {namespace}.{name} failed: {exc}") from exc


def _unique_name(token: str | None) -> str:
    """The ``{unique}`` part of a metadata or history file name, with the writer token if any (LAYOUT-9, CAT-10)."""
    return f"{token}-{uuid.uuid4().hex[:16]}" if token else str(uuid.uuid4())


def relative_to(location: str, path: str) -> str:
    """``path`` relative to the table location, as every path in metadata is (LAYOUT-2)."""
    return path.removeprefix(location.rstrip("/") + "/")


def _version(metadata_location: str) -> int:
    name = metadata_location.rsplit("/", 1)[-1]
    try:
        return int(name.split("-", 1)[0].lstrip("v"))
    except ValueError:
        return 0
