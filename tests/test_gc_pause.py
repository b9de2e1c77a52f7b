"""Pausing the cyclic garbage collector while planning builds objects (lakefmt.gc_pause)."""

from __future__ import annotations

import gc
import threading

import pyarrow as pa

import lakefmt
from lakefmt import manifest_cache
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
