"""Rewriting one group of files (spec/compaction.md §Rewrite, COMPACT-12..COMPACT-17).

:func:`rewrite_group` is the one function that turns a group's input files into
output files, whether it runs in this process or in a Spark task: it takes a plain,
picklable :class:`RewriteTask` and a file IO, writes the outputs, verifies them, and
returns a :class:`RewriteResult`. It never commits; the caller decides.

Strategies:

* ``binpack`` streams batches file by file into a rolling writer (never the whole
  group in memory); files roll at the target size by bytes actually written.
* ``sort`` merges the inputs with a streaming k-way merge when every input is
  already sorted by the target order, and otherwise sorts the group in memory
  (bounded by the group size, COMPACT-7).
* ``zorder`` sorts the group in memory by Z-order key (:mod:`lakefmt.compaction.zorder`).

In-memory strategies order the group with :func:`lakefmt.compaction.ranks.sort_indices`
or :func:`lakefmt.compaction.zorder.zorder_indices` (rank-based, the permutation the
definitions give) and reorder it one slice at a time, so the group is held once.

Inputs are read with their deletion vectors applied (COMPACT-32): the rows a vector
deletes are dropped as each batch is read, so no output holds a deleted row, and the
inputs' rows below are their *live* rows (``record_count`` less the vector's
cardinality, COMPACT-33). A :class:`RewriteTask` carries each input's
:class:`~lakefmt.manifest.DataFile` with the vector it had when the group was planned;
the commit then removes exactly those (ROWDEL-4).

Outputs are ZSTD Parquet files named ``compact-...`` with statistics from their
footers (COMPACT-16) and the encodings every writer chooses (:mod:`lakefmt.encoding`,
WRITE-7). Before returning, the outputs must hold exactly the input rows (COMPACT-17):
the checksum of the rows as read must equal the checksum of the rows handed to the
Parquet writer (what any reordering, merging or concatenation produced), and the
footers read back from storage must count the same rows. With ``read_back`` the
outputs are also decoded from storage and hashed (the writer's encoding is then
checked too). On a mismatch the outputs are deleted and
:class:`~lakefmt.errors.ChecksumMismatchError` is raised.

Sort and Z-order outputs use small row groups (``compaction.sorted-row-group-rows``,
COMPACT-16) so that selective reads of clustered rows prune nearly every row group.

CPU of a bin-pack rewrite of one day of the telemetry data (benchmarks/telemetry_data.py,
1 million rows in 100 files of 1 MB; pyarrow 26, ZSTD 3): writing 1.37 s, of which
ZSTD-compressing the 200-byte ``payload`` column takes 1.13 s; reading the inputs 0.29 s;
each of the two row hashes 0.065 s. Decoding the outputs again (``read_back``) costs
about as much as reading the inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.compaction.merge import merge_sorted
from lakefmt.compaction.options import Strategy
from lakefmt.compaction.ranks import sort_indices
from lakefmt.compaction.reader import DEFAULT_BATCH_ROWS, iter_batches, live_rows, read_table
from lakefmt.compaction.verify import EMPTY, Checksum, RowChecksum, checksum, parquet_checksum
from lakefmt.compaction.zorder import zorder_indices
from lakefmt.errors import ChecksumMismatchError, CompactionError
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema
from lakefmt.write import RollingFileWriter, WriteOptions, plain_schema

Method = Literal["stream", "merge", "memory-sort", "zorder"]
Hook = Callable[[str, dict[str, Any]], None]
MAX_MERGE_INPUTS = 512  # open files of one streaming merge; more inputs are sorted in memory
FLUSH_BYTES = 64 * 1024 * 1024
SINK_ROWS = 131_072  # fewest rows handed to the writer at once (it splits them into row groups)
TAKE_ROWS = 1_048_576  # rows reordered per take; smaller slices cost a per-call pass over the group's chunks


@dataclass(frozen=True)
class RewriteTask:
    """Everything one group's rewrite needs, as plain data (picklable for a Spark task).

    ``files`` are the inputs as planned, each with its deletion vector (COMPACT-32).
    """

    group_id: str
    location: str
    schema: Schema
    spec: PartitionSpec
    partition: tuple[Any, ...]
    files: tuple[DataFile, ...]
    strategy: Strategy
    write_options: WriteOptions
    sort_keys: tuple[tuple[str, str, str], ...] = ()
    zorder_columns: tuple[str, ...] = ()
    output_sort_order_id: int | None = None
    inputs_sorted: bool = False
    verify: bool = True
    read_back: bool = False  # COMPACT-17 also decodes the outputs from storage (compaction.verify=read-back)


@dataclass(frozen=True)
class RewriteResult:
    """What one rewrite produced (nothing is committed yet).

    ``rows`` are the live input rows, all in the outputs; ``deleted_rows`` the input rows
    their deletion vectors deleted, in no output (COMPACT-32).
    """

    group_id: str
    outputs: tuple[DataFile, ...]
    rows: int
    input_checksum: Checksum
    output_checksum: Checksum
    input_bytes: int
    output_bytes: int
    method: Method
    seconds: float
    output_paths: tuple[str, ...] = field(default=(), repr=False)
    deleted_rows: int = 0


def rewrite_group(io: FileIO, task: RewriteTask, *, throttle: Callable[[int], None] | None = None,
                  hook: Hook | None = None) -> RewriteResult:
    """Rewrite the files of ``task`` and verify the outputs (COMPACT-12..COMPACT-17).

    ``throttle(nbytes)`` is called before each file is read (read budget, back-off);
    ``hook(point, info)`` is called at ``"outputs-written"`` with the output paths,
    before verification (a test seam).
    """
    if task.strategy == "sort" and not task.sort_keys:
        raise CompactionError(f"group {task.group_id}: a sort rewrite needs sort keys")
    if task.strategy == "zorder" and not task.zorder_columns:
        raise CompactionError(f"group {task.group_id}: a Z-order rewrite needs columns")
    started = time.perf_counter()
    writer = RollingFileWriter(io, task.location, task.schema, task.spec, task.partition, task.write_options,
                               sort_order_id=task.output_sort_order_id)
    inputs = RowChecksum()
    written = _Hashed()
    try:
        sink = _Sink(writer, max(task.write_options.row_group_rows, SINK_ROWS), written if task.verify else None)
        counts: dict[str, int] = {}  # rows read from each input without a vector
        method = _write_rows(io, task, sink, inputs, throttle, counts)
        sink.flush()
        outputs = tuple(writer.close())
        paths = tuple(f"{task.location}/{f.path}" for f in outputs)
        if hook is not None:
            hook("outputs-written", {"group_id": task.group_id, "paths": list(paths)})
        expected = sum(f.live_record_count for f in task.files)  # COMPACT-33
        if inputs.value.rows != expected:
            raise CompactionError(f"group {task.group_id}: inputs hold {inputs.value.rows} live rows but their "
                                  f"manifest entries say {expected} (record counts less deleted rows)")
        for f in task.files:  # each input, not only the sum (inputs with a vector are checked as read, DV-4)
            if counts.get(f.path, f.record_count) != f.record_count:
                raise CompactionError(f"group {task.group_id}: input {f.path} holds {counts[f.path]} rows but "
                                      f"its manifest entry records {f.record_count} (COMPACT-33, READ-12)")
        output_sum = _verify(io, task, outputs, inputs.value, written.value, throttle) if task.verify \
            else inputs.value
    except BaseException:
        writer.abort()  # deletes every file this rewrite started: nothing references them (COMPACT-21)
        raise
    return RewriteResult(
        group_id=task.group_id, outputs=outputs, rows=inputs.value.rows, input_checksum=inputs.value,
        output_checksum=output_sum, input_bytes=sum(f.file_size_bytes for f in task.files),
        output_bytes=sum(f.file_size_bytes for f in outputs), method=method,
        seconds=time.perf_counter() - started, output_paths=paths,
        deleted_rows=sum(f.deleted_record_count for f in task.files))


def _write_rows(io: FileIO, task: RewriteTask, sink: _Sink, inputs: RowChecksum,
                throttle: Callable[[int], None] | None, counts: dict[str, int]) -> Method:
    if task.strategy == "binpack":
        for batch in _stream(io, task, throttle, DEFAULT_BATCH_ROWS, counts):
            inputs.update(batch)
            sink.write(batch)
        return "stream"
    if task.strategy == "sort" and task.inputs_sorted and 1 < len(task.files) <= MAX_MERGE_INPUTS:
        batch_rows = max(1024, min(DEFAULT_BATCH_ROWS, 4_000_000 // len(task.files)))
        streams = [_checked(_batches(io, task, f, throttle, batch_rows, counts=counts), inputs)
                   for f in task.files]
        for table in merge_sorted(streams, task.schema.to_arrow(), task.sort_keys, batch_rows=batch_rows):
            sink.write(table)
        return "merge"
    tables = []
    for f in task.files:
        table = read_table(io, _abs(task, f), task.schema, charge=throttle, size_hint=f.file_size_bytes,
                           live=live_rows(io, task.location, f))
        if f.deletion_vector is None:
            counts[f.path] = table.num_rows
        inputs.update(table)
        tables.append(table)
    inputs.value  # noqa: B018 - hashes the rows still buffered, so the checksum holds no table below
    group = _contiguous(tables, task.schema.to_arrow())
    if task.strategy == "zorder":
        indices = zorder_indices(group, list(task.zorder_columns))
    else:
        indices = sort_indices(group, list(task.sort_keys))
    # Taken a slice at a time: the group plus one slice in memory, not two copies of the group.
    for start in range(0, len(indices), TAKE_ROWS):
        sink.write(group.take(indices.slice(start, TAKE_ROWS)))
    return "zorder" if task.strategy == "zorder" else "memory-sort"


def _contiguous(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """The rows of ``tables`` as one table of contiguous columns, built column by column.

    ``tables`` is emptied: each column's chunks are released as soon as that column is
    copied, so the peak is the group plus one column (not two copies of the group), and
    the slices taken from it afterwards need no pass over thousands of small chunks.
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


def _stream(io: FileIO, task: RewriteTask, throttle: Callable[[int], None] | None, batch_rows: int,
            counts: dict[str, int]) -> Iterator[pa.RecordBatch]:
    for f in task.files:
        yield from _batches(io, task, f, throttle, batch_rows, keep_dictionaries=True, counts=counts)


def _batches(io: FileIO, task: RewriteTask, f: DataFile, throttle: Callable[[int], None] | None, batch_rows: int,
             *, keep_dictionaries: bool = False, counts: dict[str, int] | None = None
             ) -> Iterator[pa.RecordBatch]:
    """The live rows of one input, batch by batch (COMPACT-12, COMPACT-32); an input without a
    vector has its rows counted in ``counts`` once it is read to the end (COMPACT-33)."""
    rows = 0
    for batch in iter_batches(io, _abs(task, f), task.schema, batch_rows=batch_rows, charge=throttle,
                              size_hint=f.file_size_bytes, keep_dictionaries=keep_dictionaries,
                              live=live_rows(io, task.location, f)):
        rows += batch.num_rows
        yield batch
    if counts is not None and f.deletion_vector is None:
        counts[f.path] = rows


def _checked(batches: Iterator[pa.RecordBatch], acc: RowChecksum) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        acc.update(batch)
        yield batch


def _verify(io: FileIO, task: RewriteTask, outputs: tuple[DataFile, ...], expected: Checksum, written: Checksum,
            throttle: Callable[[int], None] | None) -> Checksum:
    """Check that the outputs hold exactly the input rows (COMPACT-17); the outputs' checksum.

    Always: the rows handed to the Parquet writer have the inputs' checksum, and every
    output's footer, read back from storage, counts the rows its manifest entry will
    declare, together the inputs' rows. With ``task.read_back`` the outputs are also
    decoded from storage and hashed: a local output by DuckDB from the Parquet file
    itself when DuckDB types its columns as it typed the input rows
    (:func:`parquet_checksum`), any other with pyarrow, batch by batch.
    """
    stored = _stored_rows(io, task, outputs)
    got = written
    if task.read_back:
        got = _decoded(io, task, outputs, throttle)
    declared = sum(f.record_count for f in outputs)
    if got != expected or stored != declared or declared != expected.rows:
        source = "as decoded from storage" if task.read_back else "as handed to the writer"
        raise ChecksumMismatchError(
            f"group {task.group_id}: outputs hold {got} {source} (footers in storage say {stored} rows, the "
            f"writer {declared}) but the inputs hold {expected}; the outputs were deleted and nothing was committed")
    return got


def _stored_rows(io: FileIO, task: RewriteTask, outputs: tuple[DataFile, ...]) -> int:
    """Rows counted by the outputs' footers as read back from storage; a file whose footer
    disagrees with what the writer recorded, or cannot be read, fails the group."""
    total = 0
    for f in outputs:
        location = _abs(task, f)
        try:
            with io.open_input(location) as source:
                rows = pq.read_metadata(source).num_rows
        except (OSError, pa.ArrowException) as exc:
            raise ChecksumMismatchError(f"group {task.group_id}: output {location} cannot be read back: {exc}; "
                                        "the outputs were deleted and nothing was committed") from exc
        total += rows
    return total


def _decoded(io: FileIO, task: RewriteTask, outputs: tuple[DataFile, ...],
             throttle: Callable[[int], None] | None) -> Checksum:
    """The checksum of the outputs as decoded from storage (``compaction.verify = read-back``)."""
    acc = RowChecksum()
    direct = EMPTY
    arrow_schema = task.schema.to_arrow()
    for f in outputs:
        location = _abs(task, f)
        if throttle is not None:
            throttle(f.file_size_bytes)  # outputs decoded again count against the read budget (COMPACT-25)
        by_duckdb = parquet_checksum(io.fs_path(location), arrow_schema) if io.scheme == "file" else None
        if by_duckdb is not None:
            direct = direct + by_duckdb
            continue
        for batch in iter_batches(io, location, task.schema, batch_rows=262_144, size_hint=f.file_size_bytes):
            acc.update(batch)
    return acc.value + direct


def _abs(task: RewriteTask, f: DataFile) -> str:
    return f"{task.location}/{f.path}"


class _Sink:
    """Buffers small batches so the writer sees chunks of about a row group (few, full row groups).

    The writer chooses the output encodings from the first chunk (WRITE-7), so that
    chunk is a whole row group's worth of rows, not one small input's.
    """

    def __init__(self, writer: RollingFileWriter, row_group_rows: int, hashed: _Hashed | None = None) -> None:
        self.writer = writer
        self.hashed = hashed
        self.flush_rows = max(1, row_group_rows)
        self._parts: list[pa.Table] = []
        self._rows = 0
        self._bytes = 0

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if table.num_rows == 0:
            return
        self._parts.append(table)
        self._rows += table.num_rows
        self._bytes += table.nbytes
        if self._rows >= self.flush_rows or self._bytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._parts:
            return
        table = _concat(self._parts)
        self._parts, self._rows, self._bytes = [], 0, 0
        if self.hashed is not None:
            self.hashed.add(table)  # exactly what the Parquet writer is given (COMPACT-17)
        self.writer.write(table)


class _Hashed:
    """The checksum of the tables handed to the writer, each hashed as it goes (nothing is held)."""

    def __init__(self) -> None:
        self.value = EMPTY

    def add(self, table: pa.Table) -> None:
        self.value = self.value + checksum(table)


def _concat(parts: list[pa.Table]) -> pa.Table:
    """One table of ``parts``; a column that is a dictionary in every part gets one shared dictionary.

    A column that is a dictionary in some parts only is decoded (the parts' schemas must agree).
    """
    schema = parts[0].schema
    if any(not p.schema.equals(schema) for p in parts[1:]):
        plain = plain_schema(schema)
        parts = [p.cast(plain) if not p.schema.equals(plain) else p for p in parts]
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    if any(pa.types.is_dictionary(t) for t in table.schema.types):
        table = table.unify_dictionaries()  # one dictionary per column: the writer's fast path
    return table
