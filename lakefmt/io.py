"""FileIO: the one place lakefmt touches storage (spec/layout.md).

Locations are URLs or local paths: ``/data/wh``, ``file:///data/wh``,
``s3://bucket/wh`` (through s3fs; ``s3a://`` and ``s3n://`` are the same store)
and ``memory://wh`` for tests. Everything goes through fsspec; local paths use
pyarrow's native filesystem for reading and writing Parquet because it is faster.

S3 settings come from ``storage_options`` (``endpoint_url``, ``key``, ``secret``,
``client_kwargs``...) or, as boto does, from ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``.

Example:
    >>> io = FileIO("memory://example")
    >>> io.write_bytes("memory://example/a.txt", b"hi"); io.read_bytes("memory://example/a.txt")
    b'hi'
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import fsspec
import pyarrow.fs as pafs

from lakefmt.errors import ValidationError

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
    if location.startswith("file://"):
        location = location[len("file://"):]
    if "://" not in location:
        location = os.path.abspath(os.path.expanduser(location))
    return location.rstrip("/") or "/"


def join(location: str, *parts: str) -> str:
    return posixpath.join(location, *parts) if "://" in location else os.path.join(location, *parts)


def scheme_of(location: str) -> str:
    return location.split("://", 1)[0] if "://" in location else "file"


class FileIO:
    """Reads, writes, lists and deletes files under one warehouse's store."""

    def __init__(self, location: str, storage_options: dict[str, Any] | None = None) -> None:
        self.location = normalize_location(location)
        self.scheme = scheme_of(self.location)
        self.storage_options = dict(storage_options or {})
        self.fs = self._make_fs()
        self._arrow_fs: pafs.FileSystem | None = None

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
        location = normalize_location(location)
        if self.scheme in ("s3", "memory"):
            return location.split("://", 1)[1] if self.scheme == "s3" else location
        return location

    def open_input(self, location: str) -> BinaryIO:
        if self.scheme == "file":
            return self.arrow_fs.open_input_file(self.fs_path(location))  # type: ignore[return-value]
        return self.fs.open(self.fs_path(location), "rb")

    def open_output(self, location: str) -> BinaryIO:
        """A new file for writing. Existing files are never overwritten (LAYOUT-4)."""
        path = self.fs_path(location)
        if self.scheme == "file":
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return open(path, "xb")  # noqa: SIM115 - exclusive create, closed by the caller
        return self.fs.open(path, "wb")

    def read_bytes(self, location: str) -> bytes:
        with self.fs.open(self.fs_path(location), "rb") as f:
            return f.read()

    def write_bytes(self, location: str, data: bytes) -> None:
        with self.open_output(location) as f:
            f.write(data)

    def exists(self, location: str) -> bool:
        return bool(self.fs.exists(self.fs_path(location)))

    def size(self, location: str) -> int:
        return int(self.fs.size(self.fs_path(location)))

    def delete(self, location: str) -> None:
        """Delete a file; a missing file is not an error."""
        try:
            self.fs.rm_file(self.fs_path(location))
        except FileNotFoundError:
            pass

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
            for info in self.fs.ls(folders.pop(), detail=True):
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


def _scan_local(root: str) -> Iterator[FileInfo]:
    """Files below a local folder with ``os.scandir``: light on memory, and an unreadable folder raises."""
    folders = [root]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                else:
                    stat = entry.stat()
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
