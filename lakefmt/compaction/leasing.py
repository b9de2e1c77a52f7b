"""Partition leases of one compaction run, in as few catalog sessions as possible (COMPACT-22..COMPACT-24, COMPACT-37).

Every catalog session opens the catalog file under its lock, so a run batches its
lease work: starting a partition is **one** session that releases the leases of the
partitions finished since the last start, takes the new partition's lease and reads
the table's current metadata location (to drop groups whose files are gone,
COMPACT-18). That session also takes, all or none, the leases of the partitions the
run starts next when the caller names them (``ahead``, COMPACT-37): a run of small
partitions then takes every lease in one session, and starting each of those
partitions costs none. A lease is renewed before a commit, and before its partition
starts, only once half its lifetime has passed. The leases of the partitions a commit
completes are released in that commit's own session, after its swap
(:meth:`PartitionLeases.release_in`); those still held when the run ends (a commit
failed, the run stopped) go in one last session.

Example:
    >>> leases = PartitionLeases(table, owner="compactor:a", ttl=900.0)
    >>> if leases.start("0:day=2026-11-01", ahead=lambda: ["0:day=2026-11-02"]):
    ...     ...  # rewrite, leases.renew_if_due(key), commit
    ...     leases.finished("0:day=2026-11-01")
    >>> leases.start("0:day=2026-11-02")  # taken above: no catalog session
    True
    >>> leases.close()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakefmt.leases import acquire_in_session, release_in_session

if TYPE_CHECKING:
    from lakefmt.catalog import CatalogSession
    from lakefmt.table import Table

LEASE_KIND = "partition"


class PartitionLeases:
    """The partition leases one run holds; with ``enabled=False`` only the table refresh is done."""

    def __init__(self, table: Table, *, owner: str, ttl: float, enabled: bool = True) -> None:
        self.table, self.owner, self.ttl, self.enabled = table, owner, ttl, enabled
        self._taken_at: dict[str, float] = {}  # key -> when this run last took or renewed it
        self._finished: list[str] = []  # done with, released in the next session

    def start(self, key: str, ahead: Callable[[], Sequence[str]] | None = None) -> bool:
        """Hold ``key``'s lease for a partition about to start; False if another compactor holds it.

        A lease this run took with an earlier partition's (``ahead``) less than half its
        lifetime ago costs no catalog session: the table is then not refreshed, its
        metadata is the one this run's own commits left. Otherwise one session releases
        the finished partitions' leases, takes ``key``'s together with those ``ahead()``
        names (the partitions the run starts next, all or none, COMPACT-23 and COMPACT-37;
        if one of them is held, ``key``'s alone) and refreshes the table. ``ahead`` is
        called only when a session is needed.
        """
        if not self.enabled:
            self._refresh(self._read_location)
            return True
        taken = self._taken_at.get(key)
        if taken is not None and time.monotonic() - taken < self.ttl / 2:
            return True
        self._taken_at.pop(key, None)  # renewed below, or lost to another compactor
        uuid = self.table.metadata.table_uuid
        later = ahead() if ahead is not None else ()
        wanted = [key, *(k for k in dict.fromkeys(later) if k != key and k not in self._taken_at)]

        def take(s: CatalogSession) -> str | None:
            release_in_session(s, uuid, LEASE_KIND, self._finished, owner=self.owner)
            self._finished = []
            now = time.monotonic()
            if len(wanted) > 1 and acquire_in_session(s, uuid, LEASE_KIND, wanted, owner=self.owner, ttl=self.ttl):
                self._taken_at.update(dict.fromkeys(wanted, now))
            elif acquire_in_session(s, uuid, LEASE_KIND, [key], owner=self.owner, ttl=self.ttl):
                self._taken_at[key] = now
            else:
                return None
            return self._read_location(s)

        return self._refresh(take)

    def take_in(self, s: CatalogSession, keys: Sequence[str]) -> None:
        """Take ``keys``' leases, all or none (COMPACT-23, COMPACT-37), in the open session ``s``
        (the one that read the pointer for planning, COMPACT-39): their partitions then start
        without a session. If one is held by another owner, none is taken here."""
        wanted = [k for k in dict.fromkeys(keys) if k not in self._taken_at]
        if not self.enabled or not wanted:
            return
        now = time.monotonic()
        if acquire_in_session(s, self.table.metadata.table_uuid, LEASE_KIND, wanted, owner=self.owner, ttl=self.ttl):
            self._taken_at.update(dict.fromkeys(wanted, now))

    def _read_location(self, s: CatalogSession) -> str:
        namespace, name = self.table.identifier
        return s.current_location(namespace, name)

    def _refresh(self, work: Callable[[CatalogSession], str | None]) -> bool:
        """Run ``work`` in one catalog session; refresh the table from the location it returns (False: None)."""
        with self.table.catalog.session() as s:
            location = work(s)
        if location is None:
            return False
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

    def release_in(self, s: CatalogSession, keys: Sequence[str]) -> None:
        """Release, in the open session ``s`` (a commit's, after its swap), ``keys`` and the leases
        of the partitions finished before: nothing is left for a session of their own."""
        if not self.enabled:
            return
        done = [*self._finished, *(k for k in dict.fromkeys(keys) if k in self._taken_at)]
        if not done:
            return
        release_in_session(s, self.table.metadata.table_uuid, LEASE_KIND, done, owner=self.owner)
        self._finished = [k for k in self._finished if k not in done]
        for k in done:
            self._taken_at.pop(k, None)

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
