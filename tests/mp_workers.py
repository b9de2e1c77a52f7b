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
