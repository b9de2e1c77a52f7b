"""Sorting or Z-ordering a group larger than memory, in key ranges spilled to local disk
(spec/compaction.md COMPACT-36).

An in-memory sort holds the whole group; with the default group of 1 GiB of Parquet a
partition of 200-byte strings is several GB of Arrow. Here memory does not grow with the
group:

1. *Key pass.* The inputs' key columns only are read (:meth:`KeyPass.add`): the distinct
   values of each key column, and while there are few (:data:`TUPLE_LIMIT`) the rows of
   each distinct combination of key values. From the distinct values a
   :class:`~lakefmt.compaction.group_keys.GroupKey` gives any batch of the group's rows
   the key its rows have in the whole group.
2. *Ranges.* The number of rows per key (exact, from the combinations; otherwise a second
   pass over the key columns counts rows per key prefix of :data:`HISTOGRAM_BITS` bits)
   gives consecutive key ranges of at most ``bucket_rows`` rows (:func:`plan_ranges`).
   A key with more rows than that gets a range of its own.
3. *Routing.* The inputs are read once, batch by batch, and every row is appended, with its
   key, to its range's Arrow IPC stream in a temporary folder (:class:`Spill`): within a
   range rows keep their input order.
4. *Ranges in order.* Each range is read back, sorted by key (stable) and handed on; a range
   of one key is handed on as read, batch by batch.

Rows with equal keys keep their input order in both the in-memory stable sort and here,
and ranges partition the key space in order, so the concatenation of the sorted ranges is
the in-memory permutation exactly (the definitions' order, COMPACT-14/15). Memory holds
one range and its sorted copy, a batch while routing, and the key columns' distinct values.

The temporary folder is on local disk (``tempfile``, so ``TMPDIR`` chooses it), never in the
table's storage; each range's file is deleted once read, and the folder when the rewrite
ends, whether it succeeds or fails.

A group that fits the budget is not spilled: :func:`gathered` holds it once, in pieces,
and :func:`take_slices` reorders it a slice at a time (0.8 s of CPU to read and reorder one
day of the telemetry benchmark data, 1 million rows, against 1.2 s through scratch files).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.arrow_values import empty_table
from lakefmt.compaction.group_keys import GroupKey

TUPLE_LIMIT = 1 << 20  # distinct combinations of key values counted exactly
HISTOGRAM_BITS = 20  # bins of the fallback histogram: key prefixes of at most this many bits
_MERGE_PARTS = 64  # distinct-value pieces merged at once
KEY_FIELD = "__lakefmt_order_key"
PIECE_BYTES = 16 * 1024 * 1024  # a group held for an in-memory sort is concatenated in pieces of this size
WRITE_BUFFER_BYTES = 256 * 1024  # per open range: routed slices are small, writes are not
_U64 = pa.uint64()


def contiguous(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """The rows of ``tables`` as one table of contiguous columns, built column by column.

    ``tables`` is emptied: each column's chunks are released as soon as that column is
    copied, so the peak is the rows plus one column (not two copies), and slices taken
    from the result need no pass over thousands of small chunks.
    """
    chunks = [[c for t in tables for c in t.column(i).chunks] for i in range(len(schema))]
    tables.clear()
    columns = []
    for i, column_field in enumerate(schema):
        parts, chunks[i] = chunks[i], []
        try:
            columns.append(pa.chunked_array([pa.concat_arrays(parts)] if parts else [], column_field.type))
        except pa.ArrowInvalid:  # more than 2 GiB of strings: 32-bit offsets cannot hold them in one array
            columns.append(pa.chunked_array(parts, column_field.type))
        del parts
    return pa.Table.from_arrays(columns, schema=schema)


def gathered(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """The rows of ``tables`` as one table of pieces of about :data:`PIECE_BYTES`, for :func:`take_slices`.

    ``tables`` is emptied. A string column that is a dictionary in every table keeps one
    shared dictionary (as the writer takes it); one that is a dictionary in some tables only
    is decoded. Consecutive tables are concatenated a piece at a time, so the rows are never
    held twice: only one piece is (not the whole group, as concatenating a column would).
    """
    if not tables:
        return empty_table(schema)
    dictionary = [all(pa.types.is_dictionary(t.schema.field(i).type) for t in tables) for i in range(len(schema))]
    target = pa.schema([tables[0].schema.field(i) if dictionary[i] else schema.field(i) for i in range(len(schema))])
    conformed = [t if t.schema.equals(target) else t.cast(target) for t in tables]
    tables.clear()
    table = pa.concat_tables(conformed)
    del conformed
    if any(dictionary):
        table = table.unify_dictionaries()
    batches = table.to_batches()
    del table
    pieces: list[pa.RecordBatch] = []
    while batches:
        size, n = 0, 0
        while n < len(batches) and (n == 0 or size + batches[n].nbytes <= PIECE_BYTES):
            size += batches[n].nbytes
            n += 1
        part, batches[:n] = batches[:n], []
        pieces.append(pa.concat_batches(part) if n > 1 else part[0])
        del part
    return pa.Table.from_batches(pieces, schema=target)


def take_slices(table: pa.Table, indices: pa.Array, rows: int) -> Iterator[pa.Table]:
    """``table.take(indices)``, ``rows`` rows at a time, without concatenating ``table``'s chunks.

    Arrow's take over a chunked string column concatenates the column first (a copy of it
    per call: 18 ms per call on 200 MB of strings, measured with pyarrow 26). Here each
    slice of ``indices`` is split by the chunk its rows are in, each chunk gives its rows,
    and one take of the slice puts them back in the order of ``indices``.
    """
    batches = table.to_batches()
    if len(batches) <= 1:
        whole = batches[0] if batches else None
        for start in range(0, len(indices), rows):
            part = indices.slice(start, rows)
            yield pa.Table.from_batches([whole.take(part)]) if whole is not None else table.take(part)
        return
    owner = pa.concat_arrays([pa.repeat(pa.scalar(i, pa.uint32()), b.num_rows) for i, b in enumerate(batches)])
    firsts = pa.array(list(itertools.accumulate((b.num_rows for b in batches[:-1]), initial=0)), _U64)
    for start in range(0, len(indices), rows):
        part = indices.slice(start, rows)
        chunk = owner.take(part)
        by_chunk = pc.sort_indices(chunk)  # stable: within a chunk, rows keep the order of ``indices``
        chunk = chunk.take(by_chunk)
        local = pc.subtract(part.take(by_chunk).cast(_U64), firsts.take(chunk))
        runs = pc.run_end_encode(chunk)
        taken, first = [], 0
        for end, i in zip(runs.run_ends.to_pylist(), runs.values.to_pylist()):
            taken.append(batches[i].take(local.slice(first, end - first)))
            first = end
        grouped = pa.concat_batches(taken) if len(taken) > 1 else taken[0]
        del taken
        yield pa.Table.from_batches([grouped.take(pc.sort_indices(by_chunk))])  # the inverse permutation


def _unique(column: pa.Array) -> pa.Array:
    """The distinct values of ``column``, plain (a dictionary column: the entries its rows use)."""
    if pa.types.is_dictionary(column.type):
        return column.dictionary.take(pc.unique(column.indices))
    return pc.unique(column)


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


class KeyPass:
    """Distinct values of the key columns over a group, and rows per combination while few.

    Batches may hold string columns as dictionaries (as stored): their distinct values are
    the dictionary entries their rows use, and nothing is decoded but the combinations.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._distinct: dict[str, list[pa.Array]] = {n: [] for n in self.names}
        self._tuples: list[pa.Table] = []
        self._tuple_rows = 0
        self.exact = True  # rows per combination are known (False once there are too many)

    def add(self, rows: pa.Table | pa.RecordBatch) -> None:
        """Count one batch of key columns (other columns are ignored)."""
        table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
        table = table.select(self.names)
        for name in self.names:
            pieces = self._distinct[name]
            pieces.append(_unique(table.column(name).combine_chunks()))
            if len(pieces) >= _MERGE_PARTS:
                self._distinct[name] = [pc.unique(pa.concat_arrays(pieces))]
        if not self.exact:
            return
        try:
            counted = table.group_by(self.names, use_threads=False).aggregate([([], "count_all")])
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            self._drop_tuples()  # a type the hash aggregation does not take: count by key prefix instead
            return
        if any(pa.types.is_dictionary(t) for t in counted.schema.types):  # batches' dictionaries differ
            counted = pa.table([_decoded(c) for c in counted.columns], names=counted.column_names)
        self._tuples.append(counted)
        self._tuple_rows += counted.num_rows
        if self._tuple_rows > TUPLE_LIMIT:
            self._merge_tuples()
            if self._tuple_rows > TUPLE_LIMIT:
                self._drop_tuples()

    def _drop_tuples(self) -> None:
        self.exact, self._tuples, self._tuple_rows = False, [], 0

    def _merge_tuples(self) -> None:
        if len(self._tuples) > 1:
            merged = pa.concat_tables(self._tuples).group_by(self.names, use_threads=False) \
                .aggregate([("count_all", "sum")])
            self._tuples = [merged.rename_columns([*self.names, "count_all"])]
            self._tuple_rows = merged.num_rows

    def distinct(self) -> dict[str, pa.Array]:
        """Every value each key column holds in the group (a null among them if it holds one)."""
        out = {}
        for name, pieces in self._distinct.items():
            out[name] = pc.unique(pa.concat_arrays(pieces)) if len(pieces) != 1 else pieces[0]
        return out

    def combinations(self) -> pa.Table | None:
        """The key columns' distinct combinations with their rows (``count_all``), or None if too many."""
        if not self.exact:
            return None
        self._merge_tuples()
        return self._tuples[0] if self._tuples else None


@dataclass(frozen=True)
class Histogram:
    """Rows per key prefix ``key >> shift`` (bins ascending); ``keys`` per bin: distinct keys, 0 if unknown."""

    shift: int
    bins: list[int]
    rows: list[int]
    keys: list[int]


def histogram_of_combinations(key: GroupKey, combinations: pa.Table) -> Histogram:
    """Exact rows per key prefix, from the counted combinations of key values."""
    shift = max(0, key.bits - HISTOGRAM_BITS)
    keys = key.of(combinations)
    bins = pc.shift_right(keys, pa.scalar(shift, _U64)) if shift else keys
    table = pa.table({"bin": bins, "key": keys, "rows": combinations.column("count_all")})
    counted = table.group_by("bin", use_threads=False).aggregate([("rows", "sum"), ("key", "count_distinct")]) \
        .sort_by("bin")
    return Histogram(shift, counted.column("bin").to_pylist(), counted.column("rows_sum").to_pylist(),
                     counted.column("key_count_distinct").to_pylist())


def histogram_of_batches(key: GroupKey, batches: Iterable[pa.Table | pa.RecordBatch]) -> Histogram:
    """Rows per key prefix, counted over the key columns of every row (a second key pass)."""
    shift = max(0, key.bits - HISTOGRAM_BITS)
    counted: list[pa.Table] = []
    for batch in batches:
        keys = key.of(batch)
        bins = pc.shift_right(keys, pa.scalar(shift, _U64)) if shift else keys
        counts = pc.value_counts(bins)
        counted.append(pa.table({"bin": counts.field("values"), "rows": counts.field("counts")}))
        if len(counted) >= _MERGE_PARTS:
            counted = [_sum_bins(counted)]
    table = _sum_bins(counted).sort_by("bin") if counted else pa.table({"bin": pa.array([], _U64),
                                                                        "rows": pa.array([], pa.int64())})
    bins = table.column("bin").to_pylist()
    return Histogram(shift, bins, table.column("rows").to_pylist(), [1 if shift == 0 else 0] * len(bins))


def _sum_bins(parts: list[pa.Table]) -> pa.Table:
    merged = pa.concat_tables(parts).group_by("bin", use_threads=False).aggregate([("rows", "sum")])
    return merged.rename_columns(["bin", "rows"])


@dataclass(frozen=True)
class Ranges:
    """Consecutive key ranges: ``bucket[key >> shift]`` is a row's range; ``single[r]``: one key only."""

    shift: int
    bucket: pa.Array  # uint32, indexed by bin
    single: tuple[bool, ...]
    rows: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def of(self, keys: pa.Array) -> pa.Array:
        bins = pc.shift_right(keys, pa.scalar(self.shift, _U64)) if self.shift else keys
        return self.bucket.take(bins)


def plan_ranges(histogram: Histogram, range_rows: int, *, complete: bool) -> Ranges:
    """Greedy consecutive ranges of at most ``range_rows`` rows (a bin with more is a range alone).

    A range is ``single`` when it holds one key of a ``complete`` key: its rows need no
    sorting, they are already in the order the stable sort would give.
    """
    cumulative = list(itertools.accumulate(histogram.rows))
    starts, single, rows = [], [], []
    i = 0
    while i < len(histogram.bins):
        before = cumulative[i - 1] if i else 0
        j = max(i, bisect.bisect_right(cumulative, before + range_rows) - 1)
        starts.append(0 if not starts else histogram.bins[i])
        single.append(complete and i == j and histogram.keys[i] == 1)
        rows.append(cumulative[j] - before)
        i = j + 1
    top = (histogram.bins[-1] + 1) if histogram.bins else 1
    lookup: list[int] = []
    for r, start in enumerate(starts):
        end = starts[r + 1] if r + 1 < len(starts) else top
        lookup.extend([r] * (end - start))
    return Ranges(histogram.shift, pa.array(lookup or [0], pa.uint32()), tuple(single), tuple(rows))


class Spill:
    """Per-range Arrow IPC streams in a temporary local folder, deleted on close."""

    def __init__(self, ranges: Ranges, folder: str | None = None) -> None:
        self.schema: pa.Schema | None = None  # the first batch's, plus the key: every stream's
        self.ranges = ranges
        self.folder = tempfile.mkdtemp(prefix="lakefmt-spill-", dir=folder)
        self._writers: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}
        self.rows = [0] * len(ranges)

    def _path(self, r: int) -> str:
        return os.path.join(self.folder, f"range-{r:05d}.arrows")

    def route(self, batch: pa.RecordBatch, key: GroupKey) -> None:
        """Append every row of ``batch`` (with its key) to its range's stream, in input order."""
        if batch.num_rows == 0:
            return
        if self.schema is None:
            self.schema = batch.schema.append(pa.field(KEY_FIELD, _U64, nullable=False))
        keys = key.of(batch)
        rows = pa.RecordBatch.from_arrays([*_conform(batch, self.schema), keys], schema=self.schema)
        if len(self.ranges) == 1:
            self._write(0, rows)
            return
        ids = self.ranges.of(keys)
        bounds = pc.min_max(ids)
        if bounds["min"].as_py() == bounds["max"].as_py():
            self._write(bounds["min"].as_py(), rows)
            return
        order = pc.sort_indices(ids)  # stable: rows of one range keep their input order
        rows = rows.take(order)
        runs = pc.run_end_encode(ids.take(order))
        start = 0
        for end, r in zip(runs.run_ends.to_pylist(), runs.values.to_pylist()):
            self._write(r, rows.slice(start, end - start))
            start = end

    def _write(self, r: int, rows: pa.RecordBatch) -> None:
        assert self.schema is not None
        entry = self._writers.get(r)
        if entry is None:
            sink = pa.BufferedOutputStream(pa.OSFile(self._path(r), "wb"), WRITE_BUFFER_BYTES)
            entry = self._writers[r] = (sink, pa.ipc.new_stream(sink, self.schema))
        entry[1].write_batch(rows)
        self.rows[r] += rows.num_rows

    def finish_writing(self) -> None:
        for sink, writer in self._writers.values():
            writer.close()
            sink.close()
        self._writers.clear()

    def read(self, r: int) -> Iterator[pa.RecordBatch]:
        """The rows of range ``r`` in input order, batch by batch; its file is deleted once read."""
        if not self.rows[r]:
            return
        path = self._path(r)
        try:
            with pa.OSFile(path, "rb") as source:
                yield from pa.ipc.open_stream(source)
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)

    def close(self) -> None:
        for sink, writer in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()
            with contextlib.suppress(Exception):
                sink.close()
        self._writers.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> list[pa.Array]:
    """``batch``'s columns typed as ``schema`` says: a string column that one input stores with a
    dictionary and another plain is encoded or decoded to the type of the first batch routed."""
    columns = []
    for column, target in zip(batch.columns, schema):
        if column.type != target.type:
            column = pc.dictionary_encode(column) if pa.types.is_dictionary(target.type) else column.cast(target.type)
            if column.type != target.type:  # another index type
                column = column.cast(target.type)
        columns.append(column)
    return columns


@dataclass(frozen=True)
class SpillPlan:
    """What the key pass decided: the group's key and its ranges."""

    key: GroupKey
    ranges: Ranges


def plan_spill(key_batches: Callable[[], Iterable[pa.Table | pa.RecordBatch]], names: Sequence[str],
               build_key: Callable[[dict[str, pa.Array]], GroupKey], range_rows: int) -> SpillPlan:
    """The key pass (and, with too many combinations of key values, a second one) and the ranges.

    ``key_batches()`` yields the key columns of every input row, in input order, each call anew.

    Raises:
        pyarrow.ArrowNotImplementedError, pyarrow.ArrowTypeError: a key column's type cannot be
            hashed; nothing was written, the caller may sort in memory instead.
    """
    keys = KeyPass(names)
    for batch in key_batches():
        keys.add(batch)
    key = build_key(keys.distinct())
    combinations = keys.combinations()
    if combinations is not None:
        histogram = histogram_of_combinations(key, combinations)
    else:
        histogram = histogram_of_batches(key, key_batches())
    return SpillPlan(key, plan_ranges(histogram, range_rows, complete=key.complete))


def spill_sorted(plan: SpillPlan, batches: Iterable[pa.RecordBatch], emit: Callable[[pa.Table], None], *,
                 resort: Callable[[pa.Table], pa.Array] | None = None, take_rows: int = 1_048_576,
                 folder: str | None = None) -> None:
    """Route ``batches`` (every input row, in input order) into ranges, then ``emit`` them sorted.

    Batches may hold string columns as dictionaries (as stored); every range is emitted with
    the first batch's types. ``resort(table)`` orders the rows of one range when the key is
    not complete (rows of equal keys differ in later sort columns); otherwise ranges are
    sorted by key.
    """
    spill = Spill(plan.ranges, folder)
    try:
        for batch in batches:
            spill.route(batch, plan.key)
        spill.finish_writing()
        keyed = spill.schema
        if keyed is None:
            return  # no rows
        for r in range(len(plan.ranges)):
            if plan.ranges.single[r]:  # one key: already in stable order, streamed
                for batch in spill.read(r):
                    emit(pa.Table.from_batches([batch]).drop_columns([KEY_FIELD]))
                continue
            parts = [pa.Table.from_batches([b]) for b in spill.read(r)]
            if not parts:
                continue
            table = contiguous(parts, keyed)
            keys = table.column(KEY_FIELD)
            table = table.drop_columns([KEY_FIELD])
            order = resort(table) if resort is not None else pc.sort_indices(keys)
            del keys
            for start in range(0, len(order), take_rows):
                emit(table.take(order.slice(start, take_rows)))
            del table, order
    finally:
        spill.close()
