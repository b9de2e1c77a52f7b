"""Partition leases of one compaction run, in as few catalog sessions as possible (COMPACT-22..COMPACT-24).

Every catalog session opens the catalog file under its lock, so a run batches its
lease work: starting a partition is **one** session that releases the leases of the
partitions finished since the last start, takes the new partition's lease and reads
the table's current metadata location (to drop groups whose files are gone,
COMPACT-18). A lease is renewed before a commit only once half its lifetime has
passed, and the leases still held when the run ends go in one last session. Per
partition that leaves the partition start; its groups share commits (COMPACT-18).

Example:
    >>> leases = PartitionLeases(table, owner="compactor:a", ttl=900.0)
    >>> if leases.start("0:day=2026-11-01"):
    ...     ...  # rewrite, leases.renew_if_due(key), commit
    ...     leases.finished("0:day=2026-11-01")
    >>> leases.close()
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakefmt.leases import acquire_in_session, release_in_session

if TYPE_CHECKING:
    from lakefmt.table import Table

LEASE_KIND = "partition"


class PartitionLeases:
    """The partition leases one run holds; with ``enabled=False`` only the table refresh is done."""

    def __init__(self, table: Table, *, owner: str, ttl: float, enabled: bool = True) -> None:
        self.table, self.owner, self.ttl, self.enabled = table, owner, ttl, enabled
        self._taken_at: dict[str, float] = {}  # key -> when this run last took or renewed it
        self._finished: list[str] = []  # done with, released in the next session

    def start(self, key: str) -> bool:
        """Take ``key``'s lease and refresh the table, in one catalog session; False if another holds it."""
        namespace, name = self.table.identifier
        uuid = self.table.metadata.table_uuid
        with self.table.catalog.session() as s:
            if self.enabled:
                release_in_session(s, uuid, LEASE_KIND, self._finished, owner=self.owner)
                self._finished = []
                if not acquire_in_session(s, uuid, LEASE_KIND, [key], owner=self.owner, ttl=self.ttl):
                    return False
                self._taken_at[key] = time.monotonic()
            location = s.current_location(namespace, name)
        self.table.refresh(location)
        return True

    def renew_if_due(self, key: str) -> None:
        """Renew ``key``'s lease before a commit once half its lifetime has passed (COMPACT-22)."""
        taken = self._taken_at.get(key)
        if not self.enabled or taken is None or time.monotonic() - taken < self.ttl / 2:
            return
        with self.table.catalog.session() as s:
            acquire_in_session(s, self.table.metadata.table_uuid, LEASE_KIND, [key], owner=self.owner, ttl=self.ttl)
        self._taken_at[key] = time.monotonic()

    def finished(self, key: str) -> None:
        """The partition's groups are done: its lease goes in the next session."""
        if self._taken_at.pop(key, None) is not None:
            self._finished.append(key)

    def close(self) -> None:
        """Release every lease this run still holds (one session)."""
        keys = [*self._finished, *self._taken_at]
        self._finished, self._taken_at = [], {}
        if self.enabled and keys:
            with self.table.catalog.session() as s:
                release_in_session(s, self.table.metadata.table_uuid, LEASE_KIND, keys, owner=self.owner)
