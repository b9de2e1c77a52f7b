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
import pyarrow.compute as pc

from lakefmt.arrow_values import empty_table
from lakefmt.sql_filters import has_glob

MASK64 = (1 << 64) - 1
_local = threading.local()
_base_lock = threading.Lock()
_base: list[duckdb.DuckDBPyConnection] = []


@dataclass(frozen=True)
class Checksum:
    """Row count and the order-independent digest of a multiset of rows.

    ``digest`` is None when the rows were counted, not hashed (a bin-pack whose
    concatenation is checked array by array, COMPACT-17); a sum with such a checksum is
    counted only.
    """

    rows: int
    digest: int | None

    def __add__(self, other: Checksum) -> Checksum:
        if self.digest is None or other.digest is None:
            return Checksum(self.rows + other.rows, None)
        return Checksum(self.rows + other.rows, (self.digest + other.digest) & MASK64)

    def __str__(self) -> str:
        return f"{self.rows} rows" if self.digest is None else f"{self.rows} rows, digest {self.digest:016x}"


EMPTY = Checksum(0, 0)


def _database() -> duckdb.DuckDBPyConnection:
    """The process's in-memory database (the caller holds ``_base_lock``).

    One thread, and no asynchronous I/O threads (DuckDB 2.0 starts 8 by default, handing
    them every read): the files it reads here are small local ones, read faster on the
    querying thread (the outputs :func:`parquet_checksum` decodes again). Measured reading 240
    inputs of 28 KB in one pass per 80, CPU of the process, fresh database included, best of 8:
    80 ms without them, 95 ms with them.
    """
    if not _base:
        try:
            _base.append(duckdb.connect(config={"threads": 1, "async_threads": 0}))
        except duckdb.Error:  # a DuckDB without the setting has no such threads
            _base.append(duckdb.connect(config={"threads": 1}))
    return _base[0]


def thread_connection() -> duckdb.DuckDBPyConnection:
    """This thread's connection: a cursor of one in-memory database per process.

    A cursor costs about 0.5 ms, a new database about 15 ms: a run of many small groups
    would otherwise pay a database per rewrite thread.
    """
    con = getattr(_local, "con", None)
    if con is None:
        with _base_lock:
            con = _database().cursor()
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
    con = thread_connection()
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
    if not schema.names or has_glob(path):
        return None  # DuckDB would read a path with glob characters as a pattern
    con = thread_connection()
    arrow_side = con.from_arrow(_hashable(empty_table(schema)))
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
    time, so a stream of tiny files costs few hash queries. With ``hashing=False`` rows
    are only counted (the value's digest is None).
    """

    def __init__(self, *, buffer_rows: int = 262_144, hashing: bool = True) -> None:
        self._lock = threading.Lock()
        self._total = EMPTY if hashing else Checksum(0, None)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.buffer_rows = buffer_rows
        self.hashing = hashing

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        """Add rows; string columns may be dictionary arrays (DuckDB hashes their values)."""
        if not self.hashing:
            with self._lock:
                self._total = Checksum(self._total.rows + data.num_rows, None)
            return
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


def holds_parts(parts: list[pa.Table], table: pa.Table) -> bool:
    """Whether ``table`` holds exactly the rows of ``parts``, in order, by construction (COMPACT-17).

    True when every column of ``table`` is made of the arrays of that column of the parts,
    one chunk per part chunk, in order: the very same memory (buffers, offset and length),
    or, for a dictionary column that was given one shared dictionary, codes that name
    the same values code by code. The writer is then handed the rows read without a byte
    of them copied or re-encoded, and hashing both sides would only compare a value with
    itself. False means "not established" (for example a column was cast): the caller
    must then hash both sides.
    """
    if table.num_rows != sum(p.num_rows for p in parts) or any(p.num_columns != table.num_columns for p in parts):
        return False
    for i in range(table.num_columns):
        got = [c for c in table.column(i).chunks if len(c)]
        want = [c for p in parts for c in p.column(i).chunks if len(c)]
        if len(got) != len(want):
            return False
        if not got:
            continue
        if pa.types.is_dictionary(table.schema.field(i).type):
            if not _same_codes(got, want):
                return False
        elif not all(_same_memory(g, w) for g, w in zip(got, want)):
            return False
    return True


def _same_memory(a: pa.Array, b: pa.Array) -> bool:
    """The same type, length and offset over the same buffers; nested arrays are not compared
    (their children carry offsets of their own) and count as different."""
    if a.type != b.type or len(a) != len(b) or a.offset != b.offset or pa.types.is_nested(a.type):
        return False
    ours, theirs = a.buffers(), b.buffers()
    return len(ours) == len(theirs) and all(
        (x is None and y is None) or (x is not None and y is not None and x.address == y.address
                                      and x.size == y.size) for x, y in zip(ours, theirs))


def _same_codes(got: list[pa.Array], want: list[pa.Array]) -> bool:
    """Dictionary chunks ``got`` (sharing one dictionary) name, row by row, the values of ``want``.

    Every dictionary of ``want`` is looked up in the shared one in a single call (one hash
    table of the shared dictionary, not one per chunk); then each chunk's codes must be its
    ``want`` chunk's codes moved to where their values are in the shared dictionary.
    """
    if not all(pa.types.is_dictionary(w.type) and w.type.value_type == got[0].type.value_type for w in want):
        return False
    shared = got[0].dictionary
    if any(len(g) != len(w) or not _same_memory(g.dictionary, shared) for g, w in zip(got, want)):
        return False
    moved = pc.index_in(pa.concat_arrays([w.dictionary for w in want]), value_set=shared, skip_nulls=True)
    if moved.null_count:
        return False  # a value missing from the shared dictionary (or a null entry): not established
    start = 0
    for g, w in zip(got, want):
        expected = moved.slice(start, len(w.dictionary)).take(w.indices)
        start += len(w.dictionary)
        if not expected.equals(g.indices.cast(expected.type)):
            return False
    return True
