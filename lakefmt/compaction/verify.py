"""Order-independent row checksums: outputs must hold exactly the input rows (COMPACT-17).

A checksum is ``(rows, sum of a 64-bit hash of each row, modulo 2**64)``. The sum does
not depend on row order or on how rows are split into batches and files, and unlike
an XOR it tells a duplicated row from a missing one. Row hashes come from DuckDB's
``hash(col, ...)`` (a core dependency, vectorized and fast); the hash function is an
implementation detail, but inputs and outputs of one group are always hashed by the
same process with the same function.

A local output file can be checksummed by DuckDB reading the Parquet file itself
(:func:`parquet_checksum`): DuckDB's decoder, independent of the pyarrow writer that
produced the file, and about half the CPU of decoding it with pyarrow and handing the
batches to DuckDB. It is used only when DuckDB types every column of the file exactly
as it types the Arrow rows the inputs were hashed from, so both sides hash the same
DuckDB values with the same function; otherwise the caller reads the file with pyarrow.

Example:
    >>> acc = RowChecksum()
    >>> for batch in batches: acc.update(batch)
    >>> acc.value
    Checksum(rows=3000, digest=1234...)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import duckdb
import pyarrow as pa

MASK64 = (1 << 64) - 1
_local = threading.local()
_base_lock = threading.Lock()
_base: list[duckdb.DuckDBPyConnection] = []


@dataclass(frozen=True)
class Checksum:
    """Row count and the order-independent digest of a multiset of rows."""

    rows: int
    digest: int

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(self.rows + other.rows, (self.digest + other.digest) & MASK64)

    def __str__(self) -> str:
        return f"{self.rows} rows, digest {self.digest:016x}"


EMPTY = Checksum(0, 0)


def _connection() -> duckdb.DuckDBPyConnection:
    """This thread's connection: a cursor of one in-memory database per process.

    A cursor costs about 0.5 ms, a new database about 15 ms: a run of many small groups
    would otherwise pay a database per rewrite thread.
    """
    con = getattr(_local, "con", None)
    if con is None:
        with _base_lock:
            if not _base:
                _base.append(duckdb.connect(config={"threads": 1}))
            con = _base[0].cursor()
        _local.con = con
    return con


def _hashable(data: pa.Table) -> pa.Table:
    """DuckDB cannot scan decimal256: such columns are hashed through their exact text."""
    columns, names = [], []
    for i, field in enumerate(data.schema):
        column = data.column(i)
        if pa.types.is_decimal256(field.type):
            column = column.cast(pa.string())
        columns.append(column)
        names.append(f"c{i}")
    return pa.Table.from_arrays(columns, names=names)


def checksum(data: pa.Table | pa.RecordBatch) -> Checksum:
    """The checksum of the rows of ``data`` (every column, in schema order)."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if data.num_rows == 0:
        return EMPTY
    if data.num_columns == 0:
        return Checksum(data.num_rows, 0)
    rows_table = _hashable(data)
    args = ", ".join(f"c{i}" for i in range(rows_table.num_columns))
    con = _connection()
    con.register("lakefmt_rows", rows_table)
    try:
        ((count, total),) = con.execute(f"SELECT count(*), sum(hash({args})) FROM lakefmt_rows").fetchall()
    finally:
        con.unregister("lakefmt_rows")
    return Checksum(int(count), int(total or 0) & MASK64)


def parquet_checksum(path: str, schema: pa.Schema) -> Checksum | None:
    """The checksum of the local Parquet file ``path`` as DuckDB decodes it, or None (COMPACT-17).

    ``schema`` is the Arrow schema the file was written with. None means DuckDB would
    type some column differently from how :func:`checksum` types the Arrow rows (for
    example a decimal wider than 38 digits), so the digests could not be compared:
    the caller must then read the file itself.
    """
    if not schema.names or any(c in path for c in "*?[]{}"):
        return None  # DuckDB would read a path with glob characters as a pattern
    con = _connection()
    arrow_side = con.from_arrow(_hashable(schema.empty_table()))
    file_side = con.read_parquet(path, hive_partitioning=False)
    if [str(t) for t in file_side.types] != [str(t) for t in arrow_side.types] or \
            file_side.columns != list(schema.names):
        return None
    args = ", ".join('"' + name.replace('"', '""') + '"' for name in schema.names)
    ((count, total),) = con.execute(
        f"SELECT count(*), sum(hash({args})) FROM read_parquet(?, hive_partitioning = false)", [path]).fetchall()
    return Checksum(int(count), int(total or 0) & MASK64)


class RowChecksum:
    """Accumulates the checksum of a stream of batches (thread-safe).

    Small batches are buffered and hashed together, a few hundred thousand rows at a
    time, so a stream of tiny files costs few hash queries.
    """

    def __init__(self, *, buffer_rows: int = 262_144) -> None:
        self._lock = threading.Lock()
        self._total = EMPTY
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.buffer_rows = buffer_rows

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        """Add rows; string columns may be dictionary arrays (DuckDB hashes their values)."""
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        with self._lock:
            if self._pending and not self._pending[0].schema.equals(table.schema):
                self._drain()  # buffered tables are concatenated, so they share one schema
            self._pending.append(table)
            self._pending_rows += table.num_rows
            if self._pending_rows >= self.buffer_rows:
                self._drain()

    def _drain(self) -> None:
        if self._pending:
            parts, self._pending, self._pending_rows = self._pending, [], 0
            self._total = self._total + checksum(pa.concat_tables(parts) if len(parts) > 1 else parts[0])

    @property
    def value(self) -> Checksum:
        with self._lock:
            self._drain()
            return self._total
