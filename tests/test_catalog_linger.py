"""CAT-23: a process keeps the catalog lock and file between its sessions, within bounds."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.catalog_access import MAX_HOLD_SECONDS
from lakefmt.catalog_lock import lock_path
from lakefmt.errors import ValidationError

SCHEMA = pa.schema([("id", pa.int64()), ("who", pa.string())])


def lock_is_free(catalog_path: str) -> bool:
    """Whether an exclusive flock on the lock file can be taken now (a new open file description)."""
    fd = os.open(lock_path(catalog_path), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def wait_until(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


@pytest.fixture
def warehouse(tmp_path):
    wh = str(tmp_path / "wh")
    lakefmt.Catalog(wh, create=True).create_table("ops.events", schema=SCHEMA)
    return wh


def test_a_lingering_catalog_keeps_the_lock_after_a_session_and_lets_go_when_idle(warehouse):
    cat = lakefmt.Catalog(warehouse, session_linger=0.2)
    assert cat.table_exists("ops.events")
    assert not lock_is_free(cat.catalog_path)  # kept: the next session needs no lock nor attach
    assert cat.list_tables() == ["ops.events"]
    assert wait_until(lambda: lock_is_free(cat.catalog_path))  # idle for the linger time: let go


def test_release_lets_go_at_once_and_the_catalog_stays_usable(warehouse):
    cat = lakefmt.Catalog(warehouse, session_linger=0.5)
    cat.load_table("ops.events").append(pa.table({"id": [1], "who": ["a"]}, schema=SCHEMA))
    assert not lock_is_free(cat.catalog_path)
    cat.release()
    assert lock_is_free(cat.catalog_path)
    other = lakefmt.Catalog(warehouse)  # the commit made while lingering is in the file for everyone
    assert other.load_table("ops.events").scan().to_arrow().column("id").to_pylist() == [1]
    assert cat.load_table("ops.events").scan().count() == 1


def test_without_linger_and_read_only_every_session_lets_go(warehouse):
    plain = lakefmt.Catalog(warehouse)
    assert plain.table_exists("ops.events") and lock_is_free(plain.catalog_path)
    reader = lakefmt.Catalog(warehouse, read_only=True, session_linger=0.2)  # CAT-18: never lingers
    assert reader.list_tables() == ["ops.events"] and lock_is_free(reader.catalog_path)


@pytest.mark.parametrize("bad", [-0.1, MAX_HOLD_SECONDS + 0.1, True, "0.05", float("nan")])
def test_a_bad_linger_is_refused_before_anything_is_opened(warehouse, bad):
    with pytest.raises(ValidationError, match=r"session_linger must be a number of seconds from 0 to 0\.5"):
        lakefmt.Catalog(warehouse, session_linger=bad)


def test_a_failed_session_lets_go_and_leaves_the_file_as_it_was(warehouse):
    cat = lakefmt.Catalog(warehouse, session_linger=0.5)
    with pytest.raises(RuntimeError, match="boom"), cat.session() as s:
        s.con.execute("BEGIN TRANSACTION")
        s.con.execute("DELETE FROM tables")
        raise RuntimeError("boom")
    assert lock_is_free(cat.catalog_path)
    assert lakefmt.Catalog(warehouse).list_tables() == ["ops.events"]


def _append_one(warehouse: str, ident: int, started) -> None:
    started.set()
    t = lakefmt.Catalog(warehouse, lock_timeout=20).load_table("ops.events")
    t.append(pa.table({"id": [ident], "who": ["other"]}, schema=SCHEMA))


def test_another_process_gets_the_lock_while_a_lingering_process_works_without_pause(warehouse):
    """The 0.5 s bound on a hold: a busy lingering process cannot starve a waiting one."""
    cat = lakefmt.Catalog(warehouse, session_linger=MAX_HOLD_SECONDS)
    t = cat.load_table("ops.events")
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    child = ctx.Process(target=_append_one, args=(warehouse, 1000, started))
    child.start()
    assert started.wait(60)
    mine = 0
    deadline = time.monotonic() + 60
    while child.is_alive() and time.monotonic() < deadline:  # sessions back to back, no idle gap
        t.append(pa.table({"id": [mine], "who": ["me"]}, schema=SCHEMA))
        mine += 1
    child.join(30)
    assert child.exitcode == 0
    cat.release()
    rows = lakefmt.Catalog(warehouse).load_table("ops.events").scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == sorted([*range(mine), 1000])


def _hold_until(gate) -> None:
    gate.wait(60)  # a forked child alive while its parent lets go of the lock


def test_a_forked_child_does_not_keep_its_parents_lock(warehouse):
    cat = lakefmt.Catalog(warehouse, session_linger=0.5)
    assert cat.table_exists("ops.events") and not lock_is_free(cat.catalog_path)
    ctx = multiprocessing.get_context("fork")
    gate = ctx.Event()
    child = ctx.Process(target=_hold_until, args=(gate,))
    child.start()
    try:
        cat.release()
        assert lock_is_free(cat.catalog_path)  # the child's copy of the descriptor was closed at fork
    finally:
        gate.set()
        child.join(30)
    assert child.exitcode == 0
