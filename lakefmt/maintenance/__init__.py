"""Table maintenance: snapshot expiry, orphan-file removal, storage statistics, checks (spec/maintenance.md).

``t.maintenance`` is a :class:`Maintenance` for table ``t``:

    >>> t.maintenance.expire_snapshots(older_than=timedelta(days=7), retain_last=10)
    >>> t.maintenance.remove_orphan_files()                      # a dry run by default
    >>> t.maintenance.remove_orphan_files(older_than=timedelta(days=3), dry_run=False)
    >>> t.maintenance.stats().historical_bytes                   # what expiry would free
    >>> t.maintenance.check().ok
    >>> t.rollback_to(snapshot_id)                               # Table methods (MAINT-13)

Everything that deletes decides from one reachability computation
(:mod:`~lakefmt.maintenance.reachability`) done after the facts it depends on
(MAINT-5, MAINT-10), and refuses rather than guesses (MAINT-11).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from lakefmt.errors import IncompleteListingError, MaintenanceError
from lakefmt.maintenance.check import CheckReport, Level, check_table
from lakefmt.maintenance.check_files import Violation
from lakefmt.maintenance.expire import ExpireResult, expire_snapshots, select_expired
from lakefmt.maintenance.orphans import OrphanResult, StorageScan, remove_orphan_files, scan_storage
from lakefmt.maintenance.reachability import (
    Reachability,
    reachable_files,
    reachable_only_from,
    relativize,
    table_location,
    table_reachability,
)
from lakefmt.maintenance.stats import PartitionStats, TableStats, table_stats

if TYPE_CHECKING:
    from lakefmt.expressions import Expression
    from lakefmt.maintenance.erase import ErasureReport
    from lakefmt.metadata import Snapshot
    from lakefmt.table import Table

__all__ = [
    "CheckReport",
    "ExpireResult",
    "IncompleteListingError",
    "Maintenance",
    "MaintenanceError",
    "OrphanResult",
    "PartitionStats",
    "Reachability",
    "StorageScan",
    "TableStats",
    "Violation",
    "check_table",
    "expire_snapshots",
    "reachable_files",
    "reachable_only_from",
    "relativize",
    "remove_orphan_files",
    "scan_storage",
    "select_expired",
    "table_location",
    "table_reachability",
    "table_stats",
]


class Maintenance:
    """Maintenance of one table. Destructive operations are explicit about it (see each method)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __repr__(self) -> str:
        return f"Maintenance({self.table.name!r})"

    def expire_snapshots(self, *, older_than: timedelta | datetime | None = None,
                         retain_last: int | None = None, snapshot_ids: Iterable[int] | None = None,
                         dry_run: bool = False) -> ExpireResult:
        """Remove old snapshots in one commit, then delete the files only they reached (MAINT-3 … MAINT-7).

        Defaults come from ``history.expire.max-snapshot-age-ms`` (5 days) and
        ``history.expire.min-snapshots-to-keep`` (1). See :func:`expire.expire_snapshots`.
        """
        return expire_snapshots(self.table, older_than=older_than, retain_last=retain_last,
                                snapshot_ids=snapshot_ids, dry_run=dry_run)

    def remove_orphan_files(self, *, older_than: timedelta = timedelta(days=3), dry_run: bool = True
                            ) -> OrphanResult:
        """Delete unreferenced, unleased files older than ``older_than``; a dry run unless told otherwise."""
        return remove_orphan_files(self.table, older_than=older_than, dry_run=dry_run)

    def erase(self, filter: str | Expression, *, dry_run: bool = False, retain_last: int | None = None,
              older_than: timedelta = timedelta(days=3)) -> ErasureReport:
        """Delete the rows matching ``filter`` and every stored copy of them, with a proof
        (spec/deletes.md ROWDEL-15 … ROWDEL-18); see :func:`erase.erase`."""
        from lakefmt.maintenance.erase import erase

        return erase(self.table, filter, dry_run=dry_run, retain_last=retain_last, older_than=older_than)

    def reachable_files(self) -> Reachability:
        """Every file the table's retained snapshots and metadata files reach (MAINT-1)."""
        self.table.refresh()
        return table_reachability(self.table.io, self.table.metadata, self.table.metadata_location)

    def stats(self) -> TableStats:
        """Live, historical, metadata and orphan storage, and per-partition file statistics."""
        return table_stats(self.table)

    def check(self, *, level: Level = "full") -> CheckReport:
        """Validate the table at rest against spec/, reporting each violation with its requirement ID."""
        return check_table(self.table, level=level)

    def rollback_to(self, snapshot_id: int) -> Snapshot:
        """Same as :meth:`Table.rollback_to`."""
        return self.table.rollback_to(snapshot_id)

    def set_current_snapshot(self, snapshot_id: int) -> Snapshot:
        """Same as :meth:`Table.set_current_snapshot`."""
        return self.table.set_current_snapshot(snapshot_id)
