"""An in-process cache of what was parsed from immutable files (spec/layout.md LAYOUT-4).

Manifests, manifest lists and history files are never rewritten in place, so what a
process parsed from one can be kept and shared: :class:`ImmutableFileCache` maps a file
(the store it lives in and its location) to the parsed value, least recently used first
out once the values' total weight passes a bound. One instance per kind of file:
:mod:`lakefmt.manifest_cache` and :mod:`lakefmt.snapshot_history`.

What this assumes: a name always means the same bytes. A file deleted or replaced behind
lakefmt's back is not noticed until :meth:`ImmutableFileCache.clear` is called or the
process restarts.

Example:
    >>> io = FileIO("memory://cache-example")
    >>> cache: ImmutableFileCache[dict] = ImmutableFileCache(max_weight=2)
    >>> cache.get_or_load(io, "memory://cache-example/a.json", lambda: {"parsed": True})
    {'parsed': True}
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from lakefmt.io import FileIO

V = TypeVar("V")


def _one(_: object) -> int:
    return 1


class ImmutableFileCache(Generic[V]):
    """Values parsed from immutable files, keyed by store and location, bounded by total weight.

    Args:
        max_weight: the bound on the sum of ``weight(value)`` over cached values; past it the
            least recently used values are dropped, but never the last one left.
        weight: a value's weight (default 1: the bound counts files).
    """

    def __init__(self, max_weight: int, weight: Callable[[V], int] = _one) -> None:
        self.max_weight = max_weight
        self._weight = weight
        self._lock = threading.Lock()
        self._values: OrderedDict[str, V] = OrderedDict()
        self._total = 0

    @staticmethod
    def _key(io: FileIO, location: str) -> str:
        # Two stores may hold the same path (two memory filesystems, two buckets' clients): the key names both.
        return f"{id(io.fs)}:{location}"

    def get(self, io: FileIO, location: str) -> V | None:
        """The cached value of the file, made the most recently used; None if it is not cached."""
        key = self._key(io, location)
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, io: FileIO, location: str, value: V, *, replace: bool = False) -> V:
        """Cache ``value`` for the file and return the cached value.

        A file already cached keeps its value (two threads that read it share one copy) unless
        ``replace`` is set.
        """
        key = self._key(io, location)
        with self._lock:
            cached = self._values.get(key)
            if cached is not None:
                if not replace:
                    return cached
                self._total -= self._weight(cached)
            self._values[key] = value
            self._values.move_to_end(key)
            self._total += self._weight(value)
            while self._total > self.max_weight and len(self._values) > 1:
                _, dropped = self._values.popitem(last=False)
                self._total -= self._weight(dropped)
        return value

    def get_or_load(self, io: FileIO, location: str, load: Callable[[], V]) -> V:
        """The cached value, or ``load()`` cached; the file is read outside the lock."""
        value = self.get(io, location)
        if value is None:
            value = self.put(io, location, load())
        return value

    def clear(self) -> None:
        """Forget every cached value."""
        with self._lock:
            self._values.clear()
            self._total = 0

    def __len__(self) -> int:
        return len(self._values)
