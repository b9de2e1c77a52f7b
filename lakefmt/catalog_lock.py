"""The catalog's lock file ``<catalog>.lock``: a bounded wait for one session (spec/catalog.md CAT-6, CAT-18).

A session takes an exclusive ``flock`` on the lock file and then writes its process id
at the start of the file, so that a process that gives up waiting can say who holds
the lock. A read-only catalog (CAT-18) opens the lock file for reading, takes a shared
``flock`` and writes nothing; if it cannot open the file at all it goes without.

The wait polls ``flock(LOCK_NB)`` with a short exponential backoff (0.2 ms doubling
to 2 ms) until a deadline. Polling was chosen over a blocking ``flock`` bounded by a
timer because a timer can interrupt a blocking call only through a signal, which
Python delivers to the main thread alone, and the other way, a helper thread doing the
blocking call, stays blocked after the timeout and keeps the lock file's open file
description, and with it the lock, alive in any child forked meanwhile. Polling costs
at most 500 non-blocking system calls a second while waiting and notices a release
within 2 ms; the kernel does not queue ``flock`` waiters in order either, so no
fairness is lost. Measured with ``benchmarks/bench_catalog.py`` (4 processes, 2 cores),
throughput stayed within the run-to-run noise of a blocking ``flock`` (bare swaps
102-113 against 88-111 per second, full appends 31-36 against 34-37).

Example:
    >>> lock = LockFile(lock_path("/tmp/wh/catalog.duckdb"), read_only=False)
    >>> with lock.held(deadline=time.monotonic() + 30.0, timeout=30.0):
    ...     pass  # one short unit of work on the catalog file
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator

from lakefmt.errors import CatalogLockTimeoutError

_FIRST_DELAY = 0.0002
_MAX_DELAY = 0.002
_PID_WIDTH = 16  # "<pid>" padded with spaces, then a newline: one pwrite, never a longer file
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def lock_path(catalog_path: str) -> str:
    """The lock file of a catalog file (CAT-6)."""
    return catalog_path + ".lock"


def why_not_writable(catalog_path: str) -> str | None:
    """Why this process cannot write the catalog (read-only mount, permissions), or None if it can.

    Creates the lock file if it is missing, as every writer would (CAT-6).
    """
    try:
        fd = os.open(lock_path(catalog_path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            return f"the lock file {lock_path(catalog_path)} cannot be opened for writing ({exc.strerror})"
        raise
    os.close(fd)
    for path in (catalog_path, os.path.dirname(catalog_path)):
        if os.path.exists(path) and not os.access(path, os.W_OK):
            return f"{path} is not writable by this process"
    return None


def holder_pid(fd: int) -> int | None:
    """The process id the current holder wrote into the lock file, if any."""
    try:
        text = os.pread(fd, _PID_WIDTH, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


class LockFile:
    """The lock file of one catalog file; each :meth:`held` opens it afresh (a forked child shares nothing)."""

    def __init__(self, path: str, *, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only

    def _open(self) -> int | None:
        if not self.read_only:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, PermissionError):
            return None  # CAT-18: a reader that cannot open the lock file relies on DuckDB's own lock

    @contextlib.contextmanager
    def held(self, *, deadline: float, timeout: float) -> Iterator[None]:
        """Hold the lock (exclusive, or shared when read-only) until the block ends (see :meth:`acquire`)."""
        fd = self.acquire(deadline=deadline, timeout=timeout)
        try:
            yield
        finally:
            self.release(fd)

    def acquire(self, *, deadline: float, timeout: float) -> int | None:
        """Take the lock (exclusive, or shared when read-only); the open lock file to :meth:`release`, or None
        for a reader that could not open it (CAT-18).

        Raises:
            CatalogLockTimeoutError: the lock stayed held by another process until ``deadline``;
                the message names the lock file and the holder's process id where known.
        """
        fd = self._open()
        if fd is None:
            return None
        try:
            self._acquire(fd, deadline, timeout)
            if not self.read_only:
                os.pwrite(fd, f"{os.getpid():<{_PID_WIDTH - 1}}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def release(fd: int | None) -> None:
        """Give back a lock taken by :meth:`acquire`."""
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _acquire(self, fd: int, deadline: float, timeout: float) -> None:
        operation = (fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX) | fcntl.LOCK_NB
        delay = _FIRST_DELAY
        while True:
            try:
                fcntl.flock(fd, operation)
                return
            except BlockingIOError:
                pass
            now = time.monotonic()
            if now >= deadline:
                pid = holder_pid(fd)
                holder = f"process {pid}" if pid is not None else "another process (its pid is not recorded)"
                raise CatalogLockTimeoutError(
                    f"the catalog lock file {self.path} stayed locked by {holder} for {timeout:g}s. "
                    "That process is stopped or stuck inside a catalog session: let it finish, resume "
                    "or end it, or pass a longer lock_timeout=...")
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, _MAX_DELAY)
