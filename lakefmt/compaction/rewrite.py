"""Rewriting one group of files (spec/compaction.md §Rewrite, COMPACT-12..COMPACT-17).

:func:`rewrite_group` is the one function that turns a group's input files into
output files, whether it runs in this process or in a Spark task: it takes a plain,
picklable :class:`RewriteTask` and a file IO, writes the outputs, verifies them, and
returns a :class:`RewriteResult`. It never commits; the caller decides.

Strategies:

* ``binpack`` streams batches file by file into a rolling writer (never the whole
  group in memory); files roll at the target size by bytes actually written. A group of
  many small local files is read in one pass instead (:mod:`lakefmt.compaction.small_inputs`,
  COMPACT-38).
* ``sort`` merges the inputs with a streaming k-way merge when every input is
  already sorted by the target order, and otherwise sorts the group.
* ``zorder`` sorts the group by Z-order key (:mod:`lakefmt.compaction.zorder`).

A group whose rows fit in ``compaction.sort-memory-bytes`` (estimated from the first
batch) is sorted in memory with :func:`lakefmt.compaction.ranks.sort_indices` or
:func:`lakefmt.compaction.zorder.zorder_indices` (rank-based, the permutation the
definitions give) and reordered one slice at a time, so the group is held once. A larger
group is sorted in key ranges spilled to local disk (:mod:`lakefmt.compaction.spill`,
COMPACT-36): the same permutation, with memory bounded by the budget, not the group.

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
Parquet writer (what any reordering or merging produced), and the footers read back
from storage must count the same rows. A bin-pack only concatenates the batches it
read, so instead of hashing every row twice it checks that each table handed to the
writer is made of the very arrays read, in order (dictionary codes re-indexed to one
shared dictionary are checked code by code), and counts the rows; a table for which
that cannot be established is hashed on both sides. With ``read_back`` the inputs are
hashed and the outputs decoded from storage and hashed (the writer's encoding is then
checked too). On a mismatch the outputs are deleted and
:class:`~lakefmt.errors.ChecksumMismatchError` is raised.

Sort and Z-order outputs use small row groups (``compaction.sorted-row-group-rows``,
COMPACT-16) so that selective reads of clustered rows prune nearly every row group.

CPU of a bin-pack rewrite of one day of the telemetry data (benchmarks/telemetry_data.py,
1 million rows in 100 files of 1 MB; pyarrow 26, ZSTD 3): writing 1.37 s, of which ZSTD took
1.13 s for the 200-byte ``payload`` (about half at level 1, WRITE-12); reading the inputs 0.29 s;
each of the two row hashes 0.065 s, which the bin-pack no longer makes (its concatenation
is checked instead, a few milliseconds). Decoding the outputs again (``read_back``) costs
about as much as reading the inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.compaction.group_keys import sort_group_key, zorder_group_key
from lakefmt.compaction.merge import merge_sorted
from lakefmt.compaction.options import SORT_MEMORY_BYTES, Strategy
from lakefmt.compaction.ranks import sort_indices
from lakefmt.compaction.reader import DEFAULT_BATCH_ROWS, iter_batches, live_rows
from lakefmt.compaction.sink import Concatenated, Hashed, Sink
from lakefmt.compaction.small_inputs import OnePassError, read_small_inputs
from lakefmt.compaction.spill import gathered, plan_spill, spill_sorted, take_slices
from lakefmt.compaction.verify import EMPTY, Checksum, RowChecksum, parquet_checksum
from lakefmt.compaction.zorder import zorder_indices
from lakefmt.encoding import SharedChoice
from lakefmt.errors import ChecksumMismatchError, CompactionError
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema
from lakefmt.write import RollingFileWriter, WriteOptions

Method = Literal["stream", "merge", "memory-sort", "zorder", "spill-sort", "spill-zorder"]
Hook = Callable[[str, dict[str, Any]], None]
MAX_MERGE_INPUTS = 512  # open files of one streaming merge; more inputs are sorted in memory
SINK_ROWS = 131_072  # fewest rows handed to the writer at once (it splits them into row groups)
SPILL_BATCH_ROWS = 65_536  # rows read and routed at once by a spilled sort (COMPACT-36)
MAX_SPILL_RANGES = 256  # key ranges (open spill files) of one spilled sort at most
SPILL_DICTIONARIES = True  # a spilled sort reads dictionary-encoded strings as dictionaries


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
    sort_memory_bytes: int = SORT_MEMORY_BYTES.default  # rows reordered in memory at once (COMPACT-36)


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
                  hook: Hook | None = None, sync: bool = True, encodings: SharedChoice | None = None
                  ) -> RewriteResult:
    """Rewrite the files of ``task`` and verify the outputs (COMPACT-12..COMPACT-17).

    ``throttle(nbytes)`` is called before each file is read (read budget, back-off);
    ``hook(point, info)`` is called at ``"outputs-written"`` with the output paths,
    before verification (a test seam). With ``sync=False`` the outputs are left for the
    ``io.sync()`` of the commit that adds them (COMMIT-20): the caller must commit through
    this very ``io``; the rewrite then never waits for the disk. ``encodings`` is the choice of
    column encodings the outputs of the caller's whole run share (WRITE-11, COMPACT-16);
    without it the outputs of this group share the one made from their first rows.
    """
    if task.strategy == "sort" and not task.sort_keys:
        raise CompactionError(f"group {task.group_id}: a sort rewrite needs sort keys")
    if task.strategy == "zorder" and not task.zorder_columns:
        raise CompactionError(f"group {task.group_id}: a Z-order rewrite needs columns")
    try:
        return _rewrite(io, task, throttle, hook, sync, encodings, one_pass=True)
    except OnePassError:  # its outputs are deleted: the group again, file by file (COMPACT-38)
        return _rewrite(io, task, throttle, hook, sync, encodings, one_pass=False)


def _rewrite(io: FileIO, task: RewriteTask, throttle: Callable[[int], None] | None, hook: Hook | None,
             sync: bool, encodings: SharedChoice | None, *, one_pass: bool) -> RewriteResult:
    started = time.perf_counter()
    writer = RollingFileWriter(io, task.location, task.schema, task.spec, task.partition, task.write_options,
                               sort_order_id=task.output_sort_order_id, sync=sync)
    # Bin-pack hands the writer the arrays it read, only concatenated: that is checked array by
    # array (Concatenated), so its rows are hashed only to compare them with decoded outputs (COMPACT-17).
    binpack = task.strategy == "binpack"
    inputs = RowChecksum(hashing=task.read_back or (task.verify and not binpack))
    written: Concatenated | Hashed = Concatenated(task.group_id) if binpack else Hashed()
    try:
        sink = Sink(writer, max(task.write_options.row_group_rows, SINK_ROWS), written if task.verify else None,
                    encodings)
        counts: dict[str, int] = {}  # rows read from each input without a vector
        method = _write_rows(io, task, sink, inputs, throttle, counts, one_pass)
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


def _write_rows(io: FileIO, task: RewriteTask, sink: Sink, inputs: RowChecksum,
                throttle: Callable[[int], None] | None, counts: dict[str, int], one_pass: bool) -> Method:
    if task.strategy == "binpack":
        batches = read_small_inputs(io, task.location, task.schema, task.files, batch_rows=DEFAULT_BATCH_ROWS,
                                    charge=throttle, counts=counts) if one_pass else None  # COMPACT-38
        for batch in batches if batches is not None else _stream(io, task, throttle, DEFAULT_BATCH_ROWS, counts):
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
    spilled = _spilled(io, task, sink, inputs, throttle, counts)
    if spilled is not None:
        return spilled
    tables = []
    for f in task.files:
        batches = list(_checked(_batches(io, task, f, throttle, DEFAULT_BATCH_ROWS,
                                         keep_dictionaries=SPILL_DICTIONARIES, counts=counts), inputs))
        if batches:
            tables.append(pa.Table.from_batches(batches))
    inputs.value  # noqa: B018 - hashes the rows still buffered, so the checksum holds no table below
    group = gathered(tables, task.schema.to_arrow())  # COMPACT-36: held once, in pieces, never concatenated
    if task.strategy == "zorder":
        indices = zorder_indices(group, list(task.zorder_columns))
    else:
        indices = sort_indices(group, list(task.sort_keys))
    # Reordered a slice at a time: the group, its permutation and one slice in the budget (COMPACT-36).
    row_bytes = group.nbytes / max(group.num_rows, 1)
    spare = task.sort_memory_bytes - group.nbytes - indices.nbytes
    take_rows = min(SINK_ROWS, max(task.write_options.row_group_rows, int(spare / max(row_bytes, 1.0))))
    for table in take_slices(group, indices, take_rows):
        sink.write(table)
    return "zorder" if task.strategy == "zorder" else "memory-sort"


def _spilled(io: FileIO, task: RewriteTask, sink: Sink, inputs: RowChecksum,
             throttle: Callable[[int], None] | None, counts: dict[str, int]) -> Method | None:
    """Sort or Z-order a group too large for ``task.sort_memory_bytes`` in key ranges spilled to
    local disk (COMPACT-36, :mod:`lakefmt.compaction.spill`); None when it fits in memory, or when
    a key column's type cannot be hashed (then nothing was read but key columns: sort in memory).

    The group's size in memory is estimated from its first batch: its Arrow bytes per row
    times the group's live rows. Sorted in memory, the group and the sorted copy of its rows
    are held at once, so it is sorted in memory only when it takes at most half the budget;
    likewise each key range holds at most half the budget.
    """
    row_bytes = _row_bytes(io, task, throttle)
    rows = sum(f.live_record_count for f in task.files)
    budget = task.sort_memory_bytes
    # In memory: the group, its permutation (8 bytes a row) and a row group's worth of reordered rows.
    if row_bytes * rows + 8 * rows + row_bytes * task.write_options.row_group_rows <= budget:
        return None
    zorder = task.strategy == "zorder"
    names = list(dict.fromkeys(task.zorder_columns if zorder else [k[0] for k in task.sort_keys]))
    key_schema = task.schema.select(names)

    def key_batches() -> Iterator[pa.RecordBatch]:  # the key columns only; charged as a full read (COMPACT-25)
        for f in task.files:
            yield from iter_batches(io, _abs(task, f), key_schema, batch_rows=SPILL_BATCH_ROWS, charge=throttle,
                                    size_hint=f.file_size_bytes, keep_dictionaries=SPILL_DICTIONARIES,
                                    live=live_rows(io, task.location, f))

    def build(distinct: dict[str, pa.Array]) -> Any:
        return zorder_group_key(distinct, names) if zorder else sort_group_key(distinct, task.sort_keys)

    # A range and its sorted copy are in memory at once: each range holds half the budget.
    range_rows = max(1, int(budget / 2 / max(row_bytes, 1.0)), -(-rows // MAX_SPILL_RANGES))
    try:
        plan = plan_spill(key_batches, names, build, range_rows)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    # Strings stored with a dictionary stay dictionaries: keys are looked up per dictionary entry and
    # the writer is handed dictionaries (bin-pack's fast path), nothing is decoded and hashed again.
    rows_in = (b for f in task.files for b in _checked(
        _batches(io, task, f, throttle, SPILL_BATCH_ROWS, keep_dictionaries=SPILL_DICTIONARIES, counts=counts),
        inputs))
    def resort(table: pa.Table) -> pa.Array:  # the key packs a prefix of the order: sort by all of it
        keys = table.select(names)
        plain = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in keys.columns]
        return sort_indices(pa.table(plain, names=names), list(task.sort_keys))

    # A range is reordered a sink's worth of rows at a time: the range plus one slice in memory.
    spill_sorted(plan, rows_in, sink.write, resort=None if plan.key.complete else resort, take_rows=SINK_ROWS)
    return "spill-zorder" if zorder else "spill-sort"


def _row_bytes(io: FileIO, task: RewriteTask, throttle: Callable[[int], None] | None) -> float:
    """Arrow bytes per row of the group, from the first batch that holds a live row (each input
    peeked at is charged as a whole file, COMPACT-25)."""
    for f in task.files:
        batches = _batches(io, task, f, throttle, 8192, keep_dictionaries=SPILL_DICTIONARIES)  # as held
        try:
            for batch in batches:
                if batch.num_rows:
                    return batch.nbytes / batch.num_rows
        finally:
            batches.close()
    return 0.0


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
