"""An in-process cache of manifest contents (spec/manifests.md, MAN-1: manifests are immutable).

Because no file is ever rewritten in place (LAYOUT-4), a manifest read once can be
kept: its raw entries are cached by location, and inheritance (MAN-5) is applied on
every read from the manifest-list row that names it. Manifest lists are cached the same way.

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
from lakefmt.manifest import ManifestEntry, ManifestFile
from lakefmt.manifest_io import read_manifest, read_manifest_list
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema

MAX_CACHED_ENTRIES = 2_000_000

_lock = threading.Lock()
_cache: OrderedDict[str, list[ManifestEntry]] = OrderedDict()
_cached_entries = 0
# The entries of a manifest after inheritance, for the one list row that names it: a manifest is
# written by one snapshot, so every list names it with the same snapshot id and sequence number.
_inherited: dict[str, tuple[int, int, list[ManifestEntry]]] = {}


def read_entries(io: FileIO, location: str, manifest: ManifestFile, spec: PartitionSpec, schema: Schema
                 ) -> list[ManifestEntry]:
    """Entries of ``manifest`` with snapshot ids and sequence numbers inherited from its list row."""
    global _cached_entries
    key = f"{id(io.fs)}:{location}"
    with _lock:
        raw = _cache.get(key)
        if raw is not None:
            _cache.move_to_end(key)
            done = _inherited.get(key)
            if done is not None and done[0] == manifest.added_snapshot_id and done[1] == manifest.sequence_number:
                return list(done[2])
    if raw is None:
        raw = read_manifest(io, location, manifest, spec, schema, inherit=False)
        with _lock:
            if key not in _cache:
                _cache[key] = raw
                _cached_entries += len(raw)
                while _cached_entries > MAX_CACHED_ENTRIES and len(_cache) > 1:
                    dropped_key, dropped = _cache.popitem(last=False)
                    _inherited.pop(dropped_key, None)
                    _cached_entries -= len(dropped)
    entries = [_inherit(e, manifest.added_snapshot_id, manifest.sequence_number) for e in raw]
    with _lock:
        if key in _cache:
            _inherited[key] = (manifest.added_snapshot_id, manifest.sequence_number, entries)
    return list(entries)


def _inherit(entry: ManifestEntry, snapshot_id: int, sequence_number: int) -> ManifestEntry:
    """``entry.inherit(...)`` (MAN-5), built directly: ``dataclasses.replace`` costs several times more."""
    if entry.snapshot_id is not None and entry.sequence_number is not None:
        return entry
    return ManifestEntry(entry.status, entry.data_file,
                         snapshot_id if entry.snapshot_id is None else entry.snapshot_id,
                         sequence_number if entry.sequence_number is None else entry.sequence_number)


def remember_entries(io: FileIO, location: str, raw: list[ManifestEntry]) -> None:
    """Seed the cache with a manifest this process just wrote (entries as written, not inherited)."""
    global _cached_entries
    key = f"{id(io.fs)}:{location}"
    with _lock:
        if key not in _cache:
            _cache[key] = list(raw)
            _cached_entries += len(raw)


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
        _inherited.clear()
        _lists.clear()
        _cached_entries = 0
