"""An in-process cache of manifest contents (spec/manifests.md, MAN-1: manifests are immutable).

Because no file is ever rewritten in place (LAYOUT-4), a manifest read once can be
kept: its decoded contents (:class:`~lakefmt.manifest.ManifestContents`, entries as
written) are cached by location, and inheritance (MAN-5) is applied from the
manifest-list row that names it. Manifest lists are cached the same way.

What this assumes: a name always means the same bytes. A manifest deleted, truncated or
replaced behind lakefmt's back (by hand, by a restore) is not noticed by scans of a
process that already cached it, until :func:`clear` is called or the process restarts.
Checking a table (``lakefmt.maintenance.check``) and maintenance's reachability never go
through this cache: they read storage.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from lakefmt.io import FileIO
from lakefmt.manifest import ManifestContents, ManifestEntry, ManifestFile
from lakefmt.manifest_io import read_manifest_contents, read_manifest_list
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema

MAX_CACHED_ENTRIES = 2_000_000

_lock = threading.Lock()
_cache: OrderedDict[str, ManifestContents] = OrderedDict()
_cached_entries = 0


def read_contents(io: FileIO, location: str, spec: PartitionSpec, schema: Schema) -> ManifestContents:
    """The decoded manifest at ``location`` (entries as written, before inheritance); shared, do not modify."""
    global _cached_entries
    key = f"{id(io.fs)}:{location}"
    with _lock:
        contents = _cache.get(key)
        if contents is not None:
            _cache.move_to_end(key)
            return contents
    contents = read_manifest_contents(io, location, spec, schema)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:  # another thread read it meanwhile: share one copy
            return cached
        _cache[key] = contents
        _cached_entries += len(contents)
        while _cached_entries > MAX_CACHED_ENTRIES and len(_cache) > 1:
            _, dropped = _cache.popitem(last=False)
            _cached_entries -= len(dropped)
    return contents


def read_entries(io: FileIO, location: str, manifest: ManifestFile, spec: PartitionSpec, schema: Schema
                 ) -> list[ManifestEntry]:
    """Entries of ``manifest`` with snapshot ids and sequence numbers inherited from its list row (MAN-5).

    A manifest is written by one snapshot, so every list names it with the same snapshot
    id and sequence number: the inherited entries are kept with the contents.
    """
    return read_contents(io, location, spec, schema).entries(manifest.added_snapshot_id, manifest.sequence_number)


def remember_entries(io: FileIO, location: str, raw: list[ManifestEntry]) -> None:
    """Seed the cache with a manifest this process just wrote (entries as written, not inherited)."""
    global _cached_entries
    key = f"{id(io.fs)}:{location}"
    contents = ManifestContents.from_entries(raw)
    with _lock:
        if key not in _cache:
            _cache[key] = contents
            _cached_entries += len(contents)


_lists: OrderedDict[str, list[ManifestFile]] = OrderedDict()
MAX_CACHED_LISTS = 64


def read_list(io: FileIO, location: str) -> list[ManifestFile]:
    """A manifest list, from the cache when this process has read or written it before."""
    key = f"{id(io.fs)}:{location}"
    with _lock:
        cached = _lists.get(key)
        if cached is not None:
            _lists.move_to_end(key)
            return list(cached)
    manifests = read_manifest_list(io, location)
    remember_list(io, location, manifests)
    return list(manifests)


def remember_list(io: FileIO, location: str, manifests: list[ManifestFile]) -> None:
    key = f"{id(io.fs)}:{location}"
    with _lock:
        _lists[key] = list(manifests)
        while len(_lists) > MAX_CACHED_LISTS:
            _lists.popitem(last=False)


def clear() -> None:
    """Forget every cached manifest and manifest list (after storage was changed by hand)."""
    global _cached_entries
    with _lock:
        _cache.clear()
        _lists.clear()
        _cached_entries = 0
