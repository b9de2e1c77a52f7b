"""One process's access to the catalog file: lock, attach, one unit of work, detach (spec/catalog.md CAT-6, CAT-22, CAT-23).

:class:`CatalogFileAccess` is the machinery under :meth:`lakefmt.catalog.Catalog.session`.
Each unit of work waits for the other threads of this process, then for ``<catalog>.lock``
(:mod:`lakefmt.catalog_lock`), attaches the DuckDB file to this process's own in-memory
DuckDB instance, and at its end detaches the file and gives the lock back. Attaching costs
what DuckDB needs to open the file and replay its write-ahead log; detaching releases
DuckDB's file lock exactly as closing a connection does, for ~1 ms instead of the ~11 ms it
costs to start a DuckDB instance per session.

A process that makes many units of work in a row, such as the catalog server, may keep the
file locked and attached between them for a bounded time (``linger``, CAT-23): measured with
one writer through the server, an empty session cost ~3.8 ms of CPU, about a third of a
commit. The file is let go once no unit of work started for ``linger`` seconds, and after
:data:`MAX_HOLD_SECONDS` of holding it in a row, after which this process works session by
session for :data:`PAUSE_SECONDS`, so that other processes waiting for the lock get it.

Example:
    >>> access = CatalogFileAccess("/tmp/wh/catalog.duckdb", read_only=False, lock_timeout=30.0,
    ...                            unreadable=ValueError, linger=0.05)
    >>> with access.attached() as con:
    ...     con.execute("SELECT 1").fetchall()
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import duckdb

from lakefmt.catalog_file import ATTACHED
from lakefmt.catalog_lock import LockFile, lock_path
from lakefmt.errors import CatalogLockTimeoutError, InvalidCatalogPathError, ReadOnlyCatalogError

WAL_CHECKPOINT_BYTES = 8 * 1024
"""A writing session checkpoints the catalog file once its write-ahead log holds this much (CAT-22).

A commit adds ~1.3 KiB to the log; each session replays the log when it attaches the
file, and a checkpoint costs a sync of the file. Measured with DuckDB 2.0.1 on local disk:
attaching costs 1.6 ms plus ~0.21 ms per KiB of log, a checkpoint 5.5-7 ms. Per commit, a
threshold of W KiB costs about 0.1 * W ms of replay and 8 / W ms of checkpoints, least near
8 KiB: 300 ten-row appends, alternating between catalogs checkpointing at 4, 8 and 16 KiB,
took 17.9 ms at 8 KiB against 18.7 ms at 16 KiB and 18.5 ms at 4 KiB (medians, Artemis rows;
telemetry rows 20.2 against 20.8 and 20.9 ms), and their means were lower by as much.
"""
MAX_HOLD_SECONDS = 0.5
"""The longest a lingering process keeps the catalog file in a row (CAT-23)."""
PAUSE_SECONDS = 0.05
"""After a hold of :data:`MAX_HOLD_SECONDS`, how long the process lets go of the file after every unit of work."""


def wal_size(catalog_path: str) -> int:
    """Bytes in the catalog file's DuckDB write-ahead log ``<catalog>.wal`` (0 if there is none)."""
    try:
        return os.stat(catalog_path + ".wal").st_size
    except OSError:
        return 0


@dataclass
class _Held:
    """The lock file descriptor and the DuckDB connection with the catalog file attached."""

    fd: int | None
    con: duckdb.DuckDBPyConnection
    since: float  # time.monotonic() when the lock was taken


_ACCESSES: weakref.WeakSet[CatalogFileAccess] = weakref.WeakSet()


def _forget_in_child() -> None:
    """A forked child shares the parent's lock: it closes its copy of the descriptor, so that the
    parent's release is the release, and starts its own DuckDB instance (CatalogFileAccess._instance)."""
    for access in list(_ACCESSES):
        access._forget_after_fork()


os.register_at_fork(after_in_child=_forget_in_child)


class CatalogFileAccess:
    """Exclusive units of work on one catalog file for this process (CAT-6), optionally lingering (CAT-23).

    Args:
        catalog_path: the DuckDB catalog file.
        read_only: attach the file ``READ_ONLY`` under a shared lock (CAT-18); never lingers.
        lock_timeout: seconds one unit of work waits in all for this process's other threads,
            the lock file and DuckDB's own file lock.
        unreadable: makes the error raised for a file DuckDB cannot read as a database.
        linger: seconds to keep the file locked and attached after a unit of work (0: never).
    """

    def __init__(self, catalog_path: str, *, read_only: bool, lock_timeout: float,
                 unreadable: Callable[[BaseException], Exception], linger: float = 0.0) -> None:
        self.catalog_path, self.read_only, self.lock_timeout = catalog_path, read_only, lock_timeout
        self.linger = 0.0 if read_only else float(linger)
        self._unreadable = unreadable
        self._lock = LockFile(lock_path(catalog_path), read_only=read_only)
        self._thread_lock = threading.Lock()
        self._duckdb: duckdb.DuckDBPyConnection | None = None
        self._duckdb_pid = 0
        self._held: _Held | None = None  # kept between units of work (CAT-23); guarded by _thread_lock
        self._release_at = 0.0
        self._whole_sessions_until = 0.0
        self._wake = threading.Event()
        self._releaser: threading.Thread | None = None
        _ACCESSES.add(self)

    @contextlib.contextmanager
    def attached(self, *, checkpoint: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection with the catalog file attached as :data:`ATTACHED`, exclusively, until the block ends.

        A block that raises leaves the file as it was: its open transaction is rolled back and
        the file is detached without a checkpoint. With ``checkpoint`` a block that succeeds
        folds the write-ahead log into the file (CAT-22).
        """
        deadline = time.monotonic() + self.lock_timeout
        if not self._thread_lock.acquire(timeout=min(self.lock_timeout, threading.TIMEOUT_MAX)):
            raise CatalogLockTimeoutError(
                f"another thread of this process (pid {os.getpid()}) held the catalog {self.catalog_path} "
                f"for {self.lock_timeout:g}s; it is stuck inside a catalog session")
        try:
            held = self._take(deadline)
            try:
                yield held.con
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    held.con.execute("ROLLBACK")  # a unit of work left open by the error
                self._let_go(held, checkpoint=None)
                raise
            self._end(held, checkpoint)
        finally:
            self._thread_lock.release()

    def release(self) -> None:
        """Let go of the file now if this process keeps it between units of work (CAT-23)."""
        with self._thread_lock:
            held, self._held = self._held, None
            if held is not None:
                self._let_go(held, checkpoint=False)

    # -- one unit of work --------------------------------------------------------------------------
    def _take(self, deadline: float) -> _Held:
        held, self._held = self._held, None
        if held is not None and time.monotonic() - held.since > MAX_HOLD_SECONDS:
            self._let_go(held, checkpoint=False)  # CAT-23: waiting processes get their turn now
            self._whole_sessions_until = time.monotonic() + PAUSE_SECONDS
            held = None
        if held is not None:
            return held
        fd = self._lock.acquire(deadline=deadline, timeout=self.lock_timeout)
        try:
            con = self._attach(deadline)
        except BaseException:
            self._lock.release(fd)
            raise
        return _Held(fd, con, time.monotonic())

    def _end(self, held: _Held, checkpoint: bool) -> None:
        now = time.monotonic()
        if self.linger <= 0 or now < self._whole_sessions_until:
            self._let_go(held, checkpoint=checkpoint)
            return
        self._checkpoint_if_due(held.con, checkpoint)
        self._held, self._release_at = held, now + self.linger
        if self._releaser is None or not self._releaser.is_alive():
            self._releaser = threading.Thread(target=self._release_when_idle, name="lakefmt-catalog-linger",
                                              daemon=True)
            self._releaser.start()
        self._wake.set()

    def _let_go(self, held: _Held, *, checkpoint: bool | None) -> None:
        """Detach the file, then give the lock back (CAT-6: in that order)."""
        try:
            self._detach(held.con, checkpoint=checkpoint)
        finally:
            self._lock.release(held.fd)

    def _release_when_idle(self) -> None:
        """The linger thread: lets go of the file once no unit of work started for ``linger`` seconds."""
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                delay = self._release_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # a timer, not a synchronization: a unit of work may start meanwhile
                    continue
                if not self._thread_lock.acquire(blocking=False):
                    break  # a unit of work runs; its end sets the next release time and wakes this thread
                try:
                    if self._held is not None and time.monotonic() >= self._release_at:
                        held, self._held = self._held, None
                        self._let_go(held, checkpoint=False)
                finally:
                    self._thread_lock.release()
                break

    def _forget_after_fork(self) -> None:
        held, self._held = self._held, None
        self._thread_lock = threading.Lock()
        self._wake, self._releaser = threading.Event(), None
        if held is not None and held.fd is not None:
            with contextlib.suppress(OSError):
                os.close(held.fd)  # the child's copy only: the parent still holds the lock

    # -- DuckDB --------------------------------------------------------------------------------------
    def _instance(self) -> duckdb.DuckDBPyConnection:
        """This process's in-memory DuckDB instance (a forked child starts its own).

        Detaching does not checkpoint (CAT-22): a session's commit is durable in the
        write-ahead log, and :meth:`_detach` checkpoints only once the log has grown.
        """
        if self._duckdb is None or self._duckdb_pid != os.getpid():
            con = duckdb.connect(config={"threads": 1})
            with contextlib.suppress(duckdb.Error):  # a DuckDB without the setting checkpoints at each detach
                con.execute("SET checkpoint_on_detach = 'DISABLED'")
            self._duckdb, self._duckdb_pid = con, os.getpid()
        return self._duckdb

    def _checkpoint_if_due(self, con: duckdb.DuckDBPyConnection, checkpoint: bool | None) -> None:
        """Checkpoint if asked or if the write-ahead log passed :data:`WAL_CHECKPOINT_BYTES` (CAT-22).
        ``checkpoint=None``: never (the unit of work failed). A failed checkpoint is left to the next session."""
        wal = 0 if self.read_only or checkpoint is None else wal_size(self.catalog_path)
        if wal >= WAL_CHECKPOINT_BYTES or (checkpoint and wal > 0):
            with contextlib.suppress(duckdb.Error):
                con.execute(f"CHECKPOINT {ATTACHED}")

    def _detach(self, con: duckdb.DuckDBPyConnection, *, checkpoint: bool | None = False) -> None:
        """End a session: checkpoint if due (:meth:`_checkpoint_if_due`), then detach (CAT-22)."""
        self._checkpoint_if_due(con, checkpoint)
        try:
            con.execute(f"USE memory; DETACH {ATTACHED}")
        except duckdb.Error:
            self._duckdb = None  # closing the instance is sure to release the file
            con.close()

    def _attach(self, deadline: float) -> duckdb.DuckDBPyConnection:
        delay = 0.005
        path = self.catalog_path.replace("'", "''")
        mode = " (READ_ONLY)" if self.read_only else ""
        while True:
            con = self._instance()
            try:
                con.execute(f"ATTACH '{path}' AS {ATTACHED}{mode}; USE {ATTACHED}")
                return con
            except duckdb.Error as exc:
                message = str(exc)
                if not isinstance(exc, duckdb.IOException) or "lock" not in message.lower():
                    self._duckdb = None  # start from a fresh instance next time
                    with contextlib.suppress(duckdb.Error):
                        con.close()
                    if "Permission denied" in message or "Read-only file system" in message:
                        if self.read_only:
                            raise InvalidCatalogPathError(f"the catalog file {self.catalog_path} cannot be read "
                                                          f"by this process ({message}): check its permissions"
                                                          ) from exc
                        raise ReadOnlyCatalogError(
                            f"the catalog file {self.catalog_path} cannot be opened for writing ({message}); "
                            "open it with read_only=True to read it") from exc
                    raise self._unreadable(exc) from exc
                # A program that does not follow CAT-6, or a read-only reader (CAT-18), holds DuckDB's lock.
                if time.monotonic() > deadline:
                    raise CatalogLockTimeoutError(
                        f"the catalog file {self.catalog_path} stayed locked by a program outside this "
                        f"catalog's lock file for {self.lock_timeout:g}s: {message}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
