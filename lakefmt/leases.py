"""Leases in the catalog: who is working on what, until when (spec/catalog.md, CAT-9..CAT-11).

A lease is a row ``(table_uuid, kind, key, owner, expires_at)`` in the catalog's
``leases`` table. Taking one is atomic (it happens inside one catalog session), an
expired lease is free for anyone to take over, and the owner renews or releases it.
Two kinds are defined:

* ``write`` — a write intent (CAT-10): the key is a *writer token* that every file
  the writer creates carries in its name; orphan removal never deletes a file named
  with the token of a live write lease.
* ``partition`` — a compaction lease (CAT-11): the key is a partition path; two
  compactors never rewrite the same partition at once.

Example:
    >>> leases = Leases(catalog)
    >>> leases.acquire(table_uuid, "partition", "ts_day=2026-01-01", owner="worker-1", ttl=600)
    True
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog, CatalogSession


@dataclass(frozen=True)
class Lease:
    table_uuid: str
    kind: str
    key: str
    owner: str
    expires_at: float

    def is_live(self, now: float | None = None) -> bool:
        return self.expires_at > (time.time() if now is None else now)


class Leases:
    """Lease operations on one catalog. Each call is one short catalog session."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def acquire(self, table_uuid: str, kind: str, key: str, *, owner: str, ttl: float) -> bool:
        """Take (or renew, for the same owner) one lease; False if another owner holds it live."""
        return self.acquire_many(table_uuid, kind, [key], owner=owner, ttl=ttl)

    def acquire_many(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str, ttl: float) -> bool:
        """All of ``keys`` or none of them, atomically."""
        with self.catalog.session() as s:
            return acquire_in_session(s, table_uuid, kind, keys, owner=owner, ttl=ttl)

    def release(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str) -> None:
        with self.catalog.session() as s:
            release_in_session(s, table_uuid, kind, keys, owner=owner)

    def live(self, table_uuid: str, kind: str | None = None) -> list[Lease]:
        """Leases not yet expired, for one table (and one kind)."""
        sql = "SELECT table_uuid, kind, lease_key, owner, expires_at FROM leases WHERE table_uuid = ? AND expires_at > ?"
        params: list[object] = [table_uuid, time.time()]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        with self.catalog.session() as s:
            return [Lease(*row) for row in s.con.execute(sql + " ORDER BY lease_key", params).fetchall()]


def acquire_in_session(s: CatalogSession, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str,
                       ttl: float) -> bool:
    """Take leases inside an open catalog session (used when a commit renews its write lease)."""
    now = time.time()
    s.con.execute("BEGIN TRANSACTION")
    try:
        for key in keys:
            row = s.con.execute(
                "SELECT owner, expires_at FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key = ?",
                [table_uuid, kind, key]).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                s.con.execute("ROLLBACK")
                return False
            if row is not None:
                s.con.execute("DELETE FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key = ?",
                              [table_uuid, kind, key])
            s.con.execute("INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?)",
                          [table_uuid, kind, key, owner, now + ttl, now])
        s.con.execute("COMMIT")
        return True
    except BaseException:
        s.con.execute("ROLLBACK")
        raise


def release_in_session(s: CatalogSession, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str) -> None:
    """Drop ``owner``'s leases on ``keys`` inside an open catalog session (others' leases are untouched)."""
    for key in keys:
        s.con.execute("DELETE FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key = ? AND owner = ?",
                      [table_uuid, kind, key, owner])
