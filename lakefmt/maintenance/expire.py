"""Snapshot expiry (spec/maintenance.md, MAINT-3 … MAINT-7).

Expiry removes old snapshots from the table metadata in **one commit**, and only then
deletes the files that nothing retained can reach any more:

1. choose the snapshots to remove (:func:`select_expired`): older than a cutoff, never
   the current snapshot, never one of the newest ``retain_last`` current ancestors;
2. commit ``RemoveSnapshots`` (operation ``expire-snapshots``); if a concurrent commit
   made one of them current, the commit conflicts and nothing is deleted;
3. compute reachability from the metadata **as committed** (which includes anything
   committed concurrently) and the files reachable only from the removed snapshots;
4. delete those data files, manifests and manifest lists, and the metadata files that
   neither the current metadata nor its metadata-log names (MAINT-6).

A crash during step 4 leaves unreferenced files, which orphan removal reclaims.

Example:
    >>> result = t.maintenance.expire_snapshots(older_than=timedelta(days=7), retain_last=10)
    >>> result.expired_snapshot_ids, result.bytes_freed
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from lakefmt.errors import NoSuchSnapshotError, ValidationError
from lakefmt.maintenance.orphans import ListedFile, delete_files
from lakefmt.maintenance.reachability import (
    Reachability,
    reachable_only_from,
    relativize,
    table_reachability,
)
from lakefmt.metadata import TableMetadata
from lakefmt.properties import EXPIRE_MAX_SNAPSHOT_AGE_MS, EXPIRE_MIN_SNAPSHOTS_TO_KEEP, int_property
from lakefmt.updates import AssertNotCurrent, RemoveSnapshots

if TYPE_CHECKING:
    from lakefmt.table import Table

_METADATA_FILE = re.compile(r"^metadata/v(\d+)-[^/]*\.metadata\.json$")


@dataclass(frozen=True)
class ExpireResult:
    """What snapshot expiry removed, or would remove in a dry run.

    Paths are relative to the table location. ``bytes_freed`` sums the sizes of the
    deleted files (as listed, or as recorded in manifests and manifest lists).
    ``failed_deletes`` are files whose deletion failed; they are orphans now (MAINT-7).
    """

    expired_snapshot_ids: tuple[int, ...]
    data_files: tuple[str, ...]
    manifests: tuple[str, ...]
    manifest_lists: tuple[str, ...]
    metadata_files: tuple[str, ...]
    bytes_freed: int
    dry_run: bool
    failed_deletes: tuple[str, ...] = ()

    @property
    def files_deleted(self) -> int:
        return (len(self.data_files) + len(self.manifests) + len(self.manifest_lists)
                + len(self.metadata_files))


def cutoff_ms(metadata: TableMetadata, older_than: timedelta | datetime | None, now_ms: int) -> int:
    """Snapshots with ``timestamp-ms`` below this are old enough to expire (MAINT-3)."""
    if older_than is None:
        return now_ms - int_property(metadata.properties, EXPIRE_MAX_SNAPSHOT_AGE_MS)
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise ValidationError(f"older_than must not be negative, got {older_than}")
        return now_ms - int(older_than.total_seconds() * 1000)
    if isinstance(older_than, datetime):
        when = older_than if older_than.tzinfo is not None else older_than.replace(tzinfo=timezone.utc)
        return int(when.timestamp() * 1000)
    raise ValidationError(f"older_than must be a timedelta or a datetime, got {type(older_than).__name__}")


def select_expired(metadata: TableMetadata, *, cutoff: int, retain_last: int,
                   snapshot_ids: Iterable[int] | None = None) -> frozenset[int]:
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
            raise NoSuchSnapshotError(f"no snapshot {unknown[0]} in table {metadata.location}")
        if current in chosen:
            raise ValidationError(f"snapshot {current} is current and cannot be expired (MAINT-3)")
        return chosen
    if retain_last < 1:
        raise ValidationError(f"retain_last must be at least 1, got {retain_last}")
    keep = {s.snapshot_id for s in metadata.ancestors(current)[:retain_last]}
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
    """
    table.refresh()
    base, base_location = table.metadata, table.metadata_location
    keep = int_property(base.properties, EXPIRE_MIN_SNAPSHOTS_TO_KEEP) if retain_last is None else retain_last
    now_ms = int(time.time() * 1000)
    chosen = select_expired(base, cutoff=cutoff_ms(base, older_than, now_ms), retain_last=keep,
                            snapshot_ids=snapshot_ids)
    removed = [s for s in base.snapshots if s.snapshot_id in chosen]
    if dry_run:
        committed, committed_location = replace(
            base, snapshots=tuple(s for s in base.snapshots if s.snapshot_id not in chosen)), base_location
    elif chosen:
        table.commit_updates([RemoveSnapshots(chosen)], requirements=[AssertNotCurrent(chosen)],
                             operation="expire-snapshots")
        committed, committed_location = table.metadata, table.metadata_location
    else:
        committed, committed_location = base, base_location
    # Deletion is decided against the committed metadata, never against the plan (MAINT-5).
    retained = table_reachability(table.io, committed, committed_location)
    only_removed = reachable_only_from(table.io, removed, retained)
    listing = _metadata_folder(table, retained.location)
    stale_metadata = _stale_metadata_files(committed_location, retained, listing)
    sizes = {f.path: f.size for f in listing}

    def size(path: str, recorded: int | None = None) -> int:
        return sizes.get(path, recorded or 0)

    data_files = sorted(only_removed.data_files)
    manifests = sorted(only_removed.manifests)
    lists = sorted(only_removed.manifest_lists)
    freed = (sum(only_removed.data_files.values())
             + sum(size(m, only_removed.manifests[m]) for m in manifests)
             + sum(size(p) for p in lists) + sum(size(p) for p in stale_metadata))
    failed: tuple[str, ...] = ()
    if not dry_run:
        failed = tuple(f for group in (data_files, manifests, lists, stale_metadata)
                       for f in delete_files(table.io, retained.location, group))
    return ExpireResult(
        expired_snapshot_ids=tuple(s.snapshot_id for s in removed), data_files=tuple(data_files),
        manifests=tuple(manifests), manifest_lists=tuple(lists), metadata_files=tuple(stale_metadata),
        bytes_freed=freed, dry_run=dry_run, failed_deletes=failed)


def _metadata_folder(table: Table, location: str) -> list[ListedFile]:
    """The files of ``<location>/metadata`` with their sizes (a missing folder lists as empty)."""
    out = []
    for info in table.io.list_files(f"{location}/metadata"):
        rel = relativize(location, info.path)
        if rel is not None:
            out.append(ListedFile(rel, info.size, info.mtime))
    return out


def _stale_metadata_files(current_location: str, retained: Reachability, listing: list[ListedFile]
                          ) -> list[str]:
    """Metadata files up to the current version that neither the current metadata nor its log names (MAINT-6).

    Such a file can never become current: every swap expects the pointer it was built on
    (CAT-4), and the pointer has moved past that version. So unlike other unreferenced
    files, these need no lease check and no grace period.
    """
    match = _METADATA_FILE.match(relativize(retained.location, current_location) or "")
    if match is None:
        return []
    current_version = int(match.group(1))
    stale = []
    for f in listing:
        m = _METADATA_FILE.match(f.path)
        if m is not None and int(m.group(1)) <= current_version and f.path not in retained.metadata_files:
            stale.append(f.path)
    return sorted(stale)
