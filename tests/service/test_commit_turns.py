"""Commit turns (CATHTTP-21..24): a commit refused because the pointer moved gets the table's turn, and the
server swaps no other commit of that table before the turn's holder sends its rebuilt one.

Threads wait on the server's own figures (the turn table, ``lakefmt_catalog_commits_waiting``), never on sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import lakefmt
from tests.conftest import rows
from tests.service.conftest import metric_samples
from tests.service.test_catalog_api import P, SCHEMA, commit_body, next_metadata, serve  # noqa: F401 - fixture

from lakefmt.service.commit_turns import CommitTurns

KEY = ("ops", "events")


def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds (checked every millisecond), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.001)


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_requests_wait_for_the_holder_then_go_in_arrival_order():
    """CATHTTP-21: while a client holds the turn, other requests wait, and are then handled first come first
    served; CATHTTP-22: the holder's request, naming its ticket, goes ahead at once."""
    turns = CommitTurns(seconds=60)
    with turns.request(KEY, None) as first:
        first.keep()
    ticket, order = first.ticket, []

    def request(label: str) -> None:
        with turns.request(KEY, None):
            order.append(label)

    x = in_thread(lambda: request("x"))
    until(lambda: turns.waiting() == 1, "x waits")
    y = in_thread(lambda: request("y"))
    until(lambda: turns.waiting() == 2, "y waits")
    assert order == [] and turns.holder(KEY) == ticket
    with turns.request(KEY, ticket) as holder:  # the holder goes ahead of the queue
        order.append("holder")
    assert not holder.kept
    x.join(30), y.join(30)
    assert order == ["holder", "x", "y"]
    assert turns.holder(KEY) is None and turns.waiting() == 0


def test_a_ticket_is_used_once_a_turn_lapses_and_can_be_given_back():
    """CATHTTP-22: a kept turn gets a fresh ticket, so an old one is an ordinary request; CATHTTP-23: only the
    holder gives a turn back, and a waiting request then goes ahead; CATHTTP-24: a turn lapses after its time."""
    turns = CommitTurns(seconds=60)
    with turns.request(KEY, None) as a:
        a.keep()
    with turns.request(KEY, a.ticket) as again:
        again.keep()
    assert again.ticket != a.ticket and turns.holder(KEY) == again.ticket
    done = threading.Event()
    waiter = in_thread(lambda: (turns.request(KEY, a.ticket).__enter__(), done.set()))  # old ticket: it waits
    until(lambda: turns.waiting() == 1, "the old ticket waits")
    assert not turns.release(KEY, a.ticket) and not done.is_set()
    assert turns.release(KEY, again.ticket)
    assert done.wait(30)
    waiter.join(30)

    short = CommitTurns(seconds=0.05)
    with short.request(KEY, None) as b:
        b.keep()
    started = time.monotonic()
    with short.request(KEY, None) as c:  # waits for the lapse, not forever
        assert c.ticket != b.ticket
    assert time.monotonic() - started < 30 and short.holder(KEY) is None


def test_a_refused_commit_gets_the_turn_and_the_next_swap_is_its_own(serve):
    """Over HTTP: a refusal `moved` asked with want_turn carries the turn (CATHTTP-22); a commit of another
    client sent meanwhile waits (CATHTTP-21) and is refused after the holder's commit, which is applied."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    base = catalog.current_metadata_location("ops.events")
    won = next_metadata(t)
    assert http.post(P + "/namespaces/ops/tables/events/commit", commit_body(base, won))[0] == 200

    status, refused = http.post(P + "/namespaces/ops/tables/events/commit",
                                commit_body(base, next_metadata(t), want_turn=True))
    assert status == 409 and (refused["reason"], refused["current"]) == ("moved", won)
    assert refused["turn"] and refused["turn_seconds"] > 0

    def waiting() -> float:
        return metric_samples(http.get("/metrics")[1])[("lakefmt_catalog_commits_waiting", ())]

    other_answer: list[tuple[int, Any]] = []
    rebuilt, other = next_metadata(t), next_metadata(t)
    thread = in_thread(lambda: other_answer.append(
        http.post(P + "/namespaces/ops/tables/events/commit", commit_body(won, other))))
    until(lambda: waiting() == 1, "the other client's commit waits for the turn")
    status, answer = http.post(P + "/namespaces/ops/tables/events/commit",
                               commit_body(won, rebuilt, turn=refused["turn"]))
    assert (status, answer["committed"], answer["version"]) == (200, True, 3)
    thread.join(30)
    [(status, late)] = other_answer
    assert (status, late["reason"], late["current"]) == (409, "moved", rebuilt)
    assert catalog.current_metadata_location("ops.events") == rebuilt
    assert metric_samples(http.get("/metrics")[1])[("lakefmt_catalog_commit_turns_total", ())] == 1
    assert http.post(P + "/namespaces/ops/tables/events/turn/release", {"turn": refused["turn"]}) == (
        200, {"released": False})  # used: nothing to give back


def test_a_client_rebuilds_a_refused_append_at_once_in_its_turn(serve):
    """The client (CATHTTP-22, COMMIT-13): a stale append is refused, rebuilt without back-off in the turn,
    and applied next; a turn the client does not use is given back at the end of its session (CATHTTP-23)."""
    served = serve()
    local = served.catalog
    local.create_table("ops.events", schema=SCHEMA)
    a = lakefmt.Catalog(served.http.url, token=served.http.token)
    b = lakefmt.Catalog(served.http.url, token=served.http.token)
    stale = a.load_table("ops.events")
    b.load_table("ops.events").append(pa.table({"id": [1], "name": ["b"]}, schema=SCHEMA))
    # As right after a's own commit (catalog_client.POINTER_SECONDS): a believes the pointer it last saw.
    a._told("ops", "events", stale.metadata_location, time.monotonic() + 60)
    stale.append(pa.table({"id": [2], "name": ["a"]}, schema=SCHEMA))
    log = [r.operation for r in local.commit_log("ops.events")]
    assert log.count("append") == 2
    assert rows(local.load_table("ops.events").scan().to_arrow()) == [(1, "b"), (2, "a")]
    samples = metric_samples(served.http.get("/metrics")[1])
    assert samples[("lakefmt_catalog_commit_turns_total", ())] == 1
    assert not a.holds_commit_turn("ops", "events")

    # A turn held when a session starts and not sent in it is given back when it ends.
    a._turns.given(("ops", "events"), "unused-ticket", 60)
    with a.session():
        pass
    assert not a.holds_commit_turn("ops", "events")


def test_a_turn_taken_before_building_names_the_pointer_and_orders_the_commits(serve):
    """CATHTTP-25: POST .../turn waits for the table's turn and answers the pointer to build on; a second
    request waits until the holder's commit, and then names that commit's pointer and that it waited."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    base = catalog.current_metadata_location("ops.events")
    status, first = http.post(P + "/namespaces/ops/tables/events/turn", {})
    assert status == 200 and (first["current"], first["waited"]) == (base, False) and first["turn_seconds"] > 0

    def waiting() -> float:
        return metric_samples(http.get("/metrics")[1])[("lakefmt_catalog_commits_waiting", ())]

    second: list[tuple[int, Any]] = []
    thread = in_thread(lambda: second.append(http.post(P + "/namespaces/ops/tables/events/turn", {})))
    until(lambda: waiting() == 1, "the second turn request waits")
    new = next_metadata(t)
    assert http.post(P + "/namespaces/ops/tables/events/commit",
                     commit_body(base, new, turn=first["turn"]))[1]["committed"] is True
    thread.join(30)
    [(status, answer)] = second
    assert status == 200 and (answer["current"], answer["waited"]) == (new, True)
    assert http.post(P + "/namespaces/ops/tables/events/turn/release", {"turn": answer["turn"]}) == (
        200, {"released": True})
    assert http.post(P + "/namespaces/nope/tables/events/turn", {})[1]["error"] == "NoSuchTableError"


def test_known_pointers_are_trusted_only_while_the_catalog_file_is_unchanged(tmp_path):
    """CATHTTP-25's pointer without a session: remembered after the server's own session, forgotten as soon as
    any session writes the catalog file (here another process's view: a second Catalog object)."""
    from lakefmt.service.commit_turns import KnownPointers

    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = catalog.create_table("ops.events", schema=SCHEMA)
    known = KnownPointers(catalog.catalog_path)
    pointer = catalog.current_metadata_location("ops.events")
    known.remember(KEY, pointer)
    assert known.get(KEY) == pointer and known.get(("ops", "other")) is None
    other = lakefmt.Catalog(str(tmp_path / "wh"))
    other.load_table("ops.events").append(pa.table({"id": [1], "name": ["x"]}, schema=SCHEMA))
    assert known.get(KEY) is None  # the file changed: read the pointer again
    t.refresh()
    assert t.metadata_location != pointer


def test_a_client_under_contention_takes_the_turn_before_building(serve):
    """The client (CATHTTP-25): after a refusal it takes the turn first for its next commits, so they are built
    once and never refused; without contention it sends the commit at once."""
    served = serve()
    served.catalog.create_table("ops.events", schema=SCHEMA)
    a = lakefmt.Catalog(served.http.url, token=served.http.token)
    b = lakefmt.Catalog(served.http.url, token=served.http.token)
    assert not a.take_commit_turn("ops", "events")  # no contention seen
    stale = a.load_table("ops.events")
    b.load_table("ops.events").append(pa.table({"id": [1], "name": ["b"]}, schema=SCHEMA))
    a._told("ops", "events", stale.metadata_location, time.monotonic() + 60)
    stale.append(pa.table({"id": [2], "name": ["a"]}, schema=SCHEMA))  # refused once: contention seen
    turns = metric_samples(served.http.get("/metrics")[1])[("lakefmt_catalog_commit_turns_total", ())]
    called: list[bool] = []
    assert a.take_commit_turn("ops", "events", before=lambda: called.append(True)) and called == [True]
    assert a.holds_commit_turn("ops", "events")
    with a.session():  # a turn held and not used in a session is given back
        pass
    stale.append(pa.table({"id": [3], "name": ["a"]}, schema=SCHEMA))  # built in a turn taken first
    samples = metric_samples(served.http.get("/metrics")[1])
    assert samples[("lakefmt_catalog_commit_turns_total", ())] == turns + 2
    assert rows(served.catalog.load_table("ops.events").scan().to_arrow()) == [(1, "b"), (2, "a"), (3, "a")]
