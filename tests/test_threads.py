"""The shared I/O pool: results in order, errors after every running call ended, nested maps inline."""

from __future__ import annotations

import threading

import pytest

from lakefmt.threads import POOL_THREADS, thread_map


def test_results_come_back_in_item_order():
    assert thread_map(lambda x: x * x, list(range(200)), 8) == [x * x for x in range(200)]


def test_at_most_max_workers_run_at_once():
    lock, running, peak = threading.Lock(), [0], [0]
    release = threading.Event()

    def call(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 3:
                release.set()
        release.wait(30)
        with lock:
            running[0] -= 1
        return i

    assert thread_map(call, list(range(12)), 3) == list(range(12))
    assert peak[0] == 3


def test_an_error_stops_new_items_and_is_raised_once_the_running_ones_ended():
    started, finished = [], []
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            started.append(i)
        if i == 2:
            raise ValueError("item 2")
        with lock:
            finished.append(i)
        return i

    with pytest.raises(ValueError, match="item 2"):
        thread_map(call, list(range(100)), 2)
    assert len(started) < 100
    assert sorted(finished) == sorted(i for i in started if i != 2)  # nothing runs after the raise


def test_a_map_inside_a_pool_thread_runs_inline_without_deadlock():
    def outer(i: int) -> list[int]:
        return thread_map(lambda j: (i, j, threading.current_thread().name), list(range(3)), POOL_THREADS)

    results = thread_map(outer, list(range(POOL_THREADS * 2)), POOL_THREADS)
    for i, inner in enumerate(results):
        assert [(a, b) for a, b, _ in inner] == [(i, 0), (i, 1), (i, 2)]
        assert len({name for _, _, name in inner}) == 1  # all in the calling pool thread
