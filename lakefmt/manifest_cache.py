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

from lakefmt.file_cache import ImmutableFileCache
from lakefmt.gc_pause import gc_paused
from lakefmt.io import FileIO
from lakefmt.manifest import ManifestContents, ManifestEntry, ManifestFile
from lakefmt.manifest_io import read_manifest_contents, read_manifest_list
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema

MAX_CACHED_ENTRIES = 2_000_000
MAX_CACHED_LISTS = 64

_contents: ImmutableFileCache[ManifestContents] = ImmutableFileCache(MAX_CACHED_ENTRIES, len)
_lists: ImmutableFileCache[list[ManifestFile]] = ImmutableFileCache(MAX_CACHED_LISTS)


def read_contents(io: FileIO, location: str, spec: PartitionSpec, schema: Schema) -> ManifestContents:
    """The decoded manifest at ``location`` (entries as written, before inheritance); shared, do not modify."""
    return _contents.get_or_load(io, location, lambda: _decode(io, location, spec, schema))


def _decode(io: FileIO, location: str, spec: PartitionSpec, schema: Schema) -> ManifestContents:
    """A manifest's entries decoded with the cyclic collector paused: they are kept (:mod:`lakefmt.gc_pause`)."""
    with gc_paused():
        return read_manifest_contents(io, location, spec, schema)


def read_entries(io: FileIO, location: str, manifest: ManifestFile, spec: PartitionSpec, schema: Schema
                 ) -> list[ManifestEntry]:
    """Entries of ``manifest`` with snapshot ids and sequence numbers inherited from its list row (MAN-5).

    A manifest is written by one snapshot, so every list names it with the same snapshot
    id and sequence number: the inherited entries are kept with the contents.
    """
    return read_contents(io, location, spec, schema).entries(manifest.added_snapshot_id, manifest.sequence_number)


def remember_entries(io: FileIO, location: str, raw: list[ManifestEntry]) -> None:
    """Seed the cache with a manifest this process just wrote (entries as written, not inherited)."""
    _contents.put(io, location, ManifestContents.from_entries(raw))


def read_list(io: FileIO, location: str) -> list[ManifestFile]:
    """A manifest list, from the cache when this process has read or written it before; a new list."""
    return list(_lists.get_or_load(io, location, lambda: read_manifest_list(io, location)))


def remember_list(io: FileIO, location: str, manifests: list[ManifestFile]) -> None:
    """Seed the cache with a manifest list this process just wrote."""
    _lists.put(io, location, list(manifests), replace=True)


def clear() -> None:
    """Forget every cached manifest and manifest list (after storage was changed by hand)."""
    _contents.clear()
    _lists.clear()
