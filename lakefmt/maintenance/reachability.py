"""Reachability: the files a table still needs (spec/maintenance.md, MAINT-1, MAINT-2).

One computation serves snapshot expiry, orphan-file removal and storage statistics.
Starting from a set of snapshots and the retained metadata files, it reads each
manifest list once and each *distinct* manifest once, and collects every file they
reach as a path relative to the table location in one normal form (MAINT-2), so that
``s3a://b/t/data/x`` in a listing and ``data/x`` in a manifest are the same file.

Memory grows with the number of distinct files, not with snapshots x files: a
manifest kept by a thousand snapshots is read, and its files counted, once. Only
the columns needed are read (paths, statuses and sizes).

Deletion-vector files (``data/deletes/dv-*.bin``, LAYOUT-12) are reached through the
``deletion_vector`` column of the live entries of version 2 manifests (DV-5, ROWDEL-13); a version 1
manifest has no such column and reaches none. Many entries point into one vector file
(one per commit attempt); it is counted once.

A concurrent snapshot expiry may delete manifest lists and manifests that metadata
read a moment ago still names (MAINT-5). :func:`current_reachability` then starts
over from the newer metadata, and :func:`reachable_only_from` (what expiry may
delete) skips what is already gone and records it in ``Reachability.missing``.

Example:
    >>> r = table_reachability(t.io, t.metadata, t.metadata_location)
    >>> "data/ts_day=2026-01-01/part-3f9c0a1b2c3d4e5f-9a8b7c6d5e4f3a2b-00000-00000.parquet" in r
    True
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt.errors import CorruptMetadataError, MissingFileError
from lakefmt.io import FileIO, normalize_location
from lakefmt.manifest import EntryStatus
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.snapshot_history import HISTORY_FILE, history_paths

if TYPE_CHECKING:
    from lakefmt.table import Table

READ_THREADS = max(4, min(16, 2 * (os.cpu_count() or 2)))
_CHUNK = 256  # manifests read per batch: bounds the Arrow tables alive at once
# Substrings of newline-joined paths that may need normalizing (MAINT-2): a leading "/", a scheme's
# ":", an empty segment, a segment starting with "." ("." and ".." among them), a trailing "/", an
# empty path. A false alarm (".hidden", a ":" in a name) only costs the exact, slower path.
_UNUSUAL = ("\n/", ":", "//", "/.", "\n.", "/\n", "\n\n")
_METADATA_FILE = re.compile(r"^metadata/v(\d+)-[^/]*\.metadata\.json$")  # LAYOUT-9, relative
# The live entries' paths and sizes, and the location of their deletion vectors (DV-5): a dotted name is
# a leaf of a struct column, read where the manifest has that column (version 1 manifests have none).
_ENTRY_COLUMNS = ("file_path", "status", "file_size_bytes",
                  "deletion_vector.path", "deletion_vector.offset", "deletion_vector.length")
MAX_RESTARTS = 100  # re-reads of the pointer while concurrent expiries keep deleting under it


def metadata_version(path: str) -> int | None:
    """The version of a metadata file named ``metadata/v{version}-….metadata.json`` (LAYOUT-9), else None."""
    match = _METADATA_FILE.match(path)
    return int(match.group(1)) if match else None


def history_version(path: str) -> int | None:
    """The version in a history file's name ``metadata/history-{version}-….json`` (LAYOUT-13), else None."""
    match = HISTORY_FILE.match(path)
    return int(match.group(1)) if match else None


def table_location(metadata_location: str) -> str:
    """The table location implied by a metadata file's location (LAYOUT-3), normalized (MAINT-2)."""
    return normalize_location(metadata_location.rsplit("/metadata/", 1)[0])


def relativize(location: str, path: str) -> str | None:
    """``path`` relative to the table ``location`` in normal form (MAINT-2); None if it is outside.

    Relative paths (LAYOUT-2) are taken as relative to the location. Absolute ones are
    normalized first (``s3a://``/``s3n://`` are ``s3://``, ``file://`` is a local path)
    and must lie under the normalized location. Empty and ``.`` segments are dropped;
    ``..`` segments are resolved and may not climb out of the location.

    Example:
        >>> relativize("s3a://b/wh/t-1", "s3://b/wh/t-1/data/x.parquet")
        'data/x.parquet'
    """
    if "://" in path or path.startswith("/"):
        root = normalize_location(location)
        full = normalize_location(path)
        if not full.startswith(root.rstrip("/") + "/"):
            return None
        path = full[len(root.rstrip("/")) + 1:]
    parts: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(segment)
    return "/".join(parts) or None


@dataclass(frozen=True)
class Reachability:
    """Files reachable from a set of snapshots and metadata files, relative to ``location`` (MAINT-1).

    ``manifests`` maps each manifest to its length (ML-2), ``data_files`` each live data
    file to its size (MAN-2); ``deletion_vectors`` each deletion-vector file a live entry
    points into (DV-5) to the end of the furthest blob referenced in it (``offset + length``):
    the file is at least that long, but its size is its size in storage (callers that list
    storage use the listed size). ``outside`` holds referenced paths that do not lie under
    the table location (a LAYOUT-2 violation that maintenance never deletes); ``missing``
    manifest lists and manifests that were already gone from storage when read (only a
    walk that tolerates them, :func:`reachable_only_from`, records any); and
    ``current_version`` the version (LAYOUT-9) of the metadata file it was computed from.
    ``history_files`` are the history files (META-13) named by the retained metadata files,
    ``current_history_files`` those the current metadata file names (readers need them).
    """

    location: str
    metadata_files: frozenset[str]
    manifest_lists: frozenset[str]
    manifests: Mapping[str, int]
    data_files: Mapping[str, int]
    outside: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()
    current_version: int | None = None
    deletion_vectors: Mapping[str, int] = field(default_factory=dict)
    history_files: frozenset[str] = frozenset()
    current_history_files: frozenset[str] = frozenset()

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and (
            path in self.data_files or path in self.deletion_vectors or path in self.manifests
            or path in self.manifest_lists or path in self.metadata_files or path in self.history_files)

    @property
    def file_count(self) -> int:
        return (len(self.metadata_files) + len(self.manifest_lists) + len(self.manifests)
                + len(self.data_files) + len(self.deletion_vectors) + len(self.history_files))

    @property
    def data_bytes(self) -> int:
        return sum(self.data_files.values())

    def is_superseded_metadata(self, path: str) -> bool:
        """Whether ``path`` is a metadata file no swap can make current again (MAINT-6).

        That is one whose version is at most the current version and which is neither the
        current metadata file nor named in its metadata-log: every swap expects the pointer
        it was built on (CAT-4), and the pointer has moved past that version.
        """
        version = metadata_version(path)
        if version is None:  # a history file no retained metadata file names is superseded alike (META-19)
            version = history_version(path)
        return (version is not None and self.current_version is not None
                and version <= self.current_version and path not in self.metadata_files
                and path not in self.history_files)


def table_reachability(io: FileIO, metadata: TableMetadata, metadata_location: str, *,
                       snapshots: Iterable[Snapshot] | None = None, skip_missing: bool = False
                       ) -> Reachability:
    """Files reachable from a table's retained snapshots (or ``snapshots``) and retained metadata files.

    The retained metadata files are the current one and those of its metadata-log (META-7).
    With ``skip_missing``, a manifest list or manifest not in storage is recorded in
    ``missing`` instead of raising :class:`MissingFileError`.
    """
    location = table_location(metadata_location)
    metadata_files = [metadata_location] + [str(e.value) for e in metadata.metadata_log]
    chosen = metadata.snapshots if snapshots is None else tuple(snapshots)
    reach = reachable_files(io, location, chosen, metadata_files=metadata_files, skip_missing=skip_missing)
    current = relativize(reach.location, metadata_location)
    own = {p for r in metadata.snapshot_history if r.path is not None
           and (p := relativize(reach.location, r.path)) is not None}
    history = own | _logged_history(io, reach.location, metadata)
    return replace(reach, current_version=None if current is None else metadata_version(current),
                   history_files=frozenset(history), current_history_files=frozenset(own))


def _logged_history(io: FileIO, location: str, metadata: TableMetadata) -> set[str]:
    """The history files named by the metadata files of ``metadata``'s metadata-log (META-19).

    A reader or writer that loaded one of those metadata files may still read its history
    files, so they stay referenced while the file is in the log. A version 1 table has none
    (the format version never decreases, FMT-4); a logged metadata file already gone names
    nothing anyone can load. One that cannot be parsed raises :class:`CorruptMetadataError`:
    what it names is unknown, so nothing may be treated as unreferenced.
    """
    if metadata.format_version < 2 or not metadata.metadata_log:
        return set()

    def named(entry_path: str) -> list[str]:
        full = entry_path if "://" in entry_path or entry_path.startswith("/") else f"{location}/{entry_path}"
        try:
            data = io.read_bytes(full)
        except FileNotFoundError:
            return []
        if b'"snapshot-history"' not in data:  # inside JSON strings quotes are escaped: no history files
            return []
        try:
            return history_paths(json.loads(data))
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptMetadataError(f"metadata file {full} in the metadata-log is not valid JSON, so the "
                                       f"history files it names are unknown: {exc}") from exc

    out: set[str] = set()
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(metadata.metadata_log))) as pool:
        for paths in pool.map(named, [str(e.value) for e in metadata.metadata_log]):
            out.update(p for path in paths if (p := relativize(location, path)) is not None)
    return out


def current_reachability(table: Table) -> Reachability:
    """Reachability from ``table``'s current metadata, starting over while concurrent expiries move it.

    A manifest list or manifest missing from storage is re-read as a question: if the
    pointer moved since the metadata was read, a concurrent expiry (MAINT-5) removed it
    and the walk starts over from the newer metadata, which no longer names it. If the
    pointer has not moved, the table is damaged and :class:`MissingFileError` is raised.
    ``table`` is left at the metadata the result was computed from.
    """
    restarts = 0
    while True:
        location = table.metadata_location
        try:
            return table_reachability(table.io, table.metadata, location)
        except MissingFileError:
            table.refresh()
            restarts += 1
            if table.metadata_location == location or restarts > MAX_RESTARTS:
                raise


def reachable_files(io: FileIO, location: str, snapshots: Sequence[Snapshot], *,
                    metadata_files: Iterable[str] = (), threads: int = READ_THREADS,
                    skip_missing: bool = False) -> Reachability:
    """Files reachable from ``snapshots``: manifest lists, their manifests, live data files and their
    deletion-vector files (MAINT-1, DV-5)."""
    missing: set[str] | None = set() if skip_missing else None
    walker = _Walker(io, normalize_location(location), threads, missing=missing)
    outside: set[str] = set()
    metas = set()
    for path in metadata_files:
        rel = relativize(walker.location, path)
        if rel is None:
            outside.add(path)
        else:
            metas.add(rel)
    lists = walker.manifest_lists(snapshots, outside)
    manifests = walker.manifests_of(lists, outside)
    data_files, vectors = walker.data_files_of(manifests, outside)
    return Reachability(walker.location, frozenset(metas), frozenset(lists), manifests, data_files,
                        frozenset(outside), frozenset(missing or ()), deletion_vectors=vectors)


def reachable_only_from(io: FileIO, removed: Sequence[Snapshot], retained: Reachability, *,
                        threads: int = READ_THREADS) -> Reachability:
    """Files reachable from the ``removed`` snapshots and *not* from ``retained`` (MAINT-5).

    Manifests that ``retained`` holds are not read again: their live files are in
    ``retained`` already, so they cannot add anything here. This is what snapshot expiry
    may delete. ``metadata_files`` of the result is empty.

    A manifest list or manifest already gone from storage (a concurrent expiry deleted
    it, after the files it names) is skipped and recorded in ``missing``: what it named
    and is still there is left to orphan removal. Everything still readable counts.
    """
    missing: set[str] = set()
    walker = _Walker(io, retained.location, threads, missing=missing)
    outside: set[str] = set()
    lists = walker.manifest_lists(removed, outside) - retained.manifest_lists
    manifests = {p: n for p, n in walker.manifests_of(lists, outside).items() if p not in retained.manifests}
    files, vectors = walker.data_files_of(manifests, outside)
    data_files = {p: n for p, n in files.items() if p not in retained.data_files}
    # A vector file holds the blobs of one commit attempt: it goes only when no retained entry points into it.
    vectors = {p: n for p, n in vectors.items() if p not in retained.deletion_vectors}
    return Reachability(retained.location, frozenset(), frozenset(lists - missing),
                        {p: n for p, n in manifests.items() if p not in missing}, data_files,
                        frozenset(outside), frozenset(missing), deletion_vectors=vectors)


class _Walker:
    """Reads the tree below a set of snapshots, each file once, with a few threads.

    With a ``missing`` set, a file not found in storage is recorded there and skipped;
    without one, it raises :class:`MissingFileError`.
    """

    def __init__(self, io: FileIO, location: str, threads: int, *, missing: set[str] | None = None) -> None:
        self.io, self.location, self.threads = io, location, max(1, threads)
        self.missing = missing

    def _abs(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def manifest_lists(self, snapshots: Sequence[Snapshot], outside: set[str]) -> set[str]:
        out: set[str] = set()
        for snap in snapshots:
            rel = relativize(self.location, snap.manifest_list)
            if rel is None:
                outside.add(snap.manifest_list)
            else:
                out.add(rel)
        return out

    def manifests_of(self, lists: Iterable[str], outside: set[str]) -> dict[str, int]:
        """Every manifest named by the manifest lists, with its length (ML-2)."""
        manifests: dict[str, int] = {}
        columns = ("manifest_path", "manifest_length")
        for table in self._read_all(sorted(lists), columns, "manifest list"):
            self._collect(table.column(0), table.column(1), manifests, outside)
        return manifests

    def data_files_of(self, manifests: Iterable[str], outside: set[str]) -> tuple[dict[str, int], dict[str, int]]:
        """The data files of the live (ADDED, EXISTING) entries of the manifests (ML-5), and the
        deletion-vector files those entries point into, each with its referenced extent (DV-5)."""
        data_files: dict[str, int] = {}
        vectors: dict[str, int] = {}
        deleted = int(EntryStatus.DELETED)
        for table in self._read_all(sorted(manifests), _ENTRY_COLUMNS, "manifest"):
            if deleted in table.column("status").to_pylist():
                table = table.filter(pc.not_equal(table.column("status"), deleted))
            self._collect(table.column("file_path"), table.column("file_size_bytes"), data_files, outside)
            if "deletion_vector" in table.column_names:
                self._collect_vectors(table.column("deletion_vector"), vectors, outside)
        return data_files, vectors

    def _collect_vectors(self, column: pa.ChunkedArray, into: dict[str, int], outside: set[str]) -> None:
        """Add ``vector file -> furthest referenced byte`` for the non-null vectors of ``column``.

        Many entries share one vector file: paths are normalized once per distinct file (MAINT-2).
        """
        if column.null_count == len(column):
            return
        column = column.combine_chunks()
        ends = pc.add(pc.struct_field(column, "offset"), pc.struct_field(column, "length")).to_pylist()
        furthest: dict[str, int] = {}
        for path, end, valid in zip(pc.struct_field(column, "path").to_pylist(), ends,
                                    column.is_valid().to_pylist()):
            if valid and path is not None:
                furthest[path] = max(furthest.get(path, 0), end or 0)
        for path, end in furthest.items():
            rel = relativize(self.location, path)
            if rel is None:
                outside.add(path)
            else:
                into[rel] = max(into.get(rel, 0), end)

    def _collect(self, paths: pa.ChunkedArray, sizes: pa.ChunkedArray, into: dict[str, int],
                 outside: set[str]) -> None:
        """Add ``path -> size`` pairs, normalizing only the paths that need it (MAINT-2)."""
        names = paths.to_pylist()
        if not names:
            return
        joined = "\n" + "\n".join(names) + "\n"
        if not any(marker in joined for marker in _UNUSUAL):
            into.update(zip(names, sizes.to_pylist()))
            return
        for path, size in zip(names, sizes.to_pylist()):
            rel = relativize(self.location, path)
            if rel is None:
                outside.add(path)
            else:
                into[rel] = size

    def _read_all(self, paths: list[str], columns: Sequence[str], what: str) -> Iterator[pa.Table]:
        def read(rel: str) -> pa.Table | None:
            try:
                return read_columns(self.io, self._abs(rel), columns, what=what)
            except MissingFileError:
                if self.missing is None:
                    raise
                self.missing.add(rel)
                return None

        if len(paths) <= 1 or self.threads == 1:
            yield from (t for p in paths if (t := read(p)) is not None)
            return
        with ThreadPoolExecutor(max_workers=min(self.threads, len(paths))) as pool:
            for start in range(0, len(paths), _CHUNK):
                yield from (t for t in pool.map(read, paths[start:start + _CHUNK]) if t is not None)


def read_columns(io: FileIO, location: str, columns: Sequence[str], *, what: str) -> pa.Table:
    """Only ``columns`` of a manifest or manifest list (MAN-2, ML-2), read in one request.

    A plain name is required (:class:`CorruptMetadataError` when missing); a dotted name
    ``struct.leaf`` is optional: it is read when the file has the struct column. A version 1
    manifest has no ``deletion_vector`` column (DV-5).
    """
    try:
        data = io.read_bytes(location)
    except FileNotFoundError as exc:
        raise MissingFileError(f"{what} {location} is missing") from exc
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
        present = set(parquet.schema_arrow.names)
        wanted = [c for c in columns if "." not in c or c.split(".", 1)[0] in present]
        table = parquet.read(columns=wanted, use_threads=False)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"{what} {location} is not a readable Parquet file: {exc}") from exc
    missing = [c for c in columns if "." not in c and c not in table.column_names]
    if missing:
        raise CorruptMetadataError(f"{what} {location} has no column(s) {missing}")
    return table
