"""Orphan-file removal (spec/maintenance.md, MAINT-8 … MAINT-12).

An **orphan** is a file under the table location that nothing retained references
(MAINT-1), whose name carries no live write-lease token (CAT-10), and that is older
than a grace period. Crashed writers and aborted compactions leave them behind. A
deletion-vector file (``data/deletes/dv-*.bin``, LAYOUT-12) is referenced while a live
entry of a retained snapshot points into it (ROWDEL-13); its name carries its writer's token,
so a delete that has not committed yet is protected like any other write.

The order of the steps is what makes this safe next to running writers (MAINT-10):

1. read the catalog pointer (metadata M0) and **list** the table location, strictly:
   an unreadable folder or a failed request refuses the whole run (MAINT-11);
2. read the **live write leases**: a writer that wrote a listed file and has not
   committed it yet still holds its lease now;
3. read the pointer again (M1) and compute **reachability** from it: a writer that
   committed (and maybe released its lease) before this point is referenced here.

Every file reachable from both M0 and M1 must appear in the listing; otherwise the
listing is incomplete (or spelled differently) and nothing is deleted (MAINT-11).

Beside a concurrent snapshot expiry, files vanish: a file deleted while the location
is listed is skipped (it is gone, not unlisted), and a manifest list or manifest that
M1 names but an expiry committed after M1 has deleted makes the walk start over from
the newer metadata (:func:`~lakefmt.maintenance.reachability.current_reachability`).

History files (META-13) named by the current metadata file or by a metadata file of its
metadata-log are referenced; one that none of them names is superseded like an old
metadata file (META-19). Old metadata files that fell out of the metadata-log
(``write.metadata.previous-versions-max``, META-7) are unreferenced and can never become
current again: they are orphans once older than the grace period, whatever lease their
writer holds (MAINT-6, MAINT-8), and are reported as ``superseded_metadata_files`` so that finding a table's first
``metadata.json`` among the orphans of a table with a long history is explained.

Example:
    >>> result = t.maintenance.remove_orphan_files(older_than=timedelta(days=3))   # dry run
    >>> result.orphan_files, result.orphan_bytes
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from lakefmt.errors import IncompleteListingError, MaintenanceError
from lakefmt.hooks import checkpoint
from lakefmt.io import FileIO, normalize_location
from lakefmt.leases import Leases
from lakefmt.maintenance.options import check_age, check_bool
from lakefmt.maintenance.reachability import (
    Reachability,
    current_reachability,
    relativize,
    table_location,
    table_reachability,
)

if TYPE_CHECKING:
    from lakefmt.table import Table

DELETE_THREADS = 16


@dataclass(frozen=True)
class ListedFile:
    """A file found under the table location: its path relative to it, size and modification time."""

    path: str
    size: int
    mtime: float | None


@dataclass(frozen=True)
class StorageScan:
    """A listing of the table location, sorted out against reachability and live leases (MAINT-10)."""

    location: str
    listed: tuple[ListedFile, ...]
    reachability: Reachability
    live_tokens: frozenset[str]

    @property
    def unreferenced(self) -> list[ListedFile]:
        return [f for f in self.listed if f.path not in self.reachability]

    def is_leased(self, path: str) -> bool:
        """Whether the file's name, or a folder on its path, carries the token of a live write lease
        (CAT-10; a Spark job's staging folder, SPARK-27)."""
        return carries_token(path, self.live_tokens)

    def is_superseded_metadata(self, path: str) -> bool:
        """An unreferenced metadata file no swap can make current again (MAINT-6)."""
        return self.reachability.is_superseded_metadata(path)

    def is_in_flight(self, path: str) -> bool:
        """An unreferenced file a live write lease protects: part of a write not committed yet.

        A superseded metadata file is never in flight, even when its writer's token is
        still leased (a long-lived writer keeps one token across many commits).
        """
        return self.is_leased(path) and not self.is_superseded_metadata(path)

    @property
    def listed_bytes(self) -> int:
        return sum(f.size for f in self.listed)


@dataclass(frozen=True)
class OrphanResult:
    """What orphan removal deleted, or would delete in a dry run (MAINT-9).

    ``orphan_files`` are paths relative to the table location. ``in_flight_files``
    counts unreferenced files protected by a live write lease, ``too_young_files``
    unreferenced files inside the grace period. ``superseded_metadata_files`` are the
    orphans that are old metadata files dropped from the metadata-log after
    ``write.metadata.previous-versions-max`` commits (MAINT-6): a table's first
    ``metadata.json`` becomes one after about 100 commits. ``failed_deletes`` lists
    orphans whose deletion failed (they stay orphans for the next run).
    """

    location: str
    orphan_files: tuple[str, ...]
    orphan_bytes: int
    dry_run: bool
    listed_files: int
    referenced_files: int
    in_flight_files: int
    too_young_files: int
    failed_deletes: tuple[str, ...] = ()
    superseded_metadata_files: tuple[str, ...] = ()


def carries_token(path: str, tokens: Iterable[str]) -> bool:
    """Whether ``path`` (relative to the table location) names a live token in any segment."""
    return any(token in path for token in tokens)


def scan_storage(table: Table) -> StorageScan:
    """List the table location and compute what is referenced, in the order of MAINT-10."""
    table.refresh()
    before_location, before_metadata = table.metadata_location, table.metadata
    location = table_location(before_location)
    listed = list_location(table.io, location)                                       # step 1
    tokens = frozenset(lease.key for lease in Leases(table.catalog).live(table.metadata.table_uuid, "write"))
    table.refresh()                                                                  # step 3
    checkpoint("orphans-before-reachability")
    reach = current_reachability(table)  # may re-read the pointer: later than step 2 is as safe
    if table_location(table.metadata_location) != location:
        raise MaintenanceError(f"table {table.name} moved from {location} while orphans were being listed")
    listed_paths = {f.path for f in listed}
    missing = [p for p in _required(reach, table.metadata_location) if p not in listed_paths]
    if missing and table.metadata_location != before_location:  # a commit raced the listing:
        # check only files both reach; what an expiry deleted since M0 is not required
        before = table_reachability(table.io, before_metadata, before_location, skip_missing=True)
        missing = [p for p in missing if p in before]
    missing.sort()
    if missing or reach.outside:
        if missing:
            what = f"{len(missing)} referenced file(s) are not in the listing, e.g. {missing[0]}"
        else:
            what = f"{len(reach.outside)} referenced path(s) lie outside it, e.g. {min(reach.outside)}"
        raise IncompleteListingError(f"cannot trust the listing of {location}: {what}; "
                                     "run `lakefmt check` (MAINT-11)")
    return StorageScan(location, tuple(listed), reach, tokens)


def list_location(io: FileIO, location: str) -> list[ListedFile]:
    """Every file under ``location``, or :class:`IncompleteListingError` (MAINT-11, MAINT-12)."""
    out = []
    prefix = normalize_location(location) + "/"
    try:
        for info in io.list_files(location, strict=True):
            path = info.path
            tail = path[len(prefix):]
            if path.startswith(prefix) and "/." not in path and "//" not in tail and not tail.endswith("/"):
                rel: str | None = tail  # already in normal form: the usual case, kept cheap
            else:
                rel = relativize(location, path)
            if rel is not None:  # None: the store returned something outside the location (MAINT-12)
                out.append(ListedFile(rel, info.size, info.mtime))
                if len(out) == 1:
                    checkpoint("orphans-listing")
    except (OSError, ValueError) as exc:
        raise IncompleteListingError(f"cannot list {location} completely: {type(exc).__name__}: "
                                     f"{exc}") from exc
    return out


def remove_orphan_files(table: Table, *, older_than: timedelta = timedelta(days=3),
                        dry_run: bool = True) -> OrphanResult:
    """Delete (or, with ``dry_run``, only report) the orphans of ``table`` (MAINT-8, MAINT-9).

    Raises:
        ValidationError: ``older_than`` is not a non-negative ``timedelta`` or ``dry_run``
            not a bool (nothing is listed or deleted).
        IncompleteListingError: the listing cannot be trusted (MAINT-11); nothing is deleted.
    """
    check_age("older_than", older_than, allow_datetime=False)
    check_bool("dry_run", dry_run)
    cutoff = time.time() - older_than.total_seconds()
    scan = scan_storage(table)
    unreferenced = scan.unreferenced
    orphans: list[ListedFile] = []
    in_flight = too_young = 0
    for f in unreferenced:
        if scan.is_in_flight(f.path):
            in_flight += 1
        elif f.mtime is None or f.mtime > cutoff:
            too_young += 1
        else:
            orphans.append(f)
    failed: tuple[str, ...] = ()
    if not dry_run:
        failed = delete_files(table.io, scan.location, [f.path for f in orphans])
    return OrphanResult(
        location=scan.location, orphan_files=tuple(sorted(f.path for f in orphans)),
        orphan_bytes=sum(f.size for f in orphans), dry_run=dry_run, listed_files=len(scan.listed),
        referenced_files=len(scan.listed) - len(unreferenced), in_flight_files=in_flight,
        too_young_files=too_young, failed_deletes=failed,
        superseded_metadata_files=tuple(sorted(f.path for f in orphans if scan.is_superseded_metadata(f.path))))


def delete_files(io: FileIO, location: str, paths: list[str]) -> tuple[str, ...]:
    """Delete files given relative to ``location``, in parallel; return those that failed (best effort)."""
    def delete(rel: str) -> str | None:
        try:
            io.delete(f"{location}/{rel}")
        except OSError:
            return rel
        return None

    if not paths:
        return ()
    failed: list[str] = []
    with ThreadPoolExecutor(max_workers=min(DELETE_THREADS, len(paths))) as pool:
        for start in range(0, len(paths), 1024):  # bounded: not one future per file at once
            failed += [p for p in pool.map(delete, paths[start:start + 1024]) if p is not None]
    return tuple(sorted(failed))


def _required(reach: Reachability, metadata_location: str) -> Iterator[str]:
    """Files that must be in a complete listing: the current metadata file and the snapshots' trees
    (deletion-vector files included: an unlisted one means the listing cannot be trusted).

    Older metadata files (the metadata-log) are history that readers do not need; one
    missing is reported by ``check`` but does not make the listing suspect.
    """
    yield relativize(reach.location, metadata_location) or metadata_location
    yield from reach.current_history_files  # the current metadata's older snapshots (META-13)
    yield from reach.manifest_lists
    yield from reach.manifests
    yield from reach.data_files
    yield from reach.deletion_vectors
