"""Pausing the cyclic garbage collector while planning builds objects (lakefmt.gc_pause)."""

from __future__ import annotations

import gc
import threading
import weakref

import pyarrow as pa
import pytest

import lakefmt
from lakefmt import gc_pause, manifest_cache
from lakefmt.gc_pause import gc_paused


def test_pause_nests_across_threads_and_restores_the_state():
    assert gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            entered.set()
            release.wait(10)

    worker = threading.Thread(target=other)
    with gc_paused():
        assert not gc.isenabled()
        worker.start()
        assert entered.wait(10)
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's pause still runs
    release.set()
    worker.join(10)
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_planning_leaves_the_collector_on_and_plans_every_file(local_catalog: lakefmt.Catalog):
    t = local_catalog.create_table("db.gc", pa.schema([pa.field("id", pa.int64())]))
    for i in range(5):
        t.append(pa.table({"id": pa.array(range(10 * i, 10 * i + 10), pa.int64())}))
    manifest_cache.clear()
    plan = t.scan().plan()
    assert gc.isenabled()
    assert len(plan.tasks) == 5 and len({task.location for task in plan.tasks}) == 5
    assert all(task.location == f"{t.location}/{task.data_file.path}" for task in plan.tasks)
    assert all(type(task) is lakefmt.scan.FileScanTask for task in plan.tasks)
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == list(range(50))


class _Node:
    def __init__(self) -> None:
        self.other: object = None


@pytest.mark.skipif(not gc_pause._PROMOTE, reason="promotion is for CPython 3.10-3.13's collector")
def test_objects_built_in_a_pause_join_the_oldest_generation_and_cycles_are_still_freed():
    with gc_paused():
        kept = [_Node() for _ in range(gc_pause.PROMOTE_MIN_OBJECTS)]
        cycle = _Node()
        cycle.other = cycle
    assert gc.isenabled()
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(o) in oldest for o in kept) and id(cycle) in oldest
    assert gc.get_freeze_count() == 0
    ref = weakref.ref(cycle)
    del cycle
    assert ref() is not None  # garbage of a cycle: only a collection frees it
    gc.collect()
    assert ref() is None


def test_a_small_pause_promotes_nothing():
    """A warm plan's few objects stay young: promoting them after every scan filled the oldest generation
    with each scan's garbage (slow full collections)."""
    gc.collect()
    with gc_paused():
        few = [_Node() for _ in range(100)]
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert not any(id(o) in oldest for o in few)


def test_a_processs_own_frozen_objects_stay_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with gc_paused():  # a burst: it would be promoted, were nothing frozen
            built = [_Node() for _ in range(gc_pause.PROMOTE_MIN_OBJECTS)]
        # An unfreeze would empty the permanent generation; frozen objects freed meanwhile (by other
        # threads of a large test process) may lower the count a little.
        assert gc.get_freeze_count() > frozen // 2
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert not any(id(o) in oldest for o in built)
        assert gc.isenabled()
    finally:
        gc.unfreeze()


@pytest.mark.skipif(not gc_pause._PROMOTE, reason="promotion is for CPython 3.10-3.13's collector")
def test_the_promotion_keeps_the_older_generations_counts():
    gc.collect()
    gc.collect(1)  # the oldest generation's count: 1
    gc.collect(0)
    gc.collect(0)  # the middle one's: 2
    with gc_paused():
        built = [_Node() for _ in range(2_000)]
    # the promotion stands for one collection of the youngest generation
    assert gc.get_count()[1:] == (3, 1) and len(built) == 2_000
