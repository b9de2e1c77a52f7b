"""Commit turns: the order in which the catalog server handles the commits of one table (CATHTTP-21..24).

A writer on a local catalog rebuilds a commit that lost its race while it holds the catalog
lock, so its second attempt cannot lose (COMMIT-7). A client of the catalog server holds no
lock between requests: without help, a rebuilt attempt may lose again, and again, each time
after a back-off (COMMIT-13). A turn gives that client what the lock gives a local writer. A
commit refused because the pointer moved is answered with the table's turn: until the
client's next commit request (or until the turn expires), the server holds every other
commit request to that table back, so the rebuilt attempt is the next one the server swaps.

Turns are kept in memory only. They order requests and never decide one: the swap is still
the compare-and-swap of CAT-4, so a lost turn (a restart, an expiry, a local writer on the
same catalog file) costs a retry, never a wrong commit.

Example:
    >>> turns = CommitTurns(seconds=2.0)
    >>> with turns.request(("ops", "events"), None) as turn:
    ...     turn.keep()  # refused "moved": the client gets the table's turn
    >>> turns.holder(("ops", "events")) == turn.ticket
    True
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

Key = tuple[str, str]  # (namespace, name)


@dataclass
class _Table:
    holder: str | None = None
    expires: float = 0.0  # time.monotonic() after which the holder's turn lapses
    queue: deque[str] = field(default_factory=deque)  # tickets of waiting requests, first come first served


class Turn:
    """A commit request's hold on its table; :meth:`keep` hands it to the client after the request."""

    def __init__(self, turns: CommitTurns, key: Key, ticket: str) -> None:
        self._turns, self._key, self.ticket = turns, key, ticket
        self.kept = False
        self.waited = False  # whether another request held or waited for the turn when this one came

    def keep(self) -> None:
        """Hold the turn for the client until its next commit request or the turn's expiry (CATHTTP-22)."""
        self.kept = True


class CommitTurns:
    """Per table, at most one holder; commit requests wait for it, in arrival order (CATHTTP-21).

    Args:
        seconds: how long a turn handed to a client lasts, and the longest a request waits for
            one holder before it goes ahead (a client that died holding a turn delays others that long).
    """

    def __init__(self, seconds: float = 2.0) -> None:
        self.seconds = float(seconds)
        self._cond = threading.Condition()
        self._tables: dict[Key, _Table] = {}

    def waiting(self) -> int:
        """How many commit requests wait for a turn now, over all tables."""
        with self._cond:
            return sum(len(t.queue) for t in self._tables.values())

    def holder(self, key: Key) -> str | None:
        """The ticket holding ``key``'s turn now, or None."""
        with self._cond:
            table = self._tables.get(key)
            return table.holder if table is not None and self._live(table) else None

    @contextmanager
    def request(self, key: Key, ticket: str | None) -> Iterator[Turn]:
        """Hold ``key``'s turn for one commit request.

        A request naming the ticket that holds the turn goes ahead at once; any other waits
        until the turn is free (released or lapsed) and its own place in the queue comes. On
        leaving, the turn is released unless :meth:`Turn.keep` was called, in which case it is
        held for the client under a fresh ticket (a ticket is used once).
        """
        waited = False
        if ticket is not None and self.holder(key) == ticket:
            mine = ticket
        else:
            mine, waited = self._enter(key)
        turn = Turn(self, key, mine)
        turn.waited = waited
        try:
            yield turn
        finally:
            with self._cond:
                table = self._tables.setdefault(key, _Table())
                if table.holder == mine and turn.kept:
                    turn.ticket = uuid.uuid4().hex
                    table.holder, table.expires = turn.ticket, time.monotonic() + self.seconds
                else:
                    turn.kept = False  # a turn that lapsed during the request is not handed over
                    if table.holder == mine:
                        table.holder = None
                self._forget_if_idle(key, table)
                self._cond.notify_all()

    def release(self, key: Key, ticket: str) -> bool:
        """Give back a turn the client will not use (CATHTTP-23); False when ``ticket`` does not hold it."""
        with self._cond:
            table = self._tables.get(key)
            if table is None or table.holder != ticket:
                return False
            table.holder = None
            self._forget_if_idle(key, table)
            self._cond.notify_all()
            return True

    def _enter(self, key: Key) -> tuple[str, bool]:
        """Queue for ``key``'s turn and take it; the ticket, and whether another request was there first."""
        ticket = uuid.uuid4().hex
        with self._cond:
            table = self._tables.setdefault(key, _Table())
            waited = bool(table.queue) or self._live(table)
            table.queue.append(ticket)
            while table.queue[0] != ticket or self._live(table):
                wait = table.expires - time.monotonic() if self._live(table) and table.queue[0] == ticket else None
                self._cond.wait(wait)
            table.queue.popleft()
            table.holder, table.expires = ticket, time.monotonic() + self.seconds
            self._cond.notify_all()
            return ticket, waited

    def _forget_if_idle(self, key: Key, table: _Table) -> None:
        if table.holder is None and not table.queue:
            self._tables.pop(key, None)

    @staticmethod
    def _live(table: _Table) -> bool:
        return table.holder is not None and time.monotonic() < table.expires


class KnownPointers:
    """The pointer of each table as this server last read or swapped it, while the catalog file is unchanged.

    A turn taken before a commit is built (CATHTTP-25) names the table's pointer. Reading it
    costs a session of the catalog file (lock, attach, query, detach: a few milliseconds, on
    the path every commit of a busy table waits for). The server reads or swaps each pointer
    itself, so it remembers it, together with the size and modification time of the catalog
    file and of its write-ahead log right after that session. As long as both are unchanged,
    no other session wrote the file, and the remembered pointer is current. Another process or
    request that wrote the file changes them, and the pointer is read again. A stale answer is
    still only a hint: the swap decides (CATHTTP-24), so it would cost one refused commit.
    """

    def __init__(self, catalog_path: str) -> None:
        self._files = (catalog_path, catalog_path + ".wal")
        self._lock = threading.Lock()
        self._known: dict[Key, tuple[str, tuple[tuple[int, int, int], ...]]] = {}

    def _signature(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self._files:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                out.append((0, 0, 0))
            else:
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def get(self, key: Key) -> str | None:
        """The table's pointer if nothing wrote the catalog file since it was remembered, else None."""
        with self._lock:
            known = self._known.get(key)
        return known[0] if known is not None and known[1] == self._signature() else None

    def remember(self, key: Key, pointer: str) -> None:
        """Call right after the session that read or swapped ``pointer`` ended."""
        signature = self._signature()
        with self._lock:
            self._known[key] = (pointer, signature)

    def forget(self, key: Key | None = None) -> None:
        with self._lock:
            if key is None:
                self._known.clear()
            else:
                self._known.pop(key, None)
