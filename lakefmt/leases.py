"""Leases in the catalog: who is working on what, until when (spec/catalog.md, CAT-9..CAT-11).

A lease is a row ``(table_uuid, kind, key, owner, expires_at)`` in the catalog's
``leases`` table. Taking one is atomic (it happens inside one catalog session), an
expired lease is free for anyone to take over, and the owner renews or releases it.
Two kinds are defined:

* ``write`` — a write intent (CAT-10): the key is a *writer token* that every file
  the writer creates carries in its name; orphan removal never deletes a file named
  with the token of a live write lease. :class:`WriteLease` keeps one renewed in the
  background for as long as a write holds it or its files await a commit.
* ``partition`` — a compaction lease (CAT-11): the key is a partition path; two
  compactors never rewrite the same partition at once.

Example:
    >>> leases = Leases(catalog)
    >>> leases.acquire(table_uuid, "partition", "ts_day=2026-01-01", owner="worker-1", ttl=600)
    True
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakefmt.errors import CommitStateUnknownError, WriteLeaseLostError

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog, CatalogSession

log = logging.getLogger(__name__)


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
        with self.catalog.session() as s:
            return [Lease(*row) for row in s.live_leases(table_uuid, kind)]


def acquire_in_session(s: CatalogSession, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str,
                       ttl: float) -> bool:
    """Take leases inside an open catalog session (used when a commit renews its write lease)."""
    return s.acquire_leases(table_uuid, kind, keys, owner=owner, ttl=ttl)


def release_in_session(s: CatalogSession, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str) -> None:
    """Drop ``owner``'s leases on ``keys`` inside an open catalog session (others' leases are untouched)."""
    s.release_leases(table_uuid, kind, keys, owner=owner)


def renew_in_session(s: CatalogSession, table_uuid: str, kind: str, key: str, *, owner: str, ttl: float) -> bool:
    """Extend ``owner``'s lease on ``key`` to now + ``ttl`` if it is still live and still theirs (CAT-10).

    Unlike :func:`acquire_in_session` this never takes back an expired lease: once it
    expired, orphan removal may have deleted the files it protected.
    """
    return s.renew_lease(table_uuid, kind, key, owner=owner, ttl=ttl)


class WriteLease:
    """A writer token under a write-intent lease, renewed while it protects files (CAT-10, COMMIT-19).

    The lease is *active* while a write holds it (:meth:`hold`) or while files written
    under the token wait for their commit (:meth:`protect` until :meth:`settle`). While
    it is active, a background thread renews it each time a quarter of its lifetime has
    passed, so a renewal happens before half of it has passed even when one is late. A
    renewal only extends a live lease: a lease found expired or taken over is *lost* for
    good, and a commit of its files fails under the catalog lock
    (:meth:`verify_in_session` raises :class:`WriteLeaseLostError`).

    Example:
        >>> lease = WriteLease.acquire(catalog, table_uuid, ttl=3600, label="ns.t")
        >>> with lease.hold():
        ...     write_files_named_with(lease.token)
    """

    def __init__(self, catalog: Catalog, table_uuid: str, ttl: float, *, token: str | None = None,
                 label: str = "") -> None:
        self.catalog = catalog
        self.table_uuid = table_uuid
        self.ttl = float(ttl)
        self.token = token or uuid.uuid4().hex[:16]
        self.label = label or table_uuid
        self.expires_at = 0.0  # when it expires unless renewed (a lower bound of the catalog's value)
        self.lost = False
        self._holds = 0
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._retry_at = 0.0

    @classmethod
    def acquire(cls, catalog: Catalog, table_uuid: str, ttl: float, *, token: str | None = None,
                label: str = "") -> WriteLease:
        """Take a new write lease (one catalog session)."""
        lease = cls(catalog, table_uuid, ttl, token=token, label=label)
        started = time.time()
        if not Leases(catalog).acquire(table_uuid, "write", lease.token, owner=lease.token, ttl=ttl):
            raise WriteLeaseLostError(f"write lease {lease.token} of {lease.label} is held by another writer; "
                                      "use a fresh writer token")
        lease.expires_at = started + lease.ttl
        return lease

    @classmethod
    def acquire_in(cls, s: CatalogSession, catalog: Catalog, table_uuid: str, ttl: float, *,
                   label: str = "") -> WriteLease:
        """Take a new write lease inside the caller's open catalog session ``s`` (no session of its own)."""
        lease = cls(catalog, table_uuid, ttl, label=label)
        started = time.time()
        if not acquire_in_session(s, table_uuid, "write", [lease.token], owner=lease.token, ttl=ttl):
            raise WriteLeaseLostError(f"write lease {lease.token} of {lease.label} is held by another writer; "
                                      "use a fresh writer token")
        lease.expires_at = started + lease.ttl
        return lease

    def __repr__(self) -> str:
        return f"WriteLease({self.token!r}, {self.label!r}, active={self.active}, lost={self.lost})"

    # -- state -----------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Whether a write holds the lease or files written under it await a commit."""
        return self._holds > 0 or bool(self._pending)

    def seconds_left(self, now: float | None = None) -> float:
        return self.expires_at - (time.time() if now is None else now)

    def pending(self) -> frozenset[str]:
        """Locations of files written under the token and not yet committed or deleted."""
        with self._lock:
            return frozenset(self._pending)

    @contextlib.contextmanager
    def hold(self) -> Iterator[WriteLease]:
        """Keep the lease renewed for the duration of the block (nested holds are counted)."""
        with self._lock:
            self._holds += 1
        self._update_watch()
        try:
            yield self
        finally:
            with self._lock:
                self._holds -= 1
            self._update_watch()

    @contextlib.contextmanager
    def writing(self, delete: Callable[[list[str]], None]) -> Iterator[WriteLease]:
        """:meth:`hold` for a write and its commit; if the block raises, clean up after it (COMMIT-21).

        The files protected inside the block and still uncommitted are deleted with
        ``delete``, and once no other write needs the lease it is released, so nothing
        of the failed write stays protected. After an unknown commit outcome
        (``CommitStateUnknownError``) the files are kept (COMMIT-11) and the lease is left
        to expire.
        """
        before = self.pending()
        try:
            with self.hold():
                yield self
        except CommitStateUnknownError:
            self.settle(self.pending() - before)
            raise
        except BaseException:
            abandoned = sorted(self.pending() - before)
            try:
                delete(abandoned)
            except Exception as exc:  # noqa: BLE001 - never hide the write's own error (COMMIT-14)
                log.warning("could not delete the files of a failed write to %s: %s", self.label, exc)
            self.settle(abandoned)
            if not self.active:
                try:
                    self.release()
                except Exception as exc:  # noqa: BLE001 - it expires by itself
                    log.warning("could not release write lease %s of %s: %s", self.token, self.label, exc)
            raise

    def protect(self, locations: Iterable[str]) -> None:
        """Files written under the token: keep the lease renewed until they are settled."""
        with self._lock:
            self._pending.update(locations)
        self._update_watch()

    def settle(self, locations: Iterable[str]) -> None:
        """Files committed or deleted: they no longer need the lease."""
        with self._lock:
            self._pending.difference_update(locations)
        self._update_watch()

    def _update_watch(self) -> None:
        if self.active and not self.lost:
            _keeper.watch(self)
        else:
            _keeper.unwatch(self)

    # -- renewing and ending -----------------------------------------------------
    def renew(self) -> bool:
        """Extend the lease if it is still live and ours (one catalog session); False once it is lost."""
        if self.lost:
            _keeper.unwatch(self)
            return False
        started = time.time()
        with self.catalog.session() as s:
            renewed = renew_in_session(s, self.table_uuid, "write", self.token, owner=self.token, ttl=self.ttl)
        return self._renewed(renewed, started)

    def verify_in_session(self, s: CatalogSession) -> None:
        """Check, in a commit's catalog session before its swap, that the lease is live and ours (COMMIT-19).

        Live now means live since it was taken: nothing renews an expired lease. A read
        suffices (under the lock no one else acts on the catalog), and costs the swap's
        session no extra write.
        """
        row = None if self.lost else s.lease_holder(self.table_uuid, "write", self.token)
        if row is None or row[0] != self.token or row[1] <= time.time():
            self._renewed(False, 0.0)
            raise WriteLeaseLostError(
                f"the write lease {self.token} of {self.label} expired or was taken over before this commit "
                f"(write.lease-seconds = {self.ttl:g}): orphan removal may have deleted files written under it, "
                "so nothing was committed and the files of this write were deleted. Write the data again; if "
                "this process is often stalled for longer than half the lease, raise write.lease-seconds")

    def _renewed(self, renewed: bool, started: float) -> bool:
        if renewed:
            self.expires_at = started + self.ttl
        else:
            self.lost = True
            _keeper.unwatch(self)
        return renewed

    def release(self) -> None:
        """End the lease: delete its row (one catalog session). The token is not used again."""
        self.lost = True
        with self._lock:
            self._holds, self._pending = 0, set()
        _keeper.unwatch(self)
        Leases(self.catalog).release(self.table_uuid, "write", [self.token], owner=self.token)

    def _next_renewal(self) -> float:
        """When the background thread renews next: a quarter of the lifetime after the last renewal."""
        return max(self.expires_at - 0.75 * self.ttl, self._retry_at)

    def _renew_in_background(self) -> None:
        try:
            self.renew()
        except Exception as exc:  # noqa: BLE001 - a busy or unreachable catalog: try again soon
            if self.seconds_left() <= 0:
                self._renewed(False, time.time())
            else:
                self._retry_at = time.time() + min(self.ttl / 8, 1.0)
            log.warning("could not renew write lease %s of %s: %s", self.token, self.label, exc)
        if self.lost:
            log.warning("write lease %s of %s was lost: its files cannot be committed", self.token, self.label)


class _LeaseKeeper:
    """One daemon thread per process that renews every active :class:`WriteLease` when it is due."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._leases: set[WriteLease] = set()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def watch(self, lease: WriteLease) -> None:
        with self._cond:
            if lease in self._leases:
                return
            self._leases.add(lease)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lakefmt-write-leases", daemon=True)
                self._pid = os.getpid()
                self._thread.start()
            self._cond.notify()

    def unwatch(self, lease: WriteLease) -> None:
        with self._cond:
            self._leases.discard(lease)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.time()
                due = [lease for lease in self._leases if lease._next_renewal() <= now]
                if not due:
                    next_at = min((lease._next_renewal() for lease in self._leases), default=None)
                    self._cond.wait(None if next_at is None else max(next_at - now, 0.001))
                    continue
            for lease in due:
                lease._renew_in_background()


_keeper = _LeaseKeeper()


def current_or_new_write_lease(lease: WriteLease | None, catalog: Catalog, table_uuid: str, ttl: float, *,
                               label: str = "", session: CatalogSession | None = None) -> WriteLease:
    """``lease`` if it may go on protecting writes, else a newly acquired one (CAT-10).

    An active lease (a write holds it, or its files await a commit) is kept even when
    lost: its files must not be committed under another token. An idle one is renewed
    once less than half of its lifetime is left, and replaced if it has expired, was
    released or belongs to another table. With ``session`` the renewal or the new lease
    is done in that open catalog session rather than in one of its own.
    """
    if lease is not None and lease.table_uuid == table_uuid:
        if lease.active:
            return lease
        if not lease.lost and lease.seconds_left() > lease.ttl / 2:
            return lease
        if not lease.lost:
            if session is None:
                renewed = lease.renew()
            else:
                started = time.time()
                renewed = lease._renewed(renew_in_session(session, table_uuid, "write", lease.token,
                                                          owner=lease.token, ttl=lease.ttl), started)
            if renewed:
                return lease
    if session is not None:
        return WriteLease.acquire_in(session, catalog, table_uuid, ttl, label=label)
    return WriteLease.acquire(catalog, table_uuid, ttl, label=label)
