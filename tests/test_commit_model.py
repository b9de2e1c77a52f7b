"""The executable model of the commit protocol (spec/model/), and lakefmt held to it.

1. Thousands of random interleavings of 2–3 actors (appends, merge-on-read deletes and
   overwrites, compaction, expiry, readers) keep the model's invariants after every step:
   a linear history (COMMIT-4, CAT-4, CAT-5), no lost acknowledged commit (COMMIT-15), readers
   that see one snapshot (READ-1), no deleted row brought back (ROWDEL-3, ROWDEL-4, DV-9,
   COMMIT-10) and no file of a retained snapshot deleted (MAINT-5, LAYOUT-5); both as lakefmt
   commits (rebuild and swap under the catalog lock, CAT-6) and with rebuilds outside it.
2. Broken variants of the model (a swap without its compare, compaction without the vector
   check, ...) are caught by those invariants: the checker can fail.
3. Real lakefmt processes play the same interleavings — each actor a process that stops at a
   named point of :mod:`lakefmt.hooks` until the test lets it commit — and end with the
   outcomes, rows, live files, snapshots and commit log the model predicts.
"""

from __future__ import annotations

import multiprocessing
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakefmt
from tests.mp_workers import model_actor, to_ipc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spec" / "model"))
from commit_model import (  # the model lives with the spec, not in the package
    Append,
    Compact,
    Delete,
    Expire,
    Model,
    Overwrite,
    Read,
    Row,
    Vector,
)
from explore import InvariantViolation, random_scenario, run

CTX = multiprocessing.get_context("spawn")
SCHEMA = pa.schema([pa.field("x", pa.int64()), pa.field("uid", pa.int64())])
ANSWER_TIMEOUT = 120


def scenario(seed: int) -> tuple:
    rng = random.Random(seed)
    return random_scenario(rng, actors=rng.choice([2, 3]))


# -- 1. the model's invariants over random interleavings --------------------------------------------------------
@pytest.mark.parametrize("locked", [True, False], ids=["rebuild-under-lock", "rebuild-outside-lock"])
def test_random_interleavings_keep_the_invariants(locked):
    """1,500 seeded scenarios per mode; every rule of COMMIT-7 … COMMIT-10 and ROWDEL-3 … ROWDEL-5 fires."""
    seen: Counter = Counter()
    for seed in range(1500):
        seen += run(*scenario(seed), locked=locked).seen   # raises InvariantViolation with the trace
    for rule in ("lost swap", "COMMIT-9", "COMMIT-10", "ROWDEL-3", "ROWDEL-4", "ROWDEL-5", "replan", "expired base"):
        assert seen[rule] > 0, (rule, seen)


def test_interleavings_found_by_hypothesis_keep_the_invariants():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @st.composite
    def scenarios(draw: Any) -> tuple:
        uids = iter(range(1, 10**6))
        xs = st.integers(0, 9)

        def rows(lo: int = 0, hi: int = 9) -> tuple[Row, ...]:
            return tuple((draw(st.integers(lo, hi)), next(uids)) for _ in range(draw(st.integers(1, 3))))

        def operation() -> Any:
            kind = draw(st.sampled_from(["append", "delete", "overwrite", "compact", "expire", "read"]))
            lo = draw(xs)
            hi = draw(st.integers(lo, 9))
            return {"append": lambda: Append(rows()), "delete": lambda: Delete(lo, hi),
                    "overwrite": lambda: Overwrite(lo, hi, rows(lo, hi)), "compact": Compact,
                    "expire": Expire, "read": Read}[kind]()

        setup = [rows() for _ in range(draw(st.integers(1, 3)))]
        names = "ABC"[:draw(st.integers(2, 3))]
        actors = {n: [operation() for _ in range(draw(st.integers(1, 2)))] for n in names}
        schedule = draw(st.lists(st.sampled_from(names), max_size=18))
        return setup, actors, schedule, draw(st.booleans())

    @hypothesis.settings(max_examples=400, deadline=None, derandomize=True, database=None)
    @hypothesis.given(scenarios())
    def check(s: tuple) -> None:
        run(*s[:3], locked=s[3])

    check()


# -- 2. a broken protocol is caught --------------------------------------------------------------------------------
class SwapWithoutCompare(Model):
    """CAT-4 without its WHERE clause: the pointer moves whatever it names."""

    def cas(self, expected: str, new: str) -> bool:
        self.pointer = new
        return True


class RemovalWithoutVectorCheck(Model):
    """ROWDEL-4 left out: compaction (or a whole-file delete) removes a file whose vector changed."""

    def check_removed(self, name: str, as_read: Vector, files: dict[str, Vector]) -> Any:
        return None if name in files else super().check_removed(name, as_read, files)


class RebaseWithoutUnion(Model):
    """ROWDEL-3 left out: a rebased delete commits its own vector only."""

    def merge_vectors(self, new: Vector, live: Vector) -> Vector:
        return new


class NoFilterCheck(Model):
    """COMMIT-10 left out: a delete ignores matching rows appended since it planned."""

    def check_filter(self, change: Any, c: Any) -> Any:
        return None


class ExpiryByPlan(Model):
    """MAINT-5 left out: expiry deletes every data file of the expired snapshots."""

    def delete_expired(self, base: Any, committed: Any, expired: frozenset[int]) -> None:
        for sid in expired & set(base.snapshots):
            self.lists.discard(base.snapshots[sid].manifest_list)
            for name in base.snapshots[sid].files:
                self.storage.pop(name, None)


class TornReader(Model):
    """READ-1 left out: a reader takes the files of its snapshot but the vectors current when it reads."""

    def read_rows(self, actor: Any) -> Counter | None:
        now = self.load().current_snapshot.files
        return Counter(r for name in actor.base.current_snapshot.files
                       for pos, r in enumerate(self.storage[name].rows) if pos not in now.get(name, frozenset()))


@pytest.mark.parametrize("broken, invariant", [
    (SwapWithoutCompare, "I2 lost commit"), (RemovalWithoutVectorCheck, "I4 deleted rows are back"),
    (RebaseWithoutUnion, "I4 deleted rows are back"), (NoFilterCheck, "I4 rows"),
    (ExpiryByPlan, "I5 storage"), (TornReader, "I3 one snapshot")])
@pytest.mark.parametrize("locked", [True, False], ids=["under-lock", "outside-lock"])
def test_a_broken_protocol_breaks_an_invariant(broken, invariant, locked):
    for seed in range(2000):
        try:
            run(*scenario(seed), locked=locked, model=broken)
        except InvariantViolation as exc:
            assert any(p.startswith(invariant) for p in exc.problems), exc
            return
    pytest.fail(f"{broken.__name__} kept every invariant in 2,000 scenarios")


# -- the spec's examples, as schedules ----------------------------------------------------------------------------
F1 = ((1, 1), (2, 2), (3, 3))
F2 = ((5, 4), (6, 5), (7, 6))
EXAMPLES = {   # name: (setup, actors, schedule, expected outcome kinds)
    "COMMIT-7 example 1, two appends": ([F1], {"A": [Append(((4, 10),))], "B": [Append(((8, 11),))]},
                                         "ABABAB", {"A": ["ok"], "B": ["ok"]}),
    "COMMIT-7 example 2, compaction rebased over an append": (
        [F1, F2], {"A": [Compact()], "B": [Append(((9, 10),))]}, "AABBBA", {"A": ["ok"], "B": ["ok"]}),
    "COMMIT-9 example 3, compaction after its input was deleted": (
        [F1, F2], {"A": [Compact()], "B": [Delete(5, 7)]}, "AABBBA", {"A": ["conflict"], "B": ["ok"]}),
    "COMMIT-10 example 4, a delete rebased over an append it cannot match": (
        [F1], {"A": [Delete(1, 1)], "B": [Append(((5, 10), (9, 11)))]}, "AABBBA", {"A": ["ok"], "B": ["ok"]}),
    "COMMIT-10 example 5, a delete after an append that may match": (
        [F1], {"A": [Delete(1, 1)], "B": [Append(((0, 10), (9, 11)))]}, "AABBBA",
        {"A": ["conflict"], "B": ["ok"]}),
    "ROWDEL-5 example 3, a delete planned again over a compaction": (
        [F1, F2], {"A": [Delete(1, 1)], "B": [Compact()]}, "AABBBA", {"A": ["ok"], "B": ["ok"]}),
    "ROWDEL-3 example 1, two deletes of one file": (
        [F1], {"A": [Delete(1, 1)], "B": [Delete(3, 3)]}, "AABBBA", {"A": ["ok"], "B": ["ok"]}),
    "ROWDEL-4 example 2, compaction after a delete of its input's rows": (
        [F1, F2], {"A": [Compact()], "B": [Delete(2, 2)]}, "AABBBA", {"A": ["conflict"], "B": ["ok"]}),
    "MAINT-5, a reader whose snapshot was expired": (
        [F1], {"A": [Read()], "B": [Append(((4, 10),))], "C": [Expire()]}, "ABBBCCCA",
        {"A": ["error"], "B": ["ok"], "C": ["ok"]}),
    "READ-1, a reader keeps its snapshot across a delete": (
        [F1, F2], {"A": [Read()], "B": [Delete(2, 6)]}, "ABBBA", {"A": ["ok"], "B": ["ok"]}),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_spec_examples_in_the_model(name):
    setup, actors, schedule, expected = EXAMPLES[name]
    m = run(setup, actors, list(schedule))
    assert {a.name: [o[0] for o in a.outcomes] for a in m.actors.values()} == expected
    if name.startswith("ROWDEL-3"):
        assert list(m.load().current_snapshot.files.values()) == [frozenset({0, 2})]   # the union
    if name.startswith("READ-1"):
        assert m.reads[0][1] == Counter(F1 + F2)


# -- 3. lakefmt plays the same interleavings ------------------------------------------------------------------------
def real_sample() -> dict[str, tuple]:
    """The spec's examples, 16 random scenarios where a rule of COMMIT-7 … COMMIT-10, ROWDEL-3 … ROWDEL-5
    or an expiry decides an outcome, and 4 where nothing conflicts."""
    sample = {name: (setup, actors, list(schedule)) for name, (setup, actors, schedule, _) in EXAMPLES.items()}
    eventful, plain = 0, 0
    for seed in range(1000):
        m = run(*scenario(seed))
        if set(m.seen) - {"lost swap"} and eventful < 16:
            eventful += 1
        elif not m.seen and plain < 4:
            plain += 1
        else:
            continue
        sample[f"seed-{seed}"] = scenario(seed)
    return sample


REAL = real_sample()


class Actors:
    """One spawned process per actor name (tests/mp_workers.py model_actor), reused by every scenario."""

    def __init__(self, names: str) -> None:
        self.conns, self.procs = {}, {}
        for name in names:
            parent, child = CTX.Pipe()
            self.procs[name] = CTX.Process(target=model_actor, args=(child,), daemon=True)
            self.procs[name].start()
            self.conns[name] = parent

    def ask(self, name: str, message: tuple) -> tuple:
        self.conns[name].send(message)
        if not self.conns[name].poll(ANSWER_TIMEOUT):
            raise TimeoutError(f"actor {name} did not answer {message[0]!r} (exit code {self.procs[name].exitcode})")
        return self.conns[name].recv()

    def close(self) -> None:
        for conn in self.conns.values():
            try:
                conn.send(("stop",))
            except OSError:
                pass
        for p in self.procs.values():
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


@pytest.fixture(scope="module")
def actors() -> Any:
    pool = Actors("ABC")
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> lakefmt.Catalog:
    return lakefmt.Catalog(str(tmp_path_factory.mktemp("model") / "warehouse"), create=True)


def rows_table(rows: tuple[Row, ...]) -> pa.Table:
    return pa.table({"x": [x for x, _ in rows], "uid": [u for _, u in rows]}, schema=SCHEMA)


def encode(op: Any) -> tuple[str, Any]:
    if isinstance(op, Append):
        return "append", to_ipc(rows_table(op.rows))
    if isinstance(op, Delete):
        return "delete", (op.lo, op.hi)
    if isinstance(op, Overwrite):
        return "overwrite", (op.lo, op.hi, to_ipc(rows_table(op.rows)))
    return type(op).__name__.lower(), None


OPERATION = {Append: "append", Delete: "delete", Overwrite: "overwrite", Compact: "replace", Expire: "expire-snapshots"}


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", REAL)
def test_lakefmt_ends_as_the_model_predicts(name, actors, warehouse):
    """Each step of the model's trace is played by a real process; outcomes, read rows, and then the
    table's rows, live files (rows, deleted rows), retained snapshots and commit log must match."""
    setup, plan, schedule = REAL[name]
    model = run(setup, plan, schedule)
    identifier = f"model.t{list(REAL).index(name)}"
    table = warehouse.create_table(identifier, SCHEMA)
    for batch in setup:
        table.append(rows_table(batch))
    outcomes: dict[str, list[tuple]] = {a: [] for a in plan}
    paused: set[str] = set()
    played: list[str] = []
    try:
        for step in model.trace:
            op = plan[step.actor][len(outcomes[step.actor])]
            message = {"load": ("load", warehouse.warehouse, identifier), "read": ("read",),
                       "build": ("build", *encode(op)), "swap": ("swap",)}[step.step]
            answer = actors.ask(step.actor, message)
            paused.discard(step.actor)
            played.append(f"{step.actor} {step.step} {step.op}: model {step.outcome}, lakefmt {answer}")
            assert answer[0] != "error", "\n".join(played)
            if answer[0] == "paused":
                paused.add(step.actor)
            elif answer[0] == "done":
                outcomes[step.actor].append(answer[1])
            ended = None if answer[0] in ("ok", "paused") else answer[1]
            assert (ended is None) == (step.outcome is None), "\n".join(played)
            if ended is not None:
                assert ended[0] == step.outcome[0], "\n".join(played)
                if step.op == "Read" and ended[0] == "ok":
                    assert Counter(map(tuple, ended[1])) == step.outcome[1], "\n".join(played)
    finally:
        for a in paused:   # never leave a process waiting for the next scenario
            actors.ask(a, ("swap",))

    snapshot_actor = {o[1]: a for a, outs in outcomes.items() for o, op in zip(outs, plan[a])
                      if o[0] == "ok" and not isinstance(op, (Expire, Read))}
    t = warehouse.load_table(identifier)
    log = sorted(warehouse.commit_log(identifier), key=lambda r: r.version)[1 + len(setup):]
    current = model.load()
    assert {
        "rows": sorted(tuple(r.values()) for r in t.scan().to_arrow().to_pylist()),
        "files": sorted((f.record_count, f.deleted_record_count) for f in t.plan_files()),
        "snapshots": len(t.snapshots()),
        "log": [(r.operation, snapshot_actor.get(r.snapshot_id)) for r in log],
    } == {
        "rows": sorted(model.rows_of(current.current_snapshot).elements()),
        "files": sorted((len(model.storage[f].rows), len(v)) for f, v in current.current_snapshot.files.items()),
        "snapshots": len(current.snapshots),
        "log": [(OPERATION[type(plan[a][i])], None if isinstance(plan[a][i], Expire) else a)
                for _, _, a, i in model.log if a != "setup"],
    }, "\n".join(played)
