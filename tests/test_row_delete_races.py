"""Row-level operations racing in real processes (spec/deletes.md ROWDEL-3 … ROWDEL-5, ROWDEL-9,
ROWDEL-10, ROWDEL-15 … ROWDEL-17, ROWDEL-19; spec/commits.md COMMIT-7 … COMMIT-10).

Each test starts one ``spawn`` process per role once and plays several rounds, each on its
own table and from a shared barrier. A round either lets its processes race freely or
forces an order with events at named points of :mod:`lakefmt.hooks` (one process stops
there, the other commits, the first goes on). After the run every round's table is
checked against a model: the rows, as a multiset, are the rows of the setup with the
committed operations applied in the order the catalog's commit log gives, an operation
that failed applying nothing, and the commit log and snapshot chain are linear.

Related single-order tests, not repeated here: two upserts of one key, a merge paused
while a delete of its rows commits (tests/test_upsert_merge.py), and a compactor paused
before its commit while a delete lands in one partition
(tests/compaction/test_compaction_deletes.py). Here each race runs in both orders, in
both delete modes where they differ, and free.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import deletion_vectors as dv
from tests.conftest import data_files_on_disk, rows
from tests.mp_workers import race_steps, to_ipc

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]

CTX = multiprocessing.get_context("spawn")
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("grp", pa.string()), pa.field("v", pa.int64()),
                    pa.field("tag", pa.string())])
Row = tuple[int, str, int, str]
MODES = ("merge-on-read", "copy-on-write")


def table_of(records: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in records], schema=SCHEMA)


def multiset(records: list[Row]) -> list[tuple]:
    return rows(table_of(records))


# -- operations, their model and their choreography ------------------------------------------------
@dataclass
class Op:
    """One process's operation in a round: what it sends to the worker, and what it does to the model."""

    kind: str                                        # append, delete, upsert, compact, erase, idle
    arg: Any = None                                  # rows (append, upsert), filter (delete, erase), options
    where: Callable[[Row], bool] | None = None       # delete, erase: the filter in Python
    wait: str | None = None
    pause: tuple | None = None
    done: str | None = None

    def step(self, identifier: str, n: int, sync: dict[str, Any], parties: Counter) -> dict:
        def name(x: str) -> str:
            key = f"{n}.{x}"
            if key not in sync:
                sync[key] = CTX.Barrier(parties[key]) if parties[key] else CTX.Event()
            return key

        arg = self.arg
        if self.kind == "append":
            arg = to_ipc(table_of(self.arg))
        elif self.kind == "upsert":
            arg = (to_ipc(table_of(self.arg)), ["id"])
        pause = None
        if self.pause is not None:
            kind, point, *names = self.pause
            pause = (kind, point, *(name(x) for x in names))
        return {"table": identifier, "op": self.kind, "arg": arg, "pause": pause,
                "wait": self.wait and name(self.wait), "done": self.done and name(self.done)}

    def apply(self, model: list[Row]) -> list[Row]:
        """The operation applied alone to the table's rows ``model``."""
        if self.kind == "append":
            return model + list(self.arg)
        if self.kind in ("delete", "erase"):
            assert self.where is not None
            return [r for r in model if not self.where(r)]
        if self.kind == "upsert":  # ROWDEL-6 on key ``id``
            by_key = {r[0]: r for r in self.arg}
            return [by_key.get(r[0], r) for r in model] + [
                r for k, r in by_key.items() if k not in {m[0] for m in model}]
        return model  # compaction keeps the rows (COMMIT-17)


IDLE = Op("idle")


def first(winner: Op, paused: Op, point: str) -> None:
    """``paused`` stops at ``point``; ``winner`` starts once it is there; ``paused`` goes on once ``winner`` ended."""
    paused.pause = ("event", point, "at", "won")
    winner.wait, winner.done = "at", "won"


def meet(point: str, *ops: Op) -> None:
    """Every op stops at ``point`` until all have reached it: all planned on the same snapshot."""
    for op in ops:
        op.pause = ("meet", point, "meet")


@dataclass
class Round:
    """One round: a table (created by ``setup``) and the operation of each role."""

    mode: str
    ops: dict[str, Op]
    setup: list[list[Row]] = field(default_factory=list)   # one append per batch
    setup_filter: tuple[str, Callable[[Row], bool]] | None = None   # a delete after the appends
    identifier: str = ""
    setup_rows: list[Row] = field(default_factory=list)
    setup_version: int = 0


@dataclass
class Outcome:
    ok: bool
    value: dict

    @property
    def snapshot_id(self) -> int | None:
        return self.value.get("snapshot_id")


def prepare(catalog: lakefmt.Catalog, n: int, rnd: Round) -> None:
    rnd.identifier = f"race.r{n}"
    t = catalog.create_table(rnd.identifier, SCHEMA, properties={"write.delete.mode": rnd.mode})
    model: list[Row] = []
    for batch in rnd.setup:
        t.append(table_of(batch))
        model += batch
    if rnd.setup_filter is not None:
        t.delete(rnd.setup_filter[0])
        model = [r for r in model if not rnd.setup_filter[1](r)]
    rnd.setup_rows = model
    rnd.setup_version = max(r.version for r in catalog.commit_log(rnd.identifier))


def race(catalog: lakefmt.Catalog, rounds: list[Round]) -> list[dict[str, Outcome]]:
    """Prepare every round's table, then run the rounds in one process per role; their outcomes by round."""
    roles = sorted({role for rnd in rounds for role in rnd.ops})
    for n, rnd in enumerate(rounds):
        prepare(catalog, n, rnd)
    sync: dict[str, Any] = {}
    steps: dict[str, list[dict]] = {role: [] for role in roles}
    for n, rnd in enumerate(rounds):
        parties = Counter(f"{n}.{op.pause[2]}" for op in rnd.ops.values() if op.pause and op.pause[0] == "meet")
        for role in roles:
            steps[role].append(rnd.ops.get(role, IDLE).step(rnd.identifier, n, sync, parties))
    barrier, results = CTX.Barrier(len(roles)), CTX.Queue()
    procs = [CTX.Process(target=race_steps, args=(catalog.warehouse, role, steps[role], sync, barrier, results))
             for role in roles]
    for p in procs:
        p.start()
    outcomes: list[dict[str, Outcome]] = [{} for _ in rounds]
    deadline = time.monotonic() + 300
    try:
        for _ in range(len(roles) * len(rounds)):
            while True:
                try:
                    status, role, n, value = results.get(timeout=2)
                    break
                except queue.Empty:  # fail fast when a worker died instead of waiting for its report
                    if time.monotonic() > deadline or not all(p.is_alive() for p in procs):
                        pytest.fail(f"workers did not report: exit codes {[p.exitcode for p in procs]}, "
                                    f"got {outcomes}")
            assert n >= 0, value["message"]
            outcomes[n][role] = Outcome(status == "ok", value)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    for n, rnd in enumerate(rounds):
        for role, op in rnd.ops.items():
            if op.pause is not None:  # a forced order really happened
                assert outcomes[n][role].value["paused"], (n, role, outcomes[n][role].value)
    return outcomes


def committed_order(catalog: lakefmt.Catalog, rnd: Round, snapshots: dict[int, str]) -> list[str]:
    """The roles whose snapshots the catalog committed after the setup, in commit order (CAT-5).

    Also checks the commit log is one chain, every snapshot of it made by a role.
    """
    log = sorted(catalog.commit_log(rnd.identifier), key=lambda r: r.version)
    assert [r.version for r in log] == list(range(log[0].version, log[0].version + len(log)))
    for prev, rec in itertools.pairwise(log):
        assert rec.old_metadata_location == prev.new_metadata_location
    after = [r.snapshot_id for r in log if r.version > rnd.setup_version and r.snapshot_id is not None]
    assert sorted(after) == sorted(snapshots), (after, snapshots)  # no commit unaccounted for, none twice
    return [snapshots[s] for s in after]


def check_round(catalog: lakefmt.Catalog, rnd: Round, outcome: dict[str, Outcome],
                snapshots: dict[int, str] | None = None) -> tuple[lakefmt.Table, list[str]]:
    """The table's rows are the setup's with the committed operations applied in commit order;
    its snapshots form one chain. Returns the table and the committing roles in order."""
    if snapshots is None:
        snapshots = {o.snapshot_id: role for role, o in outcome.items() if o.ok and o.snapshot_id is not None}
    order = committed_order(catalog, rnd, snapshots)
    model = rnd.setup_rows
    for role in order:
        model = rnd.ops[role].apply(model)
    t = catalog.load_table(rnd.identifier)
    assert rows(t.scan().to_arrow()) == multiset(model), (rnd.mode, order)
    snaps = sorted(t.snapshots(), key=lambda s: s.sequence_number)
    ancestors = [s.snapshot_id for s in t.metadata.ancestors(t.metadata.current_snapshot_id)]
    assert sorted(ancestors) == sorted(s.snapshot_id for s in snaps)  # no snapshot off the current line
    for prev, snap in itertools.pairwise(snaps):
        if snap.sequence_number == prev.sequence_number + 1:
            assert snap.parent_snapshot_id == prev.snapshot_id
    return t, order


def conflict_of(outcome: Outcome, *fragments: str) -> None:
    """The operation failed with CommitConflictError, its message holding one of ``fragments``."""
    assert not outcome.ok and outcome.value["type"] == "CommitConflictError", outcome.value
    assert any(f in outcome.value["message"] for f in fragments), outcome.value["message"]


def files_holding(t: lakefmt.Table, ids: set[int]) -> dict[str, list[int]]:
    """Every Parquet data file under the table location whose bytes hold one of ``ids``, deleted rows included."""
    out = {}
    for rel in data_files_on_disk(t):
        held = [i for i in pq.read_table(f"{t.location}/{rel}", columns=["id"]).column("id").to_pylist() if i in ids]
        if held:
            out[rel] = held
    return out


# -- 1. two merge-on-read deletes of one file ---------------------------------------------------------
def spread(n_files: int, per_file: int, offsets: list[int]) -> set[int]:
    return {f * per_file + o for f in range(n_files) for o in offsets}


def test_two_deletes_of_different_rows_of_the_same_files_keep_both(local_catalog):
    """ROWDEL-3: both commit, and every file's vector is the union of the two."""
    base = [[(f * 40 + i, "b", 0, f"f{f}") for i in range(40)] for f in range(4)]
    cases = [  # (ids deleted by A, ids deleted by B, both planned on the same snapshot)
        (spread(4, 40, [3, 10]), spread(4, 40, [5, 20, 39]), True),
        ({3, 10, 43, 50, 83, 123}, {10, 11, 50, 123, 124, 125}, True),       # overlapping
        ({*range(120, 140), 1, 41}, {*range(140, 160), 2, 42}, True),        # the union empties file 3 (DV-7)
        (spread(4, 40, [7]), spread(4, 40, [8, 9]), False),                  # free race
    ]
    rounds = []
    for a, b, together in cases:
        ops = {"A": Op("delete", f"id IN ({', '.join(map(str, sorted(a)))})", lambda r, a=a: r[0] in a),
               "B": Op("delete", f"id IN ({', '.join(map(str, sorted(b)))})", lambda r, b=b: r[0] in b)}
        if together:
            meet("after-data-files", ops["A"], ops["B"])
        rounds.append(Round("merge-on-read", ops, setup=base))
    outcomes = race(local_catalog, rounds)

    for rnd, outcome, (a, b, _) in zip(rounds, outcomes, cases):
        assert outcome["A"].ok and outcome["B"].ok, outcome
        t, order = check_round(local_catalog, rnd, outcome)
        assert sorted(order) == ["A", "B"]
        gone = a | b
        assert t.scan().count() == 160 - len(gone)
        for f in t.plan_files():
            ids = pq.read_table(f"{t.location}/{f.path}", columns=["id"]).column("id").to_pylist()
            expected = [p for p, i in enumerate(ids) if i in gone]
            deleted = dv.read_deleted(t.io, t.location, f)
            got = [] if deleted is None else pc.indices_nonzero(deleted).to_pylist()
            assert got == expected, f.path
        if 120 in a:  # no vector deletes every row: the file was removed instead (DV-7)
            assert len(t.plan_files()) == 3
        summaries = [t.snapshot(o.snapshot_id).summary for o in outcome.values()]
        assert sum(int(s["deleted-records"]) for s in summaries) == len(gone)  # no position counted twice
        assert t.current_snapshot().summary["total-records"] == str(160 - len(gone))
        assert t.current_snapshot().summary["total-position-deletes"] == str(
            sum(f.deleted_record_count for f in t.plan_files()))


# -- 2. delete racing compaction ----------------------------------------------------------------------
COMPACT = {"min_age_seconds": 0}


def test_compaction_never_brings_back_rows_a_concurrent_delete_removed(local_catalog):
    """ROWDEL-4, ROWDEL-5, in both delete modes: the delete always commits; the compaction group fails
    when the delete landed on its inputs after it read them, and the delete replans when compaction won."""
    base = [[(f * 30 + i, "b", 0, f"f{f}") for i in range(30)] for f in range(6)]
    gone = {1, 35, 70, 100, 150, 179}

    def ops() -> dict[str, Op]:
        return {"D": Op("delete", "id IN (1, 35, 70, 100, 150, 179)", lambda r: r[0] in gone),
                "C": Op("compact", COMPACT)}

    rounds = []
    for mode in MODES:
        compaction_read_first, delete_read_first = ops(), ops()
        first(compaction_read_first["D"], compaction_read_first["C"], "compaction-before-commit")
        first(delete_read_first["C"], delete_read_first["D"], "after-data-files")
        setup = ("id = 7", lambda r: r[0] == 7) if mode == "merge-on-read" else None  # an input with a vector
        rounds += [Round(mode, o, setup=base, setup_filter=setup) for o in (compaction_read_first,
                                                                            delete_read_first, ops())]
    outcomes = race(local_catalog, rounds)

    for n, (rnd, outcome) in enumerate(zip(rounds, outcomes)):
        assert outcome["D"].ok, outcome["D"].value
        [(status, compaction_snapshot, error)] = outcome["C"].value["groups"]
        snapshots = {outcome["D"].snapshot_id: "D"}
        if status == "committed":
            snapshots[compaction_snapshot] = "C"
        else:
            assert status == "conflict", (status, error)
            # At its commit (ROWDEL-4, COMMIT-9), or before its rewrite when the delete came first (COMPACT-34).
            assert any(m in error for m in ("ROWDEL-4", "no longer in the table", "removed since planning")), error
        t, order = check_round(local_catalog, rnd, outcome, snapshots)
        if n % 3 == 0:
            assert status == "conflict"                     # its input changed after it was read
        if n % 3 == 1:
            assert order == ["C", "D"]                      # the delete was planned again over the output
            assert t.snapshot(outcome["D"].snapshot_id).parent_snapshot_id == compaction_snapshot
        assert t.scan("id IN (1, 35, 70, 100, 150, 179)").count() == 0
        referenced = {f.path for s in t.snapshots() for f in t.plan_files(snapshot_id=s.snapshot_id)}
        assert data_files_on_disk(t) == referenced, "a failed group's outputs or a lost attempt's files are left"
        if order == ["C", "D"] and rnd.mode == "merge-on-read":
            [out] = t.plan_files()                          # the output, with the delete's vector on it
            assert out.deleted_record_count == len(gone) and "compact" in out.path


# -- 3. appends racing a delete and an upsert ------------------------------------------------------------
def test_appends_never_conflict_with_deletes_and_upserts(local_catalog):
    """ROWDEL-10: every append commits. The delete either commits or fails because an append (or a
    copy-on-write upsert's rewritten rows) added rows matching its filter (COMMIT-10); the upsert replans
    over anything and commits (ROWDEL-5, ROWDEL-9); in every case the rows are those of the commits in order."""
    base = [[(f * 25 + i, "d" if i % 5 == 0 else "b", 0, f"f{f}") for i in range(25)] for f in range(4)]
    upserted = [(k, "u", 2, "upsert") for k in (0, 1, 2, 50, 300, 301)]

    def ops() -> dict[str, Op]:
        return {
            "A1": Op("append", [(200 + i, "a", 1, "a1") for i in range(10)] + [(300, "a", 1, "a1")]),
            "A2": Op("append", [(210 + i, "d", 1, "a2") for i in range(5)]),
            "D": Op("delete", "grp = 'd'", lambda r: r[1] == "d"),
            "U": Op("upsert", upserted),
        }

    forced = ops()  # A2 adds rows matching the delete's filter after the delete planned
    first(forced["A2"], forced["D"], "after-data-files")
    rounds = [Round("merge-on-read", forced, setup=base)] + [Round(mode, ops(), setup=base) for mode in MODES]
    outcomes = race(local_catalog, rounds)

    for rnd, outcome in zip(rounds, outcomes):
        for role in ("A1", "A2", "U"):
            assert outcome[role].ok, (role, outcome[role].value)
        if not outcome["D"].ok:
            conflict_of(outcome["D"], "may hold rows matching")
        t, order = check_round(local_catalog, rnd, outcome)
        ids = Counter(t.scan().to_arrow().column("id").to_pylist())
        assert ids[301] == 1                                # only the upsert wrote key 301
        assert ids[300] == (2 if order.index("U") < order.index("A1") else 1)  # appends are not keyed
        if rnd.ops["D"].pause is not None and not outcome["D"].ok:  # named: A2, or U's rewritten 'd' rows
            assert any(str(outcome[r].snapshot_id) in outcome["D"].value["message"] for r in ("A2", "U"))


# -- 4. upserts racing deletes and each other ------------------------------------------------------------
def test_upserts_racing_deletes_and_upserts_of_the_same_keys(local_catalog):
    """ROWDEL-19: an upsert whose rows were deleted after it read them replans and inserts them again;
    a delete whose keys an upsert rewrote meanwhile conflicts or replans; three-way races leave one
    row per key (ROWDEL-9) and the rows of the commits in order."""
    base = [[(f * 20 + i, "b", 0, f"f{f}") for i in range(20)] for f in range(3)]

    def ops(u1: tuple[int, ...], u2: tuple[int, ...] = (), gone: set[int] = frozenset()) -> dict[str, Op]:
        out = {"U1": Op("upsert", [(k, "u", 1, "u1") for k in u1]),
               "D": Op("delete", f"id IN ({', '.join(map(str, sorted(gone)))})", lambda r: r[0] in gone)}
        if u2:
            out["U2"] = Op("upsert", [(k, "u", 2, "u2") for k in u2])
        return out

    rounds = []
    for mode in MODES:
        upsert_read_first = ops((5, 25, 45, 70), gone={5, 25, 26})
        first(upsert_read_first["D"], upsert_read_first["U1"], "after-data-files")
        delete_read_first = ops((5, 25, 45, 70), gone={5, 25, 26})
        first(delete_read_first["U1"], delete_read_first["D"], "after-data-files")
        free = ops((5, 25, 45, 70, 71), (25, 45, 46, 71, 72), {45, 46, 10})
        rounds += [Round(mode, o, setup=base) for o in (upsert_read_first, delete_read_first, free)]
    outcomes = race(local_catalog, rounds)

    for n, (rnd, outcome) in enumerate(zip(rounds, outcomes)):
        assert all(outcome[r].ok for r in outcome if r != "D"), outcome
        if not outcome["D"].ok:
            conflict_of(outcome["D"], "may hold rows matching")
        t, order = check_round(local_catalog, rnd, outcome)
        ids = Counter(t.scan().to_arrow().column("id").to_pylist())
        assert set(ids.values()) == {1}                     # never two rows for one key
        if n % 3 == 0:
            assert order == ["D", "U1"]                     # planned again: 5 and 25 are inserted anew
            summary = outcome["U1"].value["summary"]
            assert (summary["lakefmt.rows-updated"], summary["lakefmt.rows-inserted"]) == ("1", "3")


# -- 5. erasure racing an append of matching rows --------------------------------------------------------
def test_erase_racing_an_append_reports_the_truth(local_catalog):
    """ROWDEL-15, ROWDEL-17: rows appended before the erasure's snapshot are erased (it replans over
    them); rows committed after it are not, and the report never claims a file holding one is clean:
    a file still being written is pending, and a matching file committed before the verification
    fails the erasure naming it."""
    base = [[(f * 20 + i, "x" if i % 10 == 3 else "b", 0, f"f{f}") for i in range(20)] for f in range(3)]
    appended = [(100 + i, "x", 1, "late") for i in range(5)] + [(105, "b", 1, "late"), (106, "b", 1, "late")]
    matching = {r[0] for rs in base for r in rs if r[1] == "x"} | set(range(100, 105))

    def ops() -> dict[str, Op]:
        return {"E": Op("erase", "grp = 'x'", lambda r: r[1] == "x"), "A": Op("append", appended)}

    append_before_commit, append_in_flight, append_before_verify = ops(), ops(), ops()
    first(append_before_commit["A"], append_before_commit["E"], "after-data-files")
    first(append_in_flight["E"], append_in_flight["A"], "after-data-files")
    first(append_before_verify["A"], append_before_verify["E"], "expire-before-commit")
    rounds = [Round("merge-on-read", o, setup=base) for o in (append_before_commit, append_in_flight,
                                                             append_before_verify, ops())]
    outcomes = race(local_catalog, rounds)

    for n, (rnd, outcome) in enumerate(zip(rounds, outcomes)):
        assert outcome["A"].ok, outcome["A"].value
        appended_at = outcome["A"].snapshot_id
        erase_log = [r for r in local_catalog.commit_log(rnd.identifier)
                     if r.summary.get("lakefmt.row-operation") == "erase"]
        [erased_at] = [r.snapshot_id for r in erase_log]
        t, order = check_round(local_catalog, rnd, outcome, {erased_at: "E", appended_at: "A"})
        appended_files = {f.path for f in t.plan_files(snapshot_id=appended_at)} - {
            f.path for f in t.plan_files(snapshot_id=erased_at)} if order == ["E", "A"] else set()
        stored = files_holding(t, matching)
        assert n == 3 or order == (["A", "E"] if n == 0 else ["E", "A"])  # the forced orders happened
        if order == ["A", "E"]:                              # appended first: erased too, from storage as well
            assert outcome["E"].ok, outcome["E"].value
            report = outcome["E"].value["report"]
            assert report.proven and report.snapshot_id == erased_at and not stored, (report, stored)
            assert t.scan("grp = 'x'").count() == 0
            continue
        assert set(stored) == appended_files                 # committed after the erasure: not erased
        if not outcome["E"].ok:                              # committed before it verified: no false proof
            assert outcome["E"].value["type"] == "ErasureVerificationError", outcome["E"].value
            assert any(p in outcome["E"].value["message"] for p in appended_files)
            assert n != 1
            continue
        report = outcome["E"].value["report"]
        assert report.snapshot_id == erased_at and report.rescan_rows == 0
        pending = {p.path: p for p in report.pending}
        assert not set(pending) - appended_files
        assert all(p.reason == "write-lease" and p.matching_rows == 5 for p in pending.values())
        assert not {c.path for c in report.checked} & appended_files  # never listed as clean
        for c in report.checked:                             # and everything it calls clean is
            assert c.path not in stored
        assert report.complete == (not pending) and report.proven == (not pending)
        if n == 1:
            assert set(pending) == appended_files and not report.complete
        if n == 2:
            pytest.fail("the append committed before the erasure verified, yet it reported success")


# -- 6. no erased value left in the manifests ------------------------------------------------------------
def deleted_entries(t: lakefmt.Table) -> list[dict]:
    """The DELETED entries (MAN-3) of every manifest the current snapshot reaches, read with pyarrow only."""
    t.refresh()
    listing = pq.read_table(f"{t.location}/{t.current_snapshot().manifest_list}")
    out = []
    for path in listing.column("manifest_path").to_pylist():
        entries = pq.read_table(f"{t.location}/{path}").select(["status", "file_path", "lower_bounds",
                                                                 "upper_bounds"])
        out += [{**e, "manifest": path} for e in entries.to_pylist() if e["status"] == 2]
    return out


def test_erasure_manifests_carry_no_bounds_of_removed_files(local_catalog):
    """ROWDEL-17: the erasure's DELETED entries have no bounds, and no DELETED entry an earlier commit
    left (with the bounds of a file that held erased rows) stays in a manifest the current snapshot reaches."""
    t = local_catalog.create_table("race.bounds", SCHEMA, partition_by=["grp"])
    for start in (0, 40):  # one manifest per append, one file per group
        t.append(table_of([(i, f"g{i // 10 % 4}", 0, "x") for i in range(start, start + 40)]))
    t.set_property("write.delete.mode", "copy-on-write")
    t.delete("id = 3")                  # the rewrite leaves a DELETED entry, with bounds, in the first manifest
    t.set_property("write.delete.mode", "merge-on-read")
    t.delete("id = 52")                 # a vector in the second manifest's g1 file
    assert [bool(e["lower_bounds"]) for e in deleted_entries(t)] == [True]

    report = t.erase("id IN (0, 45)")   # 0: the rewritten g0 file and the old one; 45: the second manifest

    assert report.proven and report.matched_rows == 2
    assert {e["file_path"] for e in deleted_entries(t)} == set(report.files_rewritten)
    assert not [e for e in deleted_entries(t) if e["lower_bounds"] or e["upper_bounds"]]
    assert rows(t.scan().to_arrow()) == multiset(
        [(i, f"g{i // 10 % 4}", 0, "x") for i in range(80) if i not in (0, 3, 45, 52)])
