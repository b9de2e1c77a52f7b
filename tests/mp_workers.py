"""Entry points for the real worker processes of test_multiprocess.py (kept light to import under spawn)."""

from __future__ import annotations

import traceback
from typing import Any

import pyarrow as pa

ROWS_PER_APPEND = 2
TAGGED_SCHEMA = pa.schema([pa.field("proc", pa.int32(), nullable=False), pa.field("i", pa.int32(), nullable=False),
                           pa.field("k", pa.int32(), nullable=False), pa.field("payload", pa.string())])


def tagged_rows(proc: int, i: int) -> pa.Table:
    return pa.table({
        "proc": pa.array([proc] * ROWS_PER_APPEND, pa.int32()),
        "i": pa.array([i] * ROWS_PER_APPEND, pa.int32()),
        "k": pa.array(range(ROWS_PER_APPEND), pa.int32()),
        "payload": [f"p{proc}-i{i}-k{k}" for k in range(ROWS_PER_APPEND)],
    }, schema=TAGGED_SCHEMA)


def append_many(warehouse: str, identifier: str, proc: int, count: int, barrier: Any, results: Any) -> None:
    """Append ``count`` tagged batches, one snapshot each, through one table handle."""
    try:
        import lakefmt

        table = lakefmt.Catalog(warehouse).load_table(identifier)
        barrier.wait(timeout=120)
        for i in range(count):
            table.append(tagged_rows(proc, i))
        results.put(("ok", proc, ""))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(("error", proc, traceback.format_exc()))


def run_operation(warehouse: str, identifier: str, operation: str, arg: Any, barrier: Any, results: Any) -> None:
    """One write in its own process: ``append`` (arg = Arrow IPC bytes) or ``delete`` (arg = filter)."""
    try:
        import lakefmt

        table = lakefmt.Catalog(warehouse).load_table(identifier)
        if barrier is not None:
            barrier.wait(timeout=120)
        if operation == "append":
            snap = table.append(pa.ipc.open_stream(arg).read_all())
        elif operation == "delete":
            snap = table.delete(arg)
        else:
            raise ValueError(operation)
        results.put(("ok", operation, snap.snapshot_id if snap else None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", operation, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


# -- scripted racers for test_row_delete_races.py ---------------------------------------------------
SYNC_TIMEOUT = 120


def race_steps(warehouse: str, role: str, steps: list[dict], sync: dict[str, Any], barrier: Any,
               results: Any) -> None:
    """Run one step per round, every round starting from the shared ``barrier``; report each outcome.

    A step is ``{"table", "op", "arg"}`` with optional synchronization, all named in ``sync``
    (multiprocessing events and barriers): ``wait`` (an event to wait for before the table is
    loaded), ``pause`` (``("event", point, reached, resume)``: the first time the operation reaches
    ``point`` of :mod:`lakefmt.hooks`, set ``reached`` and wait for ``resume``; ``("meet", point,
    barrier)``: wait there for the peers) and ``done`` (an event set when the step ends, however).
    """
    try:
        import lakefmt
        import lakefmt.compaction.commits  # imported so that their checkpoints can be paused
        import lakefmt.maintenance.erase

        catalog = lakefmt.Catalog(warehouse)
    except BaseException:  # noqa: BLE001 - reported to the parent
        barrier.abort()
        results.put(("error", role, -1, {"type": "setup", "message": traceback.format_exc()}))
        return
    for n, step in enumerate(steps):
        barrier.wait(timeout=SYNC_TIMEOUT)
        results.put(_race_step(catalog, role, n, step, sync))


def _race_step(catalog: Any, role: str, n: int, step: dict, sync: dict[str, Any]) -> tuple:
    fired: list[str] = []
    try:
        if step["op"] == "idle":
            return ("ok", role, n, {})
        if step.get("wait") and not sync[step["wait"]].wait(SYNC_TIMEOUT):
            raise TimeoutError(f"{role}: {step['wait']} was never set")
        table = catalog.load_table(step["table"])
        with _paused_at(step.get("pause"), sync, fired):
            outcome = _RACE_OPERATIONS[step["op"]](table, step.get("arg"))
        return ("ok", role, n, {**outcome, "paused": bool(fired)})
    except BaseException as exc:  # noqa: BLE001 - an expected outcome of some races; the parent judges
        return ("error", role, n, {"type": type(exc).__name__, "message": str(exc), "paused": bool(fired),
                                   "traceback": traceback.format_exc()})
    finally:
        pause = step.get("pause")
        if pause and not fired:  # never reached: release the peers instead of leaving them waiting
            if pause[0] == "event":
                sync[pause[2]].set()
            else:
                sync[pause[2]].abort()
        if step.get("done"):
            sync[step["done"]].set()


class _paused_at:
    """Make the first ``checkpoint(point)`` of this process wait on multiprocessing primitives.

    :func:`lakefmt.hooks.checkpoint` is the library's seam for interleaving real processes; its
    modules import it by name, so each module's binding is swapped for the time of one step.
    """

    def __init__(self, pause: tuple | None, sync: dict[str, Any], fired: list[str]) -> None:
        self.pause, self.sync, self.fired = pause, sync, fired
        self.modules: list[Any] = []

    def _checkpoint(self, name: str) -> None:
        kind, point, *names = self.pause  # type: ignore[misc]
        if name != point or self.fired:
            return
        self.fired.append(name)
        if kind == "meet":
            self.sync[names[0]].wait(timeout=SYNC_TIMEOUT)
            return
        self.sync[names[0]].set()
        if not self.sync[names[1]].wait(SYNC_TIMEOUT):
            raise TimeoutError(f"paused at {point}: {names[1]} was never set")

    def __enter__(self) -> Any:
        import sys

        import lakefmt.hooks

        if self.pause is not None:
            self.original = lakefmt.hooks.checkpoint
            self.modules = [m for name, m in list(sys.modules.items())
                            if name.startswith("lakefmt") and getattr(m, "checkpoint", None) is self.original]
            for m in self.modules:
                m.checkpoint = self._checkpoint
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self.modules:
            m.checkpoint = self.original


def _snapshot(snap: Any) -> dict:
    return {"snapshot_id": None if snap is None else snap.snapshot_id,
            "summary": {} if snap is None else dict(snap.summary)}


def _race_append(table: Any, arg: bytes) -> dict:
    return _snapshot(table.append(pa.ipc.open_stream(arg).read_all()))


def _race_delete(table: Any, arg: str) -> dict:
    return _snapshot(table.delete(arg))


def _race_upsert(table: Any, arg: tuple[bytes, list[str]]) -> dict:
    data, on = arg
    return _snapshot(table.upsert(pa.ipc.open_stream(data).read_all(), on=on))


def _race_compact(table: Any, arg: dict) -> dict:
    result = table.compaction.run("binpack", **arg)
    return {"groups": [(g.status, g.snapshot_id, g.error) for g in result.groups]}


def _race_erase(table: Any, arg: str) -> dict:
    return {"report": table.erase(arg)}


_RACE_OPERATIONS = {"append": _race_append, "delete": _race_delete, "upsert": _race_upsert,
                    "compact": _race_compact, "erase": _race_erase}


# -- one actor of the commit model, for tests/test_commit_model.py ------------------------------------------------
MODEL_PAUSE_POINTS = ("after-data-files", "expire-before-commit")


def model_actor(conn: Any) -> None:
    """Play the steps of one actor of spec/model/commit_model.py on real tables, as the parent asks.

    Each message is answered once. ``("load", warehouse, table)`` loads the table (COMMIT-1).
    ``("build", kind, arg)`` runs an operation on the loaded handle until it has planned and written
    its data files: at its first ``after-data-files`` or ``expire-before-commit`` point of
    :mod:`lakefmt.hooks`, before any catalog session of its commit, it answers ``("paused",)``
    and waits for ``("swap",)``, which lets it commit; either message is answered with
    ``("done", outcome)`` once the operation ends. ``("read",)`` scans the loaded snapshot. The
    manifest cache is cleared before every step, so that each step reads storage as a fresh
    process would.
    """
    import lakefmt
    import lakefmt.maintenance.expire  # imported so that its checkpoint can be paused
    from lakefmt import manifest_cache

    catalogs: dict[str, Any] = {}
    table = None
    while True:
        message = conn.recv()
        if message[0] == "stop":
            return
        manifest_cache.clear()
        if message[0] == "load":
            try:
                warehouse, identifier = message[1:]
                if warehouse not in catalogs:
                    catalogs[warehouse] = lakefmt.Catalog(warehouse)
                table = catalogs[warehouse].load_table(identifier)
                conn.send(("ok", table.metadata.current_snapshot_id))
            except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
                conn.send(("error", traceback.format_exc()))
        elif message[0] == "read":
            conn.send(("done", _model_outcome(_model_read, table)))
        elif message[0] == "build":
            kind, arg = message[1:]
            conn.send(("done", _paused_for_swap(conn, _MODEL_OPERATIONS[kind], table, arg)))
        else:
            conn.send(("error", f"unknown message {message!r}"))


def _model_outcome(run: Any, *args: Any) -> tuple:
    """``("ok", result)``, ``("nothing",)`` when the operation committed nothing, or how it failed."""
    from lakefmt.errors import CommitConflictError

    try:
        result = run(*args)
    except CommitConflictError as exc:
        return ("conflict", str(exc))
    except Exception as exc:  # noqa: BLE001 - an expected outcome of some interleavings; the parent judges
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("nothing",) if result is None else ("ok", result)


def _paused_for_swap(conn: Any, run: Any, *args: Any) -> tuple:
    """Run an operation that stops at its first point of MODEL_PAUSE_POINTS until the parent says swap."""
    import sys

    import lakefmt.hooks
    from lakefmt import manifest_cache

    original, fired = lakefmt.hooks.checkpoint, []

    def pause(point: str) -> None:
        if point in MODEL_PAUSE_POINTS and not fired:
            fired.append(point)
            conn.send(("paused",))
            message = conn.recv()
            if message != ("swap",):
                raise RuntimeError(f"paused at {point}, the parent sent {message!r} instead of swap")
            manifest_cache.clear()

    modules = [m for name, m in list(sys.modules.items())
               if name.startswith("lakefmt") and getattr(m, "checkpoint", None) is original]
    for m in modules:
        m.checkpoint = pause
    try:
        return _model_outcome(run, *args)
    finally:
        for m in modules:
            m.checkpoint = original


def _model_read(table: Any) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())


def _model_filter(lo: int, hi: int) -> str:
    return f"x >= {lo} AND x <= {hi}"


def _model_compact(table: Any, _: Any) -> int | None:
    """Replace every live file by one file of their live rows, as compaction commits a group (COMMIT-17)."""
    from lakefmt.commit import FileChange

    live = table.plan_files()
    if len(live) < 2 and all(f.deletion_vector is None for f in live):
        return None
    files = table.write_data_files(table.scan().to_arrow(), kind="compact")
    return table.commit_change(FileChange("replace", added=files, removed=live), cleanup_on_failure=files).snapshot_id


def _model_expire(table: Any, _: Any) -> int | None:
    """Expire every snapshot but the current one (MAINT-3, retain_last = 1)."""
    table.refresh()
    ids = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != table.metadata.current_snapshot_id]
    return len(table.maintenance.expire_snapshots(snapshot_ids=ids).expired_snapshot_ids) if ids else None


def _snapshot_id(snap: Any) -> int | None:
    return None if snap is None else snap.snapshot_id


_MODEL_OPERATIONS = {
    "append": lambda t, arg: _snapshot_id(t.append(pa.ipc.open_stream(arg).read_all())),
    "delete": lambda t, arg: _snapshot_id(t.delete(_model_filter(*arg))),
    "overwrite": lambda t, arg: _snapshot_id(t.overwrite(pa.ipc.open_stream(arg[2]).read_all(),
                                                         _model_filter(*arg[:2]))),
    "compact": _model_compact,
    "expire": _model_expire,
}
