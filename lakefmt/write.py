"""Writing data files: conform, fan out by partition, roll at the target size (spec/commits.md §Writers).

:func:`conform` checks incoming Arrow data against the table schema and casts it
(WRITE-3). :func:`write_data_files` splits rows by partition tuple (WRITE-4),
sorts each partition by the table's sort order, writes ZSTD Parquet files that
roll over when the bytes actually written reach the target size (WRITE-5), and
describes each file with statistics read back from the footer it wrote (WRITE-6).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt.conversions import to_physical
from lakefmt.encoding import Encodings, choose_encodings
from lakefmt.errors import SchemaError, SchemaMismatchError
from lakefmt.footer import data_file_from_footer
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema
from lakefmt.sorting import SortOrder, sort_indices
from lakefmt.threads import thread_map
from lakefmt.types import can_write, from_arrow

MIN_CHUNK_ROWS = 1024


@dataclass(frozen=True)
class WriteOptions:
    """How data files are written; defaults come from table properties (META-12)."""

    target_file_size: int
    compression_level: int
    row_group_rows: int
    min_compression_saving: float = 0.1  # below it a column is stored uncompressed (WRITE-7); 0: never
    kind: str = "part"  # file-name prefix: "part" for writes, "compact" for compaction (LAYOUT-6)
    token: str | None = None  # the writer token of a write-intent lease, carried in file names (CAT-10)

    def stem(self) -> str:
        """``{kind}-{token}-{unique}``: the start of the names of one write's files (LAYOUT-6)."""
        unique = uuid.uuid4().hex
        return f"{self.kind}-{self.token}-{unique[:16]}" if self.token else f"{self.kind}-{unique}"


def to_arrow_table(data: Any) -> pa.Table:
    """Accept a pyarrow Table or RecordBatch, a list of batches, or a pandas DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if hasattr(data, "to_arrow") and callable(data.to_arrow):
        return to_arrow_table(data.to_arrow())
    if type(data).__name__ == "DataFrame" and hasattr(data, "columns"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, list) and all(isinstance(b, pa.RecordBatch) for b in data):
        return pa.Table.from_batches(data)
    raise SchemaMismatchError(f"cannot write {type(data).__name__}: pass a pyarrow Table or RecordBatch, "
                              "or a pandas DataFrame")


def conform(data: Any, schema: Schema) -> pa.Table:
    """Check ``data`` against ``schema`` and cast it to the table's Arrow types (WRITE-3).

    Refused: columns the table does not have, values whose type cannot be stored
    without loss (e.g. double into long, naive timestamps into timestamptz), nulls
    in required columns. Missing optional columns are written as nulls.
    """
    table = to_arrow_table(data)
    names = set(table.column_names)
    if len(names) != len(table.column_names):
        raise SchemaMismatchError(f"data has duplicate column names: {table.column_names}")
    extra = names - set(schema.names)
    if extra:
        raise SchemaMismatchError(f"data has columns the table does not have: {sorted(extra)}; "
                                  f"table columns: {schema.names} (add them with update_schema first)")
    columns = []
    for field in schema.fields:
        target = field.type.to_arrow()
        if field.name not in names:
            if field.required:
                raise SchemaMismatchError(f"required column {field.name!r} is missing from the data")
            columns.append(pa.nulls(table.num_rows, target))
            continue
        column = table.column(field.name)
        try:
            source_type = from_arrow(column.type)
        except SchemaError as exc:
            raise SchemaMismatchError(f"column {field.name!r}: {exc}") from None
        if not can_write(source_type, field.type):
            raise SchemaMismatchError(f"column {field.name!r} has type {source_type} ({column.type}); "
                                      f"the table stores {field.type}")
        if column.type != target:
            try:
                column = column.cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(f"column {field.name!r} cannot be stored as {field.type}: {exc}"
                                          ) from None
        if field.required and column.null_count:
            raise SchemaMismatchError(f"required column {field.name!r} has {column.null_count} null values")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema.to_arrow())


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with dictionary-typed fields replaced by their value type."""
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
                     metadata=schema.metadata)


def write_data_files(io: FileIO, location: str, data: pa.Table, schema: Schema, spec: PartitionSpec,
                     sort_order: SortOrder, options: WriteOptions) -> list[DataFile]:
    """Write conformed ``data`` as data files under ``location``; return their descriptions."""
    if data.num_rows == 0:
        return []
    slices = list(split_by_partition(data, schema, spec, sort_order))
    stem = options.stem()
    jobs = [(i, values, part) for i, (values, part) in enumerate(slices)]

    sort_order_id = None if sort_order.is_unsorted else sort_order.order_id

    def run(job: tuple[int, tuple[Any, ...], pa.Table]) -> list[DataFile]:
        index, values, part = job
        writer = RollingFileWriter(io, location, schema, spec, values, options, sort_order_id=sort_order_id,
                                   stem=f"{stem}-{index:05d}")
        writer.write(part)
        return writer.close()

    return [f for files in thread_map(run, jobs, min(os.cpu_count() or 2, 8)) for f in files]


def split_by_partition(data: pa.Table, schema: Schema, spec: PartitionSpec, sort_order: SortOrder
                       ) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """Yield ``(partition values, rows)`` per partition tuple, rows sorted by ``sort_order`` (WRITE-4)."""
    keys: list[tuple[str, str, str]] = []
    partition_cols = spec.compute(data, schema) if not spec.is_unpartitioned else None
    work = data
    if partition_cols is not None:
        tmp_names = [f"__p{i}" for i in range(partition_cols.num_columns)]
        for name, column in zip(tmp_names, partition_cols.columns):
            work = work.append_column(name, column)
        keys += [(n, "ascending", "at_end") for n in tmp_names]
    if not sort_order.is_unsorted:
        keys += sort_order.arrow_sort_keys(schema)
    if keys:
        indices = sort_indices(work, keys)
        work = work.take(indices)
    if partition_cols is None:
        yield (), work
        return
    part_names = [f"__p{i}" for i in range(partition_cols.num_columns)]
    starts = [0, *_run_starts(work, part_names), work.num_rows]
    types = [t for _, t in spec.partition_type(schema)]
    rows = work.drop_columns(part_names)
    for start, stop in zip(starts, starts[1:]):
        values = tuple(to_physical(t, work.column(n)[start].as_py()) for n, t in zip(part_names, types))
        yield values, rows.slice(start, stop - start)


def _run_starts(table: pa.Table, names: list[str]) -> list[int]:
    if table.num_rows < 2:
        return []
    changed = None
    for name in names:
        col = table.column(name).combine_chunks()
        a, b = col.slice(1), col.slice(0, len(col) - 1)
        neq = pc.not_equal(a, b)
        neq = pc.if_else(pc.is_null(neq), pc.xor(pc.is_null(a), pc.is_null(b)), neq)
        changed = neq if changed is None else pc.or_(changed, neq)
    return [int(i) + 1 for i in pc.indices_nonzero(changed).to_pylist()]


class RollingFileWriter:
    """Writes rows of one partition into data files that roll at the target size (WRITE-5).

    Rows may arrive in any number of ``write`` calls (a stream of batches); the
    writer never holds more than one chunk. ``close()`` returns the files written,
    each described from its own footer (WRITE-6). Column encodings are chosen from the
    first rows written (:func:`lakefmt.encoding.choose_encodings`, WRITE-7) unless
    ``encodings`` is given.

    Example:
        >>> w = RollingFileWriter(io, location, schema, spec, partition, options)
        >>> for batch in batches: w.write(batch)
        >>> files = w.close()
    """

    def __init__(self, io: FileIO, location: str, schema: Schema, spec: PartitionSpec,
                 partition: tuple[Any, ...], options: WriteOptions, *, sort_order_id: int | None = None,
                 prefix: str | None = None, stem: str | None = None,
                 encodings: Encodings | None = None) -> None:
        self.io, self.location, self.schema, self.spec = io, location, schema, spec
        self.encodings = encodings
        self.partition, self.options, self.sort_order_id = partition, options, sort_order_id
        self.prefix = prefix if prefix is not None else (
            "" if spec.is_unpartitioned else spec.partition_path(partition, schema))
        self.stem = stem or options.stem()
        self._arrow_schema = schema.to_arrow()
        self._file_schema = self._arrow_schema
        self._counter = 0
        self._sink: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._rel = ""
        self._rows_in_file = 0
        self._bytes_per_row: float | None = None
        self.files: list[DataFile] = []
        self.paths_started: list[str] = []

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        """Append rows of the table's Arrow schema; string and binary columns may be dictionary arrays."""
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        offset = 0
        while offset < rows.num_rows:
            if self._writer is None:
                if self.encodings is None:
                    self.encodings = choose_encodings(rows.slice(offset), self.options.compression_level,
                                                      self.options.min_compression_saving)
                self._open(rows.schema)
            if not rows.schema.equals(self._file_schema):
                rows = self._as_file_schema(rows)
            written_bytes = self._sink.tell()
            chunk = _next_chunk_rows(rows, offset, self.options, written_bytes, self._bytes_per_row)
            self._writer.write_table(rows.slice(offset, chunk), row_group_size=self.options.row_group_rows)
            offset += chunk
            self._rows_in_file += chunk
            self._bytes_per_row = max(self._sink.tell(), 1) / self._rows_in_file
            if self._sink.tell() >= self.options.target_file_size:
                self._finish()

    def _open(self, rows_schema: pa.Schema) -> None:
        # Dictionary arrays are written as they are: the dictionary is not rebuilt value by value.
        # The Parquet schema is the same either way; the Arrow schema is not stored (WRITE-1).
        dictionaries = plain_schema(rows_schema).equals(self._arrow_schema)
        self._file_schema = rows_schema if dictionaries else self._arrow_schema
        self._rel = "/".join(p for p in ("data", self.prefix, f"{self.stem}-{self._counter:05d}.parquet") if p)
        self._counter += 1
        self.paths_started.append(f"{self.location}/{self._rel}")
        self._sink = self.io.open_output(f"{self.location}/{self._rel}")
        self._writer = pq.ParquetWriter(self._sink, self._file_schema,
                                        compression=self.encodings.compression,
                                        compression_level=self.encodings.compression_level(
                                            self.options.compression_level), write_statistics=True,
                                        use_dictionary=self.encodings.use_dictionary,
                                        column_encoding=self.encodings.column_encoding, store_schema=False)
        self._rows_in_file = 0

    def _as_file_schema(self, rows: pa.Table) -> pa.Table:
        if not plain_schema(rows.schema).equals(self._arrow_schema):
            raise SchemaError(f"rows of schema {rows.schema} do not match the table's {self._arrow_schema}")
        return rows.cast(self._file_schema)

    def _finish(self) -> None:
        assert self._writer is not None
        self._writer.close()
        size = self._sink.tell()
        footer = self._writer.writer.metadata
        self._sink.close()
        self._writer, self._sink = None, None
        self.files.append(data_file_from_footer(self._rel, self.partition, size, footer, self.schema, self.spec,
                                                self.sort_order_id))

    def close(self) -> list[DataFile]:
        if self._writer is not None:
            self._finish()
        return self.files

    def abort(self) -> None:
        """Close and delete everything this writer started (nothing was committed)."""
        if self._writer is not None:
            try:
                self._writer.close()
                self._sink.close()
            except Exception:  # noqa: BLE001 - best effort; the files are deleted next
                pass
            self._writer, self._sink = None, None
        self.io.delete_many(self.paths_started)


def _next_chunk_rows(rows: pa.Table, offset: int, options: WriteOptions, written_bytes: int,
                     bytes_per_row: float | None) -> int:
    """Rows to write next so the file rolls close to the target by bytes actually written."""
    remaining_rows = rows.num_rows - offset
    if bytes_per_row is None:  # first chunk: in-memory size over-estimates the Parquet size
        bytes_per_row = max(rows.nbytes / max(rows.num_rows, 1), 1.0)
    budget = max(options.target_file_size - written_bytes, 0)
    wanted = int(budget / bytes_per_row) + 1
    return max(1, min(remaining_rows, options.row_group_rows, max(wanted, MIN_CHUNK_ROWS)))
