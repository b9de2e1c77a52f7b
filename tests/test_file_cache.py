"""The cache of parsed immutable files (LAYOUT-4) shared by manifests, manifest lists and history files."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

import lakefmt
from lakefmt import manifest_cache, snapshot_history
from lakefmt.file_cache import ImmutableFileCache
from lakefmt.io import FileIO


def test_least_recently_used_values_leave_past_the_weight_bound(tmp_path: Path) -> None:
    io = FileIO(str(tmp_path))
    cache: ImmutableFileCache[list[int]] = ImmutableFileCache(5, len)
    cache.put(io, "a", [1, 2])
    cache.put(io, "b", [3, 4])
    assert cache.get(io, "a") == [1, 2]  # a is now the most recently used
    cache.put(io, "c", [5, 6])  # weight 6 > 5: b leaves
    assert (cache.get(io, "a"), cache.get(io, "b"), cache.get(io, "c")) == ([1, 2], None, [5, 6])
    cache.put(io, "huge", list(range(50)))  # over the bound alone: kept, everything else leaves
    assert len(cache) == 1 and cache.get(io, "huge") == list(range(50))
    cache.clear()
    assert len(cache) == 0 and cache.get(io, "huge") is None


def test_a_file_keeps_its_first_value_unless_replaced(tmp_path: Path) -> None:
    io = FileIO(str(tmp_path))
    cache: ImmutableFileCache[str] = ImmutableFileCache(10)
    assert cache.put(io, "a", "first") == "first"
    assert cache.put(io, "a", "second") == "first"
    assert cache.put(io, "a", "third", replace=True) == "third"
    assert cache.get_or_load(io, "a", lambda: "never loaded") == "third"
    assert cache.get_or_load(io, "b", lambda: "loaded") == "loaded" and len(cache) == 2


def test_the_same_path_in_two_stores_is_two_files() -> None:
    one, two = FileIO("memory://cache-one"), FileIO("memory://cache-one")
    one.fs, two.fs = object(), object()  # type: ignore[assignment]  # two stores that name the same path
    cache: ImmutableFileCache[str] = ImmutableFileCache(10)
    cache.put(one, "t/m.parquet", "one")
    assert cache.get(two, "t/m.parquet") is None and cache.get(one, "t/m.parquet") == "one"


def test_threads_loading_one_file_share_one_value(tmp_path: Path) -> None:
    io = FileIO(str(tmp_path))
    cache: ImmutableFileCache[object] = ImmutableFileCache(10)
    start = threading.Barrier(8)
    got: list[object] = []

    def load() -> None:
        start.wait()
        got.append(cache.get_or_load(io, "a", object))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(v is cache.get(io, "a") for v in got)


def test_manifests_lists_and_history_files_are_cached_and_cleared(local_catalog: lakefmt.Catalog) -> None:
    t = local_catalog.create_table("db.cached", pa.schema([("x", pa.int64())]),
                                   properties={"write.metadata.inline-snapshots-max": "2"})
    for i in range(6):
        t.append(pa.table({"x": [i]}))
    want = sorted(t.scan().to_arrow().column("x").to_pylist())
    assert len(manifest_cache._contents) > 0 and len(manifest_cache._lists) > 0
    assert len(snapshot_history._cache) > 0  # history files this process wrote are remembered
    manifest_cache.clear()
    snapshot_history.clear_cache()
    assert (len(manifest_cache._contents), len(manifest_cache._lists), len(snapshot_history._cache)) == (0, 0, 0)
    again = local_catalog.load_table("db.cached")
    assert sorted(again.scan().to_arrow().column("x").to_pylist()) == want == list(range(6))
    ids = [s.snapshot_id for s in again.metadata.snapshots]  # reads the history files back through the cache
    assert ids == [s.snapshot_id for s in t.metadata.snapshots] and len(ids) == 6
    assert len(snapshot_history._cache) > 0
