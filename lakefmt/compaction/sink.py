"""What a rewrite hands its Parquet writer, and the check that it is the rows read (COMPACT-16, COMPACT-17).

:class:`Sink` buffers the batches a rewrite produces into chunks of about a row group and
hands them to a :class:`~lakefmt.write.RollingFileWriter`; the first chunk of a run's
first output chooses the encodings every output of the run takes (WRITE-11). What the
writer is given is recorded for COMPACT-17 by :class:`Concatenated` (a bin-pack: the
chunk must be made of the very arrays read, in order) or :class:`Hashed` (a reordering
rewrite: the chunks' rows are hashed).
"""

from __future__ import annotations

import pyarrow as pa

from lakefmt.compaction.verify import EMPTY, Checksum, checksum, holds_parts
from lakefmt.encoding import SharedChoice
from lakefmt.errors import ChecksumMismatchError
from lakefmt.write import RollingFileWriter, plain_schema

FLUSH_BYTES = 64 * 1024 * 1024  # a chunk is handed to the writer at this many bytes at the latest


class Sink:
    """Buffers small batches so the writer sees chunks of about a row group (few, full row groups).

    The writer chooses the output encodings from the first chunk (WRITE-7), so that
    chunk is a whole row group's worth of rows, not one small input's; with ``shared``
    the first chunk of the run's first output chooses them for every output (WRITE-11, COMPACT-16).
    """

    def __init__(self, writer: RollingFileWriter, row_group_rows: int,
                 check: Concatenated | Hashed | None = None, shared: SharedChoice | None = None) -> None:
        self.writer = writer
        self.check = check
        self.shared = shared
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
        parts = self._parts
        table = concat(parts)
        self._parts, self._rows, self._bytes = [], 0, 0
        if self.check is not None:
            self.check.add(parts, table)  # exactly what the Parquet writer is given (COMPACT-17)
        if self.shared is not None and self.writer.encodings is None:
            options = self.writer.options
            self.writer.encodings = self.shared.choose(table, options.compression_level,
                                                       options.min_compression_saving, options.page_size_bytes)
        self.writer.write(table)


class Hashed:
    """The checksum of the tables handed to the writer, each hashed as it goes (nothing is held)."""

    def __init__(self) -> None:
        self.value = EMPTY

    def add(self, parts: list[pa.Table], table: pa.Table) -> None:
        self.value = self.value + checksum(table)


class Concatenated:
    """Bin-pack's check that each table handed to the writer holds the rows of its parts, the
    batches read, in order (COMPACT-17); ``value`` counts the rows so handed over.

    The table is made of the very arrays read (:func:`holds_parts`), so nothing needs
    hashing; where that cannot be established (a column cast to a common type), the parts
    and the table are hashed and must agree. The rows read are counted on the other side
    and the two counts compared (the rows read must also match the manifests, check 1).
    """

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.value = Checksum(0, None)
        self.hashed_rows = 0  # rows whose concatenation had to be checked by hashing

    def add(self, parts: list[pa.Table], table: pa.Table) -> None:
        if not holds_parts(parts, table):
            before, after = sum(map(checksum, parts), EMPTY), checksum(table)
            if before != after:
                raise ChecksumMismatchError(
                    f"group {self.group_id}: the rows handed to the writer ({after}) are not the rows read "
                    f"({before}); the outputs were deleted and nothing was committed")
            self.hashed_rows += table.num_rows
        self.value = Checksum(self.value.rows + table.num_rows, None)


def concat(parts: list[pa.Table]) -> pa.Table:
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
