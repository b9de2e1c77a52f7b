"""Reading the planned files of a filtered scan in batches (spec/reading.md READ-8, READ-16).

A selective scan of many small files spends much of its time on what each file costs besides
decoding: a dozen compute calls to evaluate the filter on a few thousand rows each. Here the
files are read in batches of up to :data:`BATCH_FILES` files, in three steps:

1. per file, in parallel: open it, check it is the table's (READ-12), skip row groups
   (READ-11), drop the filter's leaves its statistics decide (READ-13) and read the residual
   filter's columns (:meth:`FileReader.start`); a file the statistics decide is done here;
2. per residual filter: the filter columns of every file of the batch left with that residual
   are evaluated at once, as one table whose chunks are the files (EXPR-10, READ-16). Which
   rows of a table satisfy a filter does not depend on the other rows next to them, so each
   file gets exactly the positions a read of it alone finds;
3. per file with a matching row, in parallel: drop the deleted rows (READ-14) and read the
   other projected columns of only the matching rows (READ-15, :meth:`FileReader.finish`).

Example:
    >>> tables = read_batched(reader, [(location, data_file), ...], threads=4)
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import arrow_values
from lakefmt.file_reader import FileReader, PendingFile
from lakefmt.manifest import DataFile
from lakefmt.row_filters import matching_positions
from lakefmt.row_masks import IntValues
from lakefmt.threads import thread_map

__all__ = ["BATCH_FILES", "BATCH_ROWS", "REMOTE_BATCH_FILES", "read_batched"]

# Files whose filter columns are held at once (each open until its batch is done), and the most
# rows of filter columns a batch gathers before it is evaluated. A file of an object store open
# holds its read-ahead buffer: fewer of those at once.
BATCH_FILES = 128
REMOTE_BATCH_FILES = 16
BATCH_ROWS = 1 << 22
SMALL_FILE_ROWS = 1 << 17  # files with more rows are read alone (see read_filtered)


def read_filtered(reader: FileReader, files: Sequence[tuple[str, DataFile]], threads: int) -> list[pa.Table]:
    """The matching rows of each of ``files``, in order: the small files (at most :data:`SMALL_FILE_ROWS` rows)
    in batches (:func:`read_batched`), every other file alone.

    A large file gains nothing from company: its own row groups, pages and column threads do
    the work (READ-11, READ-15), and batching it was measured slower (7 files of ~1M rows after
    a bin-pack: 409 ms batched against 158 ms file by file).
    """
    small = [i for i, (_, f) in enumerate(files) if f.record_count <= SMALL_FILE_ROWS]
    if len(small) < 2:
        small = []
    out: list[pa.Table | None] = [None] * len(files)
    for i, table in zip(small, read_batched(reader, [files[i] for i in small], threads)):
        out[i] = table
    alone = [i for i in range(len(files)) if out[i] is None]

    def read(i: int) -> pa.Table:
        location, data_file = files[i]
        return reader.read(location, expected_rows=data_file.record_count, data_file=data_file)

    for i, table in zip(alone, thread_map(read, alone, threads)):
        out[i] = table
    return out  # type: ignore[return-value]


def read_batched(reader: FileReader, files: Sequence[tuple[str, DataFile]], threads: int) -> list[pa.Table]:
    """The matching rows of each of ``files`` (``(location, manifest entry)`` pairs), in order:
    what ``reader.read`` returns for each, read in batches (see the module docstring)."""
    out: list[pa.Table] = []
    start, most = 0, BATCH_FILES if reader.local else REMOTE_BATCH_FILES
    while start < len(files):
        end, rows = start, 0
        while end < len(files) and end - start < most and (end == start or rows < BATCH_ROWS):
            rows += files[end][1].record_count
            end += 1
        out += _read_batch(reader, files[start:end], threads)
        start = end
    return out


def _read_batch(reader: FileReader, files: Sequence[tuple[str, DataFile]], threads: int) -> list[pa.Table]:
    opened: list[PendingFile] = []

    def start(item: tuple[str, DataFile]) -> pa.Table | PendingFile:
        location, data_file = item
        step = reader.start(location, expected_rows=data_file.record_count, data_file=data_file)
        if isinstance(step, PendingFile):
            opened.append(step)  # list.append is atomic: closed below whatever happens
        return step

    try:
        steps = _chunked_map(start, files, threads)
        pending = [(i, s) for i, s in enumerate(steps) if isinstance(s, PendingFile)]
        positions = _evaluate(reader, [s for _, s in pending])
        found = [(i, s, p) for (i, s), p in zip(pending, positions) if len(p)]
        for i, _ in pending:
            steps[i] = arrow_values.empty_table(reader.output)
        tables = thread_map(lambda hit: reader.finish(hit[1], hit[2]), found, threads)
        for (i, _, _), table in zip(found, tables):
            steps[i] = table
        return steps  # type: ignore[return-value]
    finally:
        for s in opened:
            s.source.close()


def _chunked_map(fn: Any, items: Sequence[Any], threads: int) -> list[Any]:
    """``[fn(item) for item in items]`` on at most ``threads`` threads, each given a run of items in turn:
    one hand-off per run rather than per item (a hand-off costs about what opening a small file does)."""
    width = max(1, min(threads, len(items)))
    runs = [items[i::width] for i in range(width)]
    done = thread_map(lambda run: [fn(item) for item in run], runs, width)
    out: list[Any] = [None] * len(items)
    for i, results in enumerate(done):
        out[i::width] = results
    return out


def _evaluate(reader: FileReader, pending: list[PendingFile]) -> list[pa.Array]:
    """Per pending file, the positions of its keys where its residual filter is TRUE; the files
    with the same residual and the same key schema are evaluated as one table."""
    groups: list[tuple[Any, pa.Schema, list[int]]] = []
    for i, p in enumerate(pending):
        for row_filter, schema, members in groups:
            if row_filter is p.row_filter and schema.equals(p.keys.schema):
                members.append(i)
                break
        else:
            groups.append((p.row_filter, p.keys.schema, [i]))
    out: list[pa.Array] = [None] * len(pending)  # type: ignore[list-item]
    for row_filter, _, members in groups:
        if len(members) == 1:
            out[members[0]] = reader.matching_positions(pending[members[0]])
            continue
        tables = [pending[i].keys for i in members]
        together = pa.concat_tables(tables)
        found = matching_positions(row_filter, together, reader.column_name, prepared=True)
        for i, part in zip(members, _split(found, [t.num_rows for t in tables])):
            out[i] = part
    return out


def _split(positions: pa.Array, sizes: list[int]) -> list[pa.Array]:
    """Ascending positions over tables of ``sizes`` rows laid end to end, as positions within each."""
    values: Any = positions.to_pylist() if len(positions) <= 1 << 16 else IntValues(positions)
    parts, offset, lo = [], 0, 0
    for size in sizes:
        offset += size
        hi = bisect.bisect_left(values, offset, lo)
        part = positions.slice(lo, hi - lo)
        first = offset - size
        parts.append(pc.subtract(part, arrow_values.scalar(first, part.type)) if first and len(part) else part)
        lo = hi
    return parts
