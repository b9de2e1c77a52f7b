"""An executable model of lakefmt's commit protocol, to read next to the spec.

Pure Python, no I/O: a catalog pointer, immutable metadata versions, data files with
deletion vectors, and actors (writers, compaction, expiry, readers) that take one step
at a time. After every step ``invariants.py`` checks what the spec promises (README.md
beside this file maps each step and invariant to spec IDs):

- I1 the history is linear;
- I2 no acknowledged commit is lost, and an operation that failed committed nothing;
- I3 a reader sees exactly one committed snapshot;
- I4 no deleted row comes back: the table holds exactly the rows of the acknowledged
  commits applied one after the other, in commit order;
- I5 no file that a retained snapshot needs is deleted.

``explore.py`` generates scenarios and plays them (``python spec/model/explore.py 7``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

Row = tuple[int, int]          # (x, uid): filters test x; uid makes every row ever written unique
Vector = frozenset[int]        # deleted positions of one data file (DV-9)
RETRIES = 20                   # commit.retry.num-retries (META-12)


# -- immutable things: data files, snapshots, metadata files -----------------------------------------------
@dataclass(frozen=True)
class DataFile:
    name: str
    rows: tuple[Row, ...]      # row i is at position i (DV-2)

    @property
    def bounds(self) -> tuple[int, int]:
        """Statistics of x over every row, deleted ones included (WRITE-6, MAN-7)."""
        xs = [x for x, _ in self.rows]
        return min(xs), max(xs)


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None      # the current snapshot of the base (COMMIT-4)
    operation: str             # append, delete, overwrite, replace (SNAP-4)
    files: dict[str, Vector]   # live data files and their vectors (ML-5, DV-5)
    added: frozenset[str]      # files ADDED by this snapshot (MAN-4), which COMMIT-10 looks at

    @property
    def manifest_list(self) -> str:
        return f"list-{self.snapshot_id}"   # a fresh manifest list per snapshot (COMMIT-4)


@dataclass(frozen=True)
class Metadata:
    """One metadata file (COMMIT-5), never changed once written (LAYOUT-4)."""

    location: str
    version: int               # LAYOUT-9
    current: int | None
    snapshots: dict[int, Snapshot]   # the retained snapshots

    @property
    def current_snapshot(self) -> Snapshot | None:
        return self.snapshots.get(self.current) if self.current is not None else None

    def ancestors(self) -> list[int]:
        """The current snapshot and its retained ancestors, newest first."""
        out, sid = [], self.current
        while sid in self.snapshots:
            out.append(sid)
            sid = self.snapshots[sid].parent_id
        return out


# -- operations ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Append:
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Delete:
    """Merge-on-read delete of the rows with lo <= x <= hi (ROWDEL-2)."""
    lo: int
    hi: int


@dataclass(frozen=True)
class Overwrite:
    """Delete lo <= x <= hi and add ``rows`` (each matching the filter) in one snapshot (ROWDEL-2)."""
    lo: int
    hi: int
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Compact:
    """Replace every live file by one file of their live rows (COMMIT-17, ROWDEL-11)."""


@dataclass(frozen=True)
class Expire:
    """Remove every snapshot but the current one (MAINT-3 with retain_last = 1)."""


@dataclass(frozen=True)
class Read:
    """Load the pointer, and read the rows in a later step (READ-1)."""


Op = Append | Delete | Overwrite | Compact | Expire | Read


def matches(op: Delete | Overwrite, row: Row) -> bool:
    return op.lo <= row[0] <= op.hi


def serial_effect(op: Op, rows: Counter) -> Counter:
    """What an operation does to the rows when it runs alone: the reference of I4."""
    out = Counter(rows)
    if isinstance(op, (Delete, Overwrite)):
        out = Counter({r: n for r, n in out.items() if not matches(op, r)})
    if isinstance(op, (Append, Overwrite)):
        out.update(op.rows)
    return out                 # Compact and Expire keep the rows (COMMIT-17, MAINT-4)


@dataclass
class Change:
    """A planned change of the live file set, like lakefmt's FileChange (COMMIT-3, ROWDEL-2)."""

    operation: str
    added: list[DataFile] = field(default_factory=list)
    removed: dict[str, Vector] = field(default_factory=dict)                 # file -> vector as read
    deletes: dict[str, tuple[Vector, Vector]] = field(default_factory=dict)  # file -> (as read, new)
    filter: Delete | Overwrite | None = None                                 # COMMIT-10
    planned: int | None = None                                               # P of COMMIT-7


@dataclass(frozen=True)
class Conflict:
    rule: str
    replan: bool               # a row-level operation plans again over C (ROWDEL-5)


class Step(NamedTuple):
    actor: str
    step: str                  # load, build, swap, rebuild, read
    op: str
    outcome: tuple | None      # how the operation ended at this step, if it did


@dataclass
class Actor:
    name: str
    ops: list[Op]
    index: int = 0                         # the operation under way
    step: str = "load"                     # its next step
    base: Metadata | None = None
    change: Change | None = None
    expired: frozenset[int] = frozenset()  # E of an expiry
    attempt: Metadata | None = None        # the metadata file of the current attempt
    retries: int = RETRIES
    outcomes: list[tuple] = field(default_factory=list)  # ("ok", snapshot or rows), ("conflict", rule), ...

    @property
    def op(self) -> Op | None:
        return self.ops[self.index] if self.index < len(self.ops) else None


# -- the model ---------------------------------------------------------------------------------------------------
class Model:
    """Catalog, storage and actors. With ``locked`` a writer whose swap would lose checks and rebuilds
    under the catalog lock, so its swap cannot lose again (CAT-6, COMMIT-7), as lakefmt does; without
    it the writer rebuilds in a step of its own and may lose again."""

    def __init__(self, setup: list[tuple[Row, ...]], actors: dict[str, list[Op]], *, locked: bool = True):
        self.locked = locked
        self.storage: dict[str, DataFile] = {}      # data files in storage
        self.lists: set[str] = set()                # manifest lists in storage
        self.metadata: dict[str, Metadata] = {}     # metadata files in storage
        self.log: list[tuple[str, str, str, int]] = []   # commit log (CAT-5): old, new, actor, op index
        self.counter = 0
        self.pointer = self.created = self.write_metadata(None, None, {}).location
        self.expected: Counter = Counter()          # the acknowledged commits applied serially (I4)
        self.rows_at: dict[int | None, Counter] = {None: Counter()}   # snapshot -> rows when committed (I3)
        self.deleted: set[int] = set()              # uids an acknowledged commit deleted (I4)
        self.reads: list[tuple[int | None, Counter]] = []   # (snapshot loaded, rows read)
        self.trace: list[Step] = []
        self.seen: Counter = Counter()              # rules that fired: what an exploration reached
        setup_actor = Actor("setup", [Append(rows) for rows in setup])
        for _ in setup:
            for step in ("load", "build", "swap"):
                self.take(setup_actor, step)
        self.trace.clear()
        self.actors = {name: Actor(name, list(ops)) for name, ops in actors.items()}

    # -- catalog and storage --------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def write_metadata(self, base: Metadata | None, current: int | None, snapshots: dict[int, Snapshot]) -> Metadata:
        """COMMIT-5: version N+1 of the base, under a fresh name (LAYOUT-9)."""
        meta = Metadata(self.fresh("v"), base.version + 1 if base else 1, current, snapshots)
        self.metadata[meta.location] = meta
        return meta

    def load(self) -> Metadata:
        """COMMIT-1, CAT-17: read the pointer and the metadata file it names."""
        return self.metadata[self.pointer]

    def cas(self, expected: str, new: str) -> bool:
        """CAT-4: move the pointer only if it still names ``expected``."""
        if self.pointer != expected:
            return False
        self.pointer = new
        return True

    def rows_of(self, snapshot: Snapshot | None) -> Counter | None:
        """The live rows of a snapshot (READ-14), or None when a file it needs is gone (READ-10)."""
        if snapshot is None:
            return Counter()
        if snapshot.manifest_list not in self.lists or any(f not in self.storage for f in snapshot.files):
            return None
        return Counter(r for name, vector in snapshot.files.items()
                       for pos, r in enumerate(self.storage[name].rows) if pos not in vector)

    def new_file(self, rows: tuple[Row, ...], kind: str) -> DataFile:
        """COMMIT-2: written before the commit, visible only once a swap commits it."""
        f = DataFile(self.fresh(kind), rows)
        self.storage[f.name] = f
        return f

    # -- planning on the base (COMMIT-2, ROWDEL-2, COMMIT-17) ---------------------------------------------------
    def plan(self, op: Op, base: Metadata, added: list[DataFile]) -> Change | None:
        """The change ``op`` makes to ``base``; None when there is nothing to commit (COMMIT-18)."""
        live = base.current_snapshot.files if base.current_snapshot else {}
        if isinstance(op, Append):
            return Change("append", added=added)
        if isinstance(op, Compact):
            if len(live) < 2 and not any(live.values()):
                return None                    # rewriting one file without deletes changes nothing
            rows = self.rows_of(base.current_snapshot)
            return Change("replace", added=[self.new_file(tuple(rows.elements()), "c")], removed=dict(live))
        assert isinstance(op, (Delete, Overwrite))
        change = Change(type(op).__name__.lower(), added=added, filter=op, planned=base.current)
        for name, as_read in live.items():
            f = self.storage[name]
            lo, hi = f.bounds
            if hi < op.lo or lo > op.hi:
                continue                       # EXPR-8: cannot hold a matching row
            if op.lo <= lo and hi <= op.hi:
                change.removed[name] = as_read   # EXPR-9: every row matches; removed whole
                continue
            new = frozenset(p for p, r in enumerate(f.rows) if matches(op, r)) - as_read
            if not new:
                continue                       # no live row matches: kept as it is
            if len(as_read | new) == len(f.rows):
                change.removed[name] = as_read   # DV-7: no live row left
            else:
                change.deletes[name] = (as_read, as_read | new)
        if isinstance(op, Delete) and not change.removed and not change.deletes:
            return None
        return change

    # -- building on a base, and rebuilding on C (COMMIT-3..5, COMMIT-7..10, ROWDEL-3..5) -------------------------
    def check_filter(self, change: Change, c: Metadata) -> Conflict | None:
        """COMMIT-10: no snapshot committed since P may have added a row matching the filter."""
        if change.filter is None or c.current == change.planned:
            return None
        chain = c.ancestors()
        if change.planned is not None and change.planned not in chain:   # e.g. P was expired meanwhile
            return Conflict("COMMIT-10: P is no longer an ancestor of the current snapshot", replan=False)
        for sid in chain[:chain.index(change.planned)] if change.planned is not None else chain:
            snap = c.snapshots[sid]
            if snap.operation == "replace":
                continue                       # compaction adds no row (COMMIT-17)
            for name in snap.added:
                lo, hi = self.storage[name].bounds
                if not (hi < change.filter.lo or lo > change.filter.hi):
                    return Conflict(f"COMMIT-10: a concurrent {snap.operation} added {name}", replan=False)
        return None

    def check_removed(self, name: str, as_read: Vector, files: dict[str, Vector]) -> Conflict | None:
        """COMMIT-9, ROWDEL-4: a removed file is still live, with the vector it was read with."""
        if name not in files:
            return Conflict(f"COMMIT-9: {name} is no longer live", replan=True)
        if files[name] != as_read:
            return Conflict(f"ROWDEL-4: the vector of {name} changed", replan=True)
        return None

    def merge_vectors(self, new: Vector, live: Vector) -> Vector:
        """ROWDEL-3: keep the positions another commit deleted since the file was read (DV-9)."""
        return new | live

    def rebase(self, change: Change, c: Metadata) -> dict[str, Vector] | Conflict:
        """The live files after ``change`` is applied to C, or why it conflicts (COMMIT-7)."""
        conflict = self.check_filter(change, c)
        if conflict:
            return conflict
        files = dict(c.current_snapshot.files) if c.current_snapshot else {}
        for name, as_read in change.removed.items():
            conflict = self.check_removed(name, as_read, files)
            if conflict:
                return conflict
            del files[name]
        for name, (as_read, new) in change.deletes.items():
            if name not in files:
                return Conflict(f"ROWDEL-5: {name} is no longer live", replan=True)
            if files[name] != as_read:
                self.seen["ROWDEL-3"] += 1
                new = self.merge_vectors(new, files[name])
            if len(new) == len(self.storage[name].rows):
                del files[name]                # DV-7
            else:
                files[name] = new
        files.update((f.name, frozenset()) for f in change.added)
        return files

    def build(self, actor: Actor, base: Metadata) -> bool:
        """Write the attempt's metadata file on ``base``; False when the operation ended instead."""
        op = actor.op
        if isinstance(op, Expire):             # MAINT-4: re-applied to C; ids C lacks are ignored
            if base.current in actor.expired:
                return self.finish(actor, ("conflict", "MAINT-4: an expired snapshot is current"))
            kept = {s: snap for s, snap in base.snapshots.items() if s not in actor.expired}
            actor.base, actor.attempt = base, self.write_metadata(base, base.current, kept)
            return True
        for _ in range(RETRIES + 1):
            files = self.rebase(actor.change, base)
            if not isinstance(files, Conflict):
                break
            self.seen[files.rule.split(":")[0]] += 1
            if not (files.replan and isinstance(op, (Delete, Overwrite))):
                return self.finish(actor, ("conflict", files.rule))
            self.seen["replan"] += 1           # ROWDEL-5: its rows are found anew in C
            actor.change = self.plan(op, base, actor.change.added)
            if actor.change is None:
                return self.finish(actor, ("nothing",))
        else:
            return self.finish(actor, ("conflict", "retries exhausted"))
        sid = int(self.fresh(""))
        snap = Snapshot(sid, base.current, actor.change.operation, files, frozenset(f.name for f in actor.change.added))
        self.lists.add(snap.manifest_list)
        actor.base, actor.attempt = base, self.write_metadata(base, sid, {**base.snapshots, sid: snap})
        return True

    # -- steps -------------------------------------------------------------------------------------------------
    def step(self, name: str) -> bool:
        """Take the next step of actor ``name``; False if it has finished every operation."""
        actor = self.actors[name]
        if actor.op is None:
            return False
        self.take(actor, actor.step)
        return True

    def take(self, actor: Actor, step: str) -> None:
        op, done = actor.op, len(actor.outcomes)
        if step == "load":
            actor.base, actor.step = self.load(), "read" if isinstance(op, Read) else "build"
        elif step == "read":
            rows = self.read_rows(actor)
            self.reads.append((actor.base.current, rows))
            self.finish(actor, ("ok", rows) if rows is not None else ("error", "READ-10: a file is missing"))
        elif step == "build":
            self.step_build(actor, op)
        elif step == "swap":
            self.step_swap(actor)
        elif step == "rebuild" and self.build(actor, self.load()):
            actor.step = "swap"
        self.trace.append(Step(actor.name, step, type(op).__name__,
                               actor.outcomes[-1] if len(actor.outcomes) > done else None))

    def read_rows(self, actor: Actor) -> Counter | None:
        """READ-1: the metadata loaded at the start and nothing else, whatever was committed since."""
        return self.rows_of(actor.base.current_snapshot)

    def step_build(self, actor: Actor, op: Op) -> None:
        if isinstance(op, Expire):
            base = self.load()                 # MAINT-3: chosen from the current metadata
            actor.expired = frozenset(base.snapshots) - {base.current}
            if not actor.expired:
                self.finish(actor, ("nothing",))
            elif self.build(actor, base):
                actor.step = "swap"
            return
        base_gone = self.rows_of(actor.base.current_snapshot) is None   # an expiry deleted its files
        if base_gone and not isinstance(op, Append):
            self.seen["expired base"] += 1
            self.finish(actor, ("error", "READ-10: the snapshot it reads was expired"))
            return
        added = [self.new_file(op.rows, "f")] if isinstance(op, (Append, Overwrite)) else []
        actor.change = self.plan(op, actor.base, added)
        if actor.change is None:
            self.finish(actor, ("nothing",))
        elif base_gone:                        # an append builds on the current base instead (ROWDEL-10)
            actor.step = "swap" if self.locked else "rebuild"
        elif self.build(actor, actor.base):
            actor.step = "swap"

    def step_swap(self, actor: Actor) -> None:
        """COMMIT-6; when the pointer moved, COMMIT-7 (in this step if ``locked``, else in a later one)."""
        while not (actor.attempt and self.cas(actor.base.location, actor.attempt.location)):
            self.seen["lost swap"] += 1
            if self.locked:
                if not self.build(actor, self.load()):
                    return
                continue
            actor.retries -= 1                 # COMMIT-13
            if actor.retries < 0:
                self.finish(actor, ("error", "COMMIT-13: retries exhausted"))
            else:
                actor.step = "rebuild"
            return
        self.log.append((actor.base.location, actor.attempt.location, actor.name, actor.index))
        if isinstance(actor.op, Expire):
            self.delete_expired(actor.base, actor.attempt, actor.expired)
            self.finish(actor, ("ok", None))
            return
        before = {uid for _, uid in self.expected}
        self.expected = serial_effect(actor.op, self.expected)
        self.deleted |= before - {uid for _, uid in self.expected}
        self.rows_at[actor.attempt.current] = Counter(self.expected)
        self.finish(actor, ("ok", actor.attempt.current))

    def delete_expired(self, base: Metadata, committed: Metadata, expired: frozenset[int]) -> None:
        """MAINT-5: after the swap, delete what only E reaches, judged against the committed metadata."""
        referenced = {name for snap in committed.snapshots.values() for name in snap.files}
        for snap in (base.snapshots[sid] for sid in expired if sid in base.snapshots):
            self.lists.discard(snap.manifest_list)
            for name in set(snap.files) - referenced:
                self.storage.pop(name, None)

    def finish(self, actor: Actor, outcome: tuple) -> bool:
        """End the operation under way with ``outcome``; returns False for ``build``'s callers."""
        actor.outcomes.append(outcome)
        actor.index, actor.step, actor.retries = actor.index + 1, "load", RETRIES
        actor.base = actor.change = actor.attempt = None
        return False
