"""Snapshot expiry (spec/maintenance.md, MAINT-3 … MAINT-7).

Expiry removes old snapshots from the table metadata in **one commit**, and only then
deletes the files that nothing retained can reach any more:

1. choose the snapshots to remove (:func:`select_expired`): older than a cutoff, never
   the current snapshot, never one of the newest ``retain_last`` current ancestors;
2. commit ``RemoveSnapshots`` (operation ``expire-snapshots``); if a concurrent commit
   made one of them current, the commit conflicts and nothing is deleted;
3. compute reachability from the metadata **as committed** (which includes anything
   committed concurrently) and the files reachable only from the removed snapshots;
4. delete those data files, deletion-vector files, manifests and manifest lists, and the
   metadata files that neither the current metadata nor its metadata-log names (MAINT-6),
   with the history files none of those metadata files names (META-19): removing a snapshot
   kept in a history file replaces that file by a new one in the commit of step 2.

A deletion-vector file holds the vectors one commit attempt wrote, for many data files
(LAYOUT-12); it is deleted only when no live entry of a retained snapshot points into
it (DV-5, ROWDEL-13), so a vector file a retained snapshot still reads is never deleted.

A crash during step 4 leaves unreferenced files, which orphan removal reclaims. Once
step 2 succeeded, expiry reports success (COMMIT-15), also when a concurrent expiry
deletes files it was about to read: a manifest list or manifest already gone is
skipped, everything still readable is cleaned up, and the rest is left to orphan
removal (MAINT-7).

Example:
    >>> result = t.maintenance.expire_snapshots(older_than=timedelta(days=7), retain_last=10)
    >>> result.expired_snapshot_ids, result.bytes_freed
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from lakefmt.deletion_vectors import FOLDER as DELETES_FOLDER
from lakefmt.errors import LakefmtError, ValidationError
from lakefmt.hooks import checkpoint
from lakefmt.maintenance.options import check_age, check_bool, check_count, check_snapshot_ids
from lakefmt.maintenance.orphans import ListedFile, delete_files
from lakefmt.maintenance.reachability import (
    Reachability,
    current_reachability,
    reachable_only_from,
    relativize,
    table_reachability,
)
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.properties import EXPIRE_MAX_SNAPSHOT_AGE_MS, EXPIRE_MIN_SNAPSHOTS_TO_KEEP, int_property
from lakefmt.updates import AssertNotCurrent, RemoveSnapshots

if TYPE_CHECKING:
    from lakefmt.table import Table

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpireResult:
    """What snapshot expiry removed, or would remove in a dry run.

    Paths are relative to the table location. ``bytes_freed`` sums the sizes of the
    deleted files (as listed, or as recorded in manifests and manifest lists).
    ``deletion_vector_files`` are the deletion-vector files only the expired snapshots
    reached (DV-5), counted at their size in storage.
    ``failed_deletes`` are files whose deletion failed; they are orphans now (MAINT-7).
    ``warnings`` say why files were left for orphan removal although the expiry was
    committed (for example a referenced manifest found missing: a damaged table).
    """

    expired_snapshot_ids: tuple[int, ...]
    data_files: tuple[str, ...]
    manifests: tuple[str, ...]
    manifest_lists: tuple[str, ...]
    metadata_files: tuple[str, ...]
    bytes_freed: int
    dry_run: bool
    failed_deletes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    deletion_vector_files: tuple[str, ...] = ()

    @property
    def files_deleted(self) -> int:
        return (len(self.data_files) + len(self.deletion_vector_files) + len(self.manifests)
                + len(self.manifest_lists) + len(self.metadata_files))


def cutoff_ms(metadata: TableMetadata, older_than: timedelta | datetime | None, now_ms: int) -> int:
    """Snapshots with ``timestamp-ms`` below this are old enough to expire (MAINT-3)."""
    if older_than is None:
        return now_ms - int_property(metadata.properties, EXPIRE_MAX_SNAPSHOT_AGE_MS)
    older_than = check_age("older_than", older_than, allow_datetime=True)
    if isinstance(older_than, timedelta):
        return now_ms - int(older_than.total_seconds() * 1000)
    when = older_than if older_than.tzinfo is not None else older_than.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def select_expired(metadata: TableMetadata, *, cutoff: int, retain_last: int,
                   snapshot_ids: Iterable[int] | None = None, table: str | None = None) -> frozenset[int]:
    """The snapshots to remove (MAINT-3): pure, so it can be tested without I/O.

    With ``snapshot_ids``, exactly those (they must exist and not be current); otherwise
    every snapshot older than ``cutoff`` except the current snapshot and its newest
    ``retain_last`` - 1 ancestors.
    """
    current = metadata.current_snapshot_id
    if snapshot_ids is not None:
        chosen = frozenset(int(i) for i in snapshot_ids)
        known = {s.snapshot_id for s in metadata.snapshots}
        unknown = sorted(chosen - known)
        if unknown:
            metadata.snapshot_by_id(unknown[0], table=table)  # raises NoSuchSnapshotError naming the table
        if current in chosen:
            raise ValidationError(f"snapshot {current} is current and cannot be expired (MAINT-3)")
        return chosen
    if retain_last < 1:
        raise ValidationError(f"retain_last must be at least 1, got {retain_last}")
    keep = {s.snapshot_id for s in itertools.islice(metadata.iter_ancestors(current), retain_last)}
    if current is not None:
        keep.add(current)
    return frozenset(s.snapshot_id for s in metadata.snapshots
                     if s.timestamp_ms < cutoff and s.snapshot_id not in keep)


def expire_snapshots(table: Table, *, older_than: timedelta | datetime | None = None,
                     retain_last: int | None = None, snapshot_ids: Iterable[int] | None = None,
                     dry_run: bool = False) -> ExpireResult:
    """Remove old snapshots in one commit, then delete what only they reached (MAINT-3 … MAINT-7).

    Args:
        older_than: an age (``timedelta``) or a point in time (``datetime``, naive = UTC);
            default: the table property ``history.expire.max-snapshot-age-ms`` (5 days).
        retain_last: keep at least this many of the newest snapshots in the current
            snapshot's ancestry, however old; default ``history.expire.min-snapshots-to-keep`` (1).
        snapshot_ids: expire exactly these snapshots instead (age and ``retain_last`` ignored).
        dry_run: report what would be removed; commit and delete nothing.

    Raises:
        ValidationError: an option of the wrong type or out of range (nothing is done).
    """
    if older_than is not None:
        check_age("older_than", older_than, allow_datetime=True)
    if retain_last is not None:
        check_count("retain_last", retain_last, minimum=1)
    ids = None if snapshot_ids is None else check_snapshot_ids("snapshot_ids", snapshot_ids)
    check_bool("dry_run", dry_run)
    table.refresh()
    base, base_location = table.metadata, table.metadata_location
    keep = int_property(base.properties, EXPIRE_MIN_SNAPSHOTS_TO_KEEP) if retain_last is None else retain_last
    now_ms = int(time.time() * 1000)
    chosen = select_expired(base, cutoff=cutoff_ms(base, older_than, now_ms), retain_last=keep,
                            snapshot_ids=ids, table=table.name)
    removed = [s for s in base.snapshots if s.snapshot_id in chosen]
    if dry_run:
        retained = table_reachability(table.io, base, base_location,
                                      snapshots=[s for s in base.snapshots if s.snapshot_id not in chosen])
        return _clean_up(table, removed, retained, dry_run=True)
    if chosen:
        checkpoint("expire-before-commit")
        table.commit_updates([RemoveSnapshots(chosen)], requirements=[AssertNotCurrent(chosen)],
                             operation="expire-snapshots")
        checkpoint("expire-after-swap")
    # The swap succeeded (or there was nothing to remove): from here on nothing may raise (COMMIT-15).
    # Deletion is decided against the metadata as committed or later, never against the plan (MAINT-5).
    try:
        retained = current_reachability(table)
        return _clean_up(table, removed, retained, dry_run=False)
    except (LakefmtError, OSError) as exc:
        if not chosen:
            raise  # nothing was committed: no success to report
        warning = (f"snapshots expired, but their files were not deleted ({type(exc).__name__}: {exc}); "
                   "run `lakefmt check`, then orphan removal reclaims them (MAINT-7)")
        _log.warning("%s: %s", table.name, warning)
        return ExpireResult(expired_snapshot_ids=tuple(s.snapshot_id for s in removed), data_files=(),
                            manifests=(), manifest_lists=(), metadata_files=(), bytes_freed=0, dry_run=False,
                            warnings=(warning,))


def _clean_up(table: Table, removed: list[Snapshot], retained: Reachability, *, dry_run: bool) -> ExpireResult:
    """Delete (or only count) what ``removed`` reaches and ``retained`` does not, and superseded metadata.

    Manifest lists and manifests a concurrent expiry already deleted are skipped; what
    they named and is still in storage is left to orphan removal (MAINT-7).
    """
    only_removed = reachable_only_from(table.io, removed, retained)
    listing = _folder(table, retained.location, "metadata")
    stale_metadata = sorted(f.path for f in listing if retained.is_superseded_metadata(f.path))
    vectors = sorted(only_removed.deletion_vectors)
    if vectors:  # a vector file's size is its size in storage, not the extent its entries reference
        listing += _folder(table, retained.location, DELETES_FOLDER)
    sizes = {f.path: f.size for f in listing}

    def size(path: str, recorded: int | None = None) -> int:
        return sizes.get(path, recorded or 0)

    data_files = sorted(only_removed.data_files)
    manifests = sorted(only_removed.manifests)
    lists = sorted(only_removed.manifest_lists)
    freed = (sum(only_removed.data_files.values())
             + sum(size(v, only_removed.deletion_vectors[v]) for v in vectors)
             + sum(size(m, only_removed.manifests[m]) for m in manifests)
             + sum(size(p) for p in lists) + sum(size(p) for p in stale_metadata))
    failed: tuple[str, ...] = ()
    if not dry_run:  # data files first, manifest lists last: a crash leaves a readable remainder
        failed = tuple(f for group in (data_files, vectors, manifests, lists, stale_metadata)
                       for f in delete_files(table.io, retained.location, group))
    return ExpireResult(
        expired_snapshot_ids=tuple(s.snapshot_id for s in removed), data_files=tuple(data_files),
        manifests=tuple(manifests), manifest_lists=tuple(lists), metadata_files=tuple(stale_metadata),
        bytes_freed=freed, dry_run=dry_run, failed_deletes=failed, deletion_vector_files=tuple(vectors))


def _folder(table: Table, location: str, folder: str) -> list[ListedFile]:
    """The files of ``<location>/<folder>`` with their sizes (a missing folder lists as empty).

    A file deleted while the folder is listed (by a concurrent expiry) is skipped.
    """
    out = []
    try:
        for info in table.io.list_files(f"{location}/{folder}", strict=True):
            rel = relativize(location, info.path)
            if rel is not None:
                out.append(ListedFile(rel, info.size, info.mtime))
    except FileNotFoundError:
        return []
    return out
