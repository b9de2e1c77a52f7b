"""Making local files durable (spec/commits.md COMMIT-20): the fsync threads, and a head start for large files.

:meth:`lakefmt.io.FileIO.sync` fsyncs a commit's files and folders on these threads, all at
once. A large file's fsync starts on them when the file is closed (:data:`EARLY_SYNC_BYTES`), so
that its write-out overlaps whatever comes before the commit's sync (the rest of a rewrite, the
commit's manifests) instead of being waited for there. Measured on ext4 with the three 2 MB outputs
of a bin-pack of 240 tiny telemetry files: the commit's sync took 2.3 ms instead of 10 ms, the
commit 26 ms instead of 38 ms. Small files are left to the commit's sync, where the file system
makes them durable together in one journal commit.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

SYNC_THREADS = 8

EARLY_SYNC_BYTES = 256 * 1024
"""A local file of at least this size starts its fsync when it is closed (COMMIT-20)."""


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def sync_threads() -> ThreadPoolExecutor:
    """This process's pool for fsync calls (a forked child starts its own)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="lakefmt-fsync"))
        return _pool[1]


def fsync_path(path: str) -> OSError | None:
    """fsync one local file or folder by path; the error, if any. A missing one needs nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # deleted since (an abandoned write): nothing to make durable
    except OSError as exc:
        return exc
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    return None
