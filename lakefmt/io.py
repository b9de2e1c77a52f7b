"""FileIO: the one place lakefmt touches storage (spec/layout.md).

Locations are URLs or local paths: ``/data/wh``, ``file:///data/wh``,
``s3://bucket/wh`` (through s3fs; ``s3a://`` and ``s3n://`` are the same store)
and ``memory://wh`` for tests. Everything goes through fsspec; local paths use
pyarrow's native filesystem for reading and writing Parquet because it is faster.

S3 settings come from ``storage_options`` (``endpoint_url``, ``key``, ``secret``,
``client_kwargs``...) or, as boto does, from ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``.

Writes to local files are durable before a commit's swap (spec/commits.md, COMMIT-20):
:meth:`FileIO.sync` fsyncs every file written and closed since the last call and every
folder that gained an entry, once each, all at the same time on a few threads. Writing
first and syncing everything together lets the file system make all of them durable in
one journal commit: measured on ext4 for one append's data file, manifest, manifest
list, metadata file and two folders, 2-3 ms instead of 15-17 ms for one fsync after
the other at each close. A file of 256 KiB or more starts its write-out when it is closed
(:mod:`lakefmt.local_sync`), so that the sync on a commit's path finds little left to do. A full or read-only file system
is reported here, in one place, as :class:`~lakefmt.errors.StorageFullError` or
:class:`~lakefmt.errors.ReadOnlyStorageError` (COMMIT-21).

Example:
    >>> io = FileIO("memory://example")
    >>> io.write_bytes("memory://example/a.txt", b"hi"); io.read_bytes("memory://example/a.txt")
    b'hi'
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from io import BufferedWriter
from io import FileIO as _RawFile
from typing import Any, BinaryIO, NoReturn

import fsspec
import pyarrow.fs as pafs

from lakefmt.errors import ReadOnlyStorageError, StorageError, StorageFullError, ValidationError
from lakefmt.local_sync import (
    EARLY_SYNC_BYTES,
    fsync_path,
    sync_threads,
)
from lakefmt.threads import thread_map

_S3_ALIASES = ("s3a://", "s3n://")


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    mtime: float | None


def normalize_location(location: str) -> str:
    """Canonical spelling of a location: absolute local path or ``scheme://...`` without a trailing slash."""
    for alias in _S3_ALIASES:
        if location.startswith(alias):
            location = "s3://" + location[len(alias):]
    location = location.removeprefix("file://")
    if "://" not in location:
        location = os.path.abspath(os.path.expanduser(location))
    return location.rstrip("/") or "/"


def join(location: str, *parts: str) -> str:
    return posixpath.join(location, *parts) if "://" in location else os.path.join(location, *parts)


def scheme_of(location: str) -> str:
    return location.split("://", 1)[0] if "://" in location else "file"


class FileIO:
    """Reads, writes, lists and deletes files under one warehouse's store.

    ``fsync`` (local stores only) makes new files and their folder entries durable
    (COMMIT-20); it exists to measure what that costs, not to be turned off.
    """

    def __init__(self, location: str, storage_options: dict[str, Any] | None = None, *,
                 fsync: bool = True) -> None:
        self.location = normalize_location(location)
        self.scheme = scheme_of(self.location)
        self.storage_options = dict(storage_options or {})
        self.fs = self._make_fs()
        self._arrow_fs: pafs.FileSystem | None = None
        self.fsync = fsync
        self._unsynced_files: set[str] = set()
        self._unsynced_dirs: set[str] = set()
        self._sync_failures: dict[str, OSError] = {}
        self._syncing: dict[str, Future[OSError | None]] = {}  # fsyncs started: large files' at close, start_sync's
        self._sync_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled FileIO carries to another process (a Spark task, a spawned worker):
        its location and options, not this process's locks or folders awaiting a sync."""
        return {"location": self.location, "storage_options": self.storage_options, "fsync": self.fsync}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"], state["storage_options"], fsync=state["fsync"])  # type: ignore[misc]

    def _make_fs(self) -> fsspec.AbstractFileSystem:
        if self.scheme == "file":
            return fsspec.filesystem("file", auto_mkdir=True)
        if self.scheme == "s3":
            options = dict(self.storage_options)
            endpoint = options.pop("endpoint_url", None) or os.environ.get("AWS_ENDPOINT_URL")
            client_kwargs = dict(options.pop("client_kwargs", {}) or {})
            if endpoint:
                client_kwargs.setdefault("endpoint_url", endpoint)
            region = options.pop("region", None) or os.environ.get("AWS_REGION")
            if region:
                client_kwargs.setdefault("region_name", region)
            options.setdefault("use_listings_cache", False)  # other processes change the store
            if "key" not in options and os.environ.get("AWS_ACCESS_KEY_ID"):
                options["key"] = os.environ["AWS_ACCESS_KEY_ID"]
                options.setdefault("secret", os.environ.get("AWS_SECRET_ACCESS_KEY"))
            try:
                return fsspec.filesystem("s3", client_kwargs=client_kwargs, **options)
            except ImportError as exc:
                raise ValidationError("s3:// locations need s3fs: pip install 'lakefmt[s3]'") from exc
        if self.scheme == "memory":
            return fsspec.filesystem("memory")
        return fsspec.filesystem(self.scheme, **self.storage_options)

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        """A pyarrow filesystem over the same store (native for local paths)."""
        if self._arrow_fs is None:
            if self.scheme == "file":
                self._arrow_fs = pafs.LocalFileSystem()
            else:
                self._arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))
        return self._arrow_fs

    def fs_path(self, location: str) -> str:
        """The path the filesystem objects understand (no scheme for s3/memory)."""
        if self.scheme == "file" and location[:1] == "/" and "/." not in location and "//" not in location \
                and location[-1] != "/":
            # Already normal (absolute; no ".", ".." or empty part, no trailing slash): normalize_location would
            # return it unchanged, at ~10x the cost (~45 ms of a scan of 10,000 planned files).
            return location
        location = normalize_location(location)
        if self.scheme in ("s3", "memory"):
            return location.split("://", 1)[1] if self.scheme == "s3" else location
        return location

    def open_input(self, location: str) -> BinaryIO:
        if self.scheme == "file":
            return self.arrow_fs.open_input_file(self.fs_path(location))  # type: ignore[return-value]
        return self.fs.open(self.fs_path(location), "rb")

    def open_output(self, location: str) -> BinaryIO:
        """A new file for writing. Existing files are never overwritten (LAYOUT-4).

        A local file is noted, once closed, for :meth:`sync`, and so is its folder (COMMIT-20).
        """
        path = self.fs_path(location)
        if self.scheme == "file":
            sync = self.fsync
            with storage_errors(path):
                created = _make_parents(path)
                raw = _LocalOutput(path, on_close=self._closed if sync else None)
            if sync:
                with self._sync_lock:
                    self._unsynced_dirs.add(os.path.dirname(path))
                    self._unsynced_dirs.update(os.path.dirname(d) for d in created)
            return BufferedWriter(raw)  # type: ignore[return-value]
        with storage_errors(path):
            return self.fs.open(path, "wb")

    def _closed(self, path: str, large: bool) -> None:
        """Note a closed file for :meth:`sync`; a large one starts its fsync now (COMMIT-20)."""
        with self._sync_lock:
            if large:
                self._syncing[path] = sync_threads().submit(fsync_path, path)
            else:
                self._unsynced_files.add(path)

    def start_sync(self) -> None:
        """Start making durable, on the fsync threads, every local file and folder :meth:`sync` would, and
        return at once; the next :meth:`sync` waits for them and reports their errors (COMMIT-20).

        A commit starts its files' fsyncs before it waits for the catalog lock and attaches the catalog
        file, and calls :meth:`sync` just before the swap: the two overlap. Nothing to do for object stores.
        """
        if self.scheme != "file":
            return
        with self._sync_lock:
            for path in sorted(self._unsynced_files) + sorted(self._unsynced_dirs):
                if path not in self._syncing:
                    self._syncing[path] = sync_threads().submit(fsync_path, path)
            self._unsynced_files.clear()
            self._unsynced_dirs.clear()

    def sync(self) -> None:
        """Make durable every local file closed and every folder that gained an entry since the last call (COMMIT-20).

        Each is fsynced once, all at the same time on up to eight threads, and the call
        returns when all are durable. A commit calls this before its swap, so every file
        it wrote and the names of those files are durable before the pointer names them.
        A file deleted since it was written (an abandoned write) is skipped. A failed
        fsync raises (a full or read-only file system as :class:`StorageError`), and goes
        on raising in every later call until the file is deleted (:meth:`delete`): after a
        failed fsync, a second one may report success although the data never reached the
        disk. Nothing to do for object stores.
        """
        if self.scheme != "file":
            return
        with self._sync_lock:  # held while syncing: a concurrent caller returns only once its files are durable
            targets = sorted(self._unsynced_files) + sorted(self._unsynced_dirs)
            started, self._syncing = self._syncing, {}
            self._unsynced_files.clear()
            self._unsynced_dirs.clear()
            results = list(sync_threads().map(fsync_path, targets)) if len(targets) > 1 else \
                [fsync_path(path) for path in targets]
            targets += started
            results += [future.result() for future in started.values()]
            self._sync_failures.update((path, exc) for path, exc in zip(targets, results) if exc is not None)
            if self._sync_failures:
                path, exc = min(self._sync_failures.items())
                mapped = storage_error(exc, path)
                raise mapped or OSError(exc.errno, f"fsync of {path} failed ({exc.strerror or exc}): its data may "
                                        "not be on the disk; nothing was committed") from exc

    def missing_or_short(self, expected_sizes: Mapping[str, int]) -> list[str]:
        """Of ``{location: size}``, the files that do not exist or hold fewer bytes (COMMIT-19).

        One ``stat`` per local file, in this thread (a few microseconds each, against ~1-3 ms for
        handing them to threads), and one metadata request (HEAD) per object-store file, eight at a time.
        """
        def problem(item: tuple[str, int]) -> str | None:
            location, size = item
            try:
                if self.scheme == "file":
                    actual = os.stat(self.fs_path(location)).st_size
                else:
                    actual = int(self.fs.info(self.fs_path(location)).get("size") or 0)
            except FileNotFoundError:
                return location
            return location if actual < size else None

        items = sorted(expected_sizes.items())
        found = map(problem, items) if self.scheme == "file" else thread_map(problem, items, 8)
        return [p for p in found if p is not None]

    def read_bytes(self, location: str) -> bytes:
        with self.fs.open(self.fs_path(location), "rb") as f:
            return f.read()

    def write_bytes(self, location: str, data: bytes) -> None:
        """Write a whole new file; if that fails, the partly written file is deleted (COMMIT-21)."""
        created = False
        try:
            with self.open_output(location) as f:
                created = True
                f.write(data)
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    self.delete(location)
            raise

    def exists(self, location: str) -> bool:
        return bool(self.fs.exists(self.fs_path(location)))

    def size(self, location: str) -> int:
        return int(self.fs.size(self.fs_path(location)))

    def delete(self, location: str) -> None:
        """Delete a file; a missing file is not an error. It no longer awaits :meth:`sync`."""
        path = self.fs_path(location)
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass
        if self.scheme == "file":
            with self._sync_lock:
                self._unsynced_files.discard(path)
                self._syncing.pop(path, None)
                self._sync_failures.pop(path, None)

    def delete_many(self, locations: list[str]) -> None:
        for loc in locations:
            self.delete(loc)

    def list_files(self, prefix: str, *, strict: bool = False) -> Iterator[FileInfo]:
        """Every file under ``prefix`` (recursively) with size and modification time.

        With ``strict``, a folder that cannot be listed raises ``OSError`` instead of being
        skipped, and a missing ``prefix`` raises ``FileNotFoundError`` (orphan removal
        must see everything or nothing, MAINT-11).
        """
        root = self.fs_path(prefix)
        if not self.fs.exists(root):
            if strict:
                raise FileNotFoundError(f"{prefix} does not exist")
            return
        if strict and self.scheme == "file":
            yield from _scan_local(root)
            return
        # fsspec's generic find() silently skips folders it cannot read; s3fs lists flat and raises.
        found = (self._walk_strict(root) if strict and self.scheme != "s3"
                 else self.fs.find(root, detail=True).items())
        for path, info in found:
            if info.get("type") == "directory":
                continue
            yield FileInfo(self._to_location(path), int(info.get("size") or 0), _mtime(info))

    def _walk_strict(self, root: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every file below ``root``, folder by folder; any folder that cannot be listed raises."""
        folders = [root]
        while folders:
            folder = folders.pop()
            try:
                infos = self.fs.ls(folder, detail=True)
            except FileNotFoundError:
                if folder == root:
                    raise
                continue  # removed while being listed: its files are gone, not unlisted
            for info in infos:
                if info.get("type") == "directory":
                    folders.append(info["name"])
                else:
                    yield info["name"], info

    def _to_location(self, path: str) -> str:
        if self.scheme == "s3":
            return "s3://" + path
        if self.scheme == "memory":
            return path if path.startswith("memory://") else "memory://" + path.lstrip("/")
        return path


class _LocalOutput(_RawFile):
    """A new local file (exclusive create): storage errors mapped; ``on_close(path, large)`` is called once
    closed, ``large`` when it holds at least :data:`~lakefmt.local_sync.EARLY_SYNC_BYTES`."""

    def __init__(self, path: str, *, on_close: Callable[[str, bool], None] | None) -> None:
        super().__init__(path, "xb")
        self._path, self._on_close = path, on_close

    def write(self, data: Any) -> int | None:
        try:
            return super().write(data)
        except OSError as exc:
            raise_storage_error(exc, self._path)

    def close(self) -> None:
        if self.closed:
            return
        try:
            large = self.tell() >= EARLY_SYNC_BYTES
            super().close()
        except OSError as exc:
            raise_storage_error(exc, self._path)
        if self._on_close is not None:
            self._on_close(self._path, large)


def _make_parents(path: str) -> list[str]:
    """Create the missing folders above ``path``; return those this call created."""
    parent = os.path.dirname(path)
    if os.path.isdir(parent):
        return []
    missing = []
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return missing


_FULL = frozenset(code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None)


def storage_error(exc: BaseException, location: str) -> StorageError | None:
    """The :class:`StorageError` that an operating-system error on ``location`` means, if any (COMMIT-21)."""
    if not isinstance(exc, OSError):
        return None
    text = str(exc)
    if exc.errno in _FULL or (exc.errno is None and os.strerror(errno.ENOSPC) in text):
        return StorageFullError(
            f"no space left on the storage holding {location} ({exc.strerror or text}): the disk is full. "
            "Nothing was committed and the files this write created were deleted. Free space on that file "
            "system (for example expire old snapshots and remove orphan files), or move the warehouse to a "
            "larger one, then write again")
    if exc.errno == errno.EROFS or (exc.errno is None and os.strerror(errno.EROFS) in text):
        return ReadOnlyStorageError(
            f"the storage holding {location} is a read-only file system ({exc.strerror or text}): lakefmt "
            "cannot write there, and nothing was written. Remount it read-write (mount -o remount,rw) or "
            "use a warehouse on writable storage, then write again")
    return None


def raise_storage_error(exc: OSError, location: str) -> NoReturn:
    """Raise the :class:`StorageError` ``exc`` means, chained from it; or ``exc`` itself."""
    mapped = storage_error(exc, location)
    if mapped is None:
        raise exc
    raise mapped from exc


@contextlib.contextmanager
def storage_errors(location: str) -> Iterator[None]:
    """Map a full or read-only file system met inside the block to a :class:`StorageError`."""
    try:
        yield
    except OSError as exc:
        raise_storage_error(exc, location)


def _scan_local(root: str) -> Iterator[FileInfo]:
    """Files below a local folder with ``os.scandir``: light on memory, and an unreadable folder raises.

    A file or folder deleted while it is being listed is skipped: it is gone, not unlisted.
    """
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            entries = os.scandir(folder)
        except FileNotFoundError:
            if folder == root:
                raise
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                        continue
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                yield FileInfo(entry.path, stat.st_size, stat.st_mtime)


def _mtime(info: dict[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None
