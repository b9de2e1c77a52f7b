"""Writing data files: conform, fan out by partition, roll at the target size (spec/commits.md §Writers).

:func:`conform` checks incoming Arrow data against the table schema and casts it
(WRITE-3), refusing missing required and extra columns (WRITE-8) and values out of
range (TYPE-10) before any file is written. :func:`write_data_files` splits rows by
partition tuple (WRITE-4), sorts each partition by the table's sort order, writes
ZSTD Parquet files that roll over when the bytes actually written reach the target
size (WRITE-5), and describes each file with statistics read back from the footer
it wrote (WRITE-6).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt.conversions import US_PER_DAY, physical_range, to_physical
from lakefmt.encoding import MIN_SAMPLE_ROWS, Encodings, choose_encodings
from lakefmt.encoding_reuse import CHOSEN, reusable
from lakefmt.errors import SchemaError, SchemaMismatchError, ValueOutOfRangeError
from lakefmt.footer import data_file_from_footer
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.partitioning import PartitionSpec, date_str, time_str
from lakefmt.properties import PAGE_SIZE_BYTES
from lakefmt.schema import Field, Schema
from lakefmt.sorting import SortOrder, sort_indices
from lakefmt.threads import thread_map
from lakefmt.types import can_write, from_arrow

MIN_CHUNK_ROWS = 1024
# The Parquet writer's bytes are gathered in a native buffer of this size before they reach the
# Python file object: a write of a few pages would otherwise take the GIL for each call, and wait
# for it while another thread runs Python (a commit, another rewrite's bookkeeping).
OUTPUT_BUFFER_BYTES = 4 * 1024 * 1024


def page_check_rows(page_size_bytes: int) -> int:
    """Rows between two checks of a data page's size (WRITE-10): ``page_size_bytes / 512``, from 64 to 1,024.

    pyarrow closes a page only between batches of ``write_batch_size`` rows (default 1,024),
    so its pages of 200-byte strings held 2,048 rows whatever the page size asked. Checking
    every ``page_size / 512`` rows ends a page of values up to about 500 bytes within a few
    batches of the size asked: with 64 KiB pages (sorted outputs, COMPACT-16) a page of
    200-byte strings holds 384 rows, and a selective read decoding one such page costs 0.11
    instead of 0.34 ms (pyarrow 26, measured on the telemetry dataset) for the same bytes.
    """
    return max(64, min(1024, page_size_bytes // 512))


@dataclass(frozen=True)
class WriteOptions:
    """How data files are written; defaults come from table properties (META-12)."""

    target_file_size: int
    compression_level: int
    row_group_rows: int
    min_compression_saving: float = 0.1  # below it a column is stored uncompressed (WRITE-7); 0: never
    page_size_bytes: int = int(PAGE_SIZE_BYTES.default)  # a data page ends past this many bytes (WRITE-10)
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
    """Check ``data`` against ``schema`` and cast it to the table's Arrow types (WRITE-3, WRITE-8).

    Refused, before anything is written: columns the table does not have, missing
    required columns, values whose type cannot be stored without loss (e.g. double
    into long, naive timestamps into timestamptz), values outside the range of their
    column (TYPE-10, :class:`ValueOutOfRangeError`), nulls in required columns.
    Missing optional columns are written as nulls (WRITE-8).
    """
    table = to_arrow_table(data)
    names = set(table.column_names)
    if len(names) != len(table.column_names):
        raise SchemaMismatchError(f"data has duplicate column names: {table.column_names}")
    extra = [n for n in table.column_names if n not in set(schema.names)]
    if extra:
        raise SchemaMismatchError(_extra_columns_message(extra, table, schema))
    missing_required = [f.name for f in schema.fields if f.required and f.name not in names]
    if missing_required:
        raise SchemaMismatchError(f"required column(s) {missing_required} are missing from the data "
                                  f"(WRITE-8); the data has {table.column_names}. Add them to the data, or make "
                                  "them optional first with t.update_schema().make_optional(NAME).commit()")
    columns = []
    for field in schema.fields:
        target = field.type.to_arrow()
        if field.name not in names:
            columns.append(pa.nulls(table.num_rows, target))  # optional column missing: nulls (WRITE-8)
            continue
        column = table.column(field.name)
        try:
            source_type = from_arrow(column.type)
        except SchemaError as exc:
            raise SchemaMismatchError(f"column {field.name!r}: {exc}") from exc
        if not can_write(source_type, field.type):
            raise SchemaMismatchError(f"column {field.name!r} has type {source_type} ({column.type}); "
                                      f"the table stores {field.type}")
        if column.type != target:
            try:
                column = column.cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(f"column {field.name!r} cannot be stored as {field.type}: {exc}"
                                          ) from exc
        check_range(field, column)
        if field.required and column.null_count:
            raise SchemaMismatchError(f"required column {field.name!r} has {column.null_count} null values")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema.to_arrow())


def _extra_columns_message(extra: list[str], data: pa.Table, schema: Schema) -> str:
    """Why columns the table lacks are refused, and how to add them (WRITE-8)."""
    adds = "; ".join(f"u.add_column({name!r}, pa.{_arrow_type_name(data.column(name).type)})"
                     for name in extra)
    return (f"data has column(s) {extra} that the table does not have (WRITE-8); table columns: "
            f"{schema.names}. Drop them from the data, or add them to the table first (the CLI has no "
            f"command for this), in Python: with t.update_schema() as u: {adds}")


_CONSTRUCTORS = {"bool": "bool_()", "int32": "int32()", "int64": "int64()", "float": "float32()",
                 "double": "float64()", "date32[day]": "date32()", "time64[us]": 'time64("us")',
                 "timestamp[us]": 'timestamp("us")', "timestamp[us, tz=UTC]": 'timestamp("us", tz="UTC")',
                 "string": "string()", "large_string": "string()", "binary": "binary()",
                 "large_binary": "binary()"}


def _arrow_type_name(arrow_type: pa.DataType) -> str:
    """The ``pyarrow`` constructor (``int64()``) of the type a column of ``arrow_type`` data gets (TYPE-4)."""
    try:
        stored = from_arrow(arrow_type).to_arrow()
    except SchemaError:
        return f"<{arrow_type} cannot be stored (TYPE-4)>"
    if pa.types.is_decimal(stored):
        width = 128 if stored.precision <= 38 else 256
        return f"decimal{width}({stored.precision}, {stored.scale})"
    return _CONSTRUCTORS.get(str(stored), str(stored))


def check_range(field: Field, column: pa.ChunkedArray | pa.Array) -> None:
    """Refuse a column (already of the table's Arrow type) holding a value out of range (TYPE-10).

    One ``min_max`` per date, time, timestamp or decimal column; other types pass.

    Raises:
        ValueOutOfRangeError: names the column, the first offending extreme and the range.
    """
    bounds = physical_range(field.type)
    if bounds is None or len(column) == column.null_count:
        return
    name = field.type.name
    if name == "date":
        values = column.cast(pa.int32())
    elif name == "decimal":
        values = column
    else:
        values = column.cast(pa.int64())
    extremes = pc.min_max(values)
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    lowest, highest = bounds
    bad = low if low < lowest else high if high > highest else None
    if bad is None:
        return
    raise ValueOutOfRangeError(
        f"column {field.name!r} holds the {field.type} value {_render(name, bad, raw=True)}, outside the "
        f"range a table can store: {_render(name, lowest)} to {_render(name, highest)} (TYPE-10). Nothing "
        "was written; correct or drop such rows and write again", column=field.name, value=bad)


def _render(type_name: str, value: Any, *, raw: bool = False) -> str:
    """A physical value for a message, in ISO form whatever its magnitude; ``raw`` adds the number."""
    if type_name == "date":
        text, unit = date_str(value), "days since 1970-01-01"
    elif type_name == "time":
        text, unit = (time_str(value) if value >= 0 else ""), "us since midnight"
    elif type_name in ("timestamp", "timestamptz"):
        days, micros = divmod(value, US_PER_DAY)
        zone = "+00:00" if type_name == "timestamptz" else ""
        text, unit = f"{date_str(days)}T{time_str(micros)}{zone}", "us since 1970-01-01"
    else:
        return str(value)
    if not raw:
        return text
    return f"{text} ({value} {unit})" if text else f"{value} {unit}"


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with dictionary-typed fields replaced by their value type."""
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
                     metadata=schema.metadata)


def write_data_files(io: FileIO, location: str, data: pa.Table, schema: Schema, spec: PartitionSpec,
                     sort_order: SortOrder, options: WriteOptions, *, sync: bool = True) -> list[DataFile]:
    """Write conformed ``data`` as data files under ``location``; return their descriptions.

    The files and their folder entries are durable when this returns (COMMIT-20), unless
    ``sync=False``: then they await ``io.sync()``, which the commit of the same ``io``
    calls before its swap, so that they become durable together with the commit's
    metadata files in one go. If any file fails, every file of this call is deleted, a
    partly written one included, and the error is raised (COMMIT-21).
    """
    if data.num_rows == 0:
        return []
    slices = list(split_by_partition(data, schema, spec, sort_order))
    stem = options.stem()
    sort_order_id = None if sort_order.is_unsorted else sort_order.order_id
    memo_key = (location, data.schema, options.compression_level, options.min_compression_saving)
    writers = [RollingFileWriter(io, location, schema, spec, values, options, sort_order_id=sort_order_id,
                                 stem=f"{stem}-{index:05d}", sync=False,
                                 encodings=CHOSEN.get(memo_key) if reusable(rows.num_rows) else None)
               for index, (values, rows) in enumerate(slices)]

    def run(index: int) -> list[DataFile]:
        writer, rows = writers[index], slices[index][1]
        chosen_here = writer.encodings is None
        writer.write(rows)
        if chosen_here and rows.num_rows >= MIN_SAMPLE_ROWS and writer.encodings is not None:
            CHOSEN.put(memo_key, writer.encodings)
        return writer.close()

    try:
        written = thread_map(run, range(len(slices)), min(os.cpu_count() or 2, 8))
        if sync:
            io.sync()
    except BaseException:
        for writer in writers:  # thread_map has waited for every job: none is still writing
            writer.abort()
        raise
    return [f for files in written for f in files]


def split_by_partition(data: pa.Table, schema: Schema, spec: PartitionSpec, sort_order: SortOrder
                       ) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """Yield ``(partition values, rows)`` per partition tuple, rows sorted by ``sort_order`` (WRITE-4)."""
    keys: list[tuple[str, str, str]] = []
    partition_cols = spec.compute(data, schema) if not spec.is_unpartitioned else None
    if partition_cols is not None and sort_order.is_unsorted and _one_tuple(partition_cols):
        # A small append usually falls in one partition: its rows need no sort and no copy (10,000
        # telemetry rows: 0.5 ms, most of it copying their 200-byte strings).
        types = [t for _, t in spec.partition_type(schema)]
        yield tuple(to_physical(t, c[0].as_py()) for c, t in zip(partition_cols.columns, types)), data
        return
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


def _one_tuple(partition_cols: pa.Table) -> bool:
    """Whether every row has the same partition tuple, nulls included (PART-9)."""
    try:
        return all(pc.count_distinct(column, mode="all").as_py() == 1 for column in partition_cols.columns)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False  # a type count_distinct does not know: the general path splits it


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
                 encodings: Encodings | None = None, sync: bool = True) -> None:
        self.io, self.location, self.schema, self.spec = io, location, schema, spec
        self.encodings = encodings
        self.partition, self.options, self.sort_order_id = partition, options, sort_order_id
        self.prefix = prefix if prefix is not None else (
            "" if spec.is_unpartitioned else spec.partition_path(partition, schema))
        self.stem = stem or options.stem()
        self._arrow_schema = schema.to_arrow()
        self._file_schema = self._arrow_schema
        self._counter = 0
        self._file: Any = None  # the IO's output file
        self._sink: pa.BufferedOutputStream | None = None  # a native buffer over it, written by the writer
        self._writer: pq.ParquetWriter | None = None
        self._rel = ""
        self._rows_in_file = 0
        self._bytes_per_row: float | None = None
        self.files: list[DataFile] = []
        self.paths_started: list[str] = []
        self._sync = sync

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        """Append rows of the table's Arrow schema; string and binary columns may be dictionary arrays."""
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        offset = 0
        while offset < rows.num_rows:
            if self._writer is None:
                if self.encodings is None:
                    self.encodings = choose_encodings(rows.slice(offset), self.options.compression_level,
                                                      self.options.min_compression_saving,
                                                      self.options.page_size_bytes)
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
        self._file = self.io.open_output(f"{self.location}/{self._rel}")
        self._sink = pa.BufferedOutputStream(pa.PythonFile(self._file, mode="w"), OUTPUT_BUFFER_BYTES)
        self._writer = pq.ParquetWriter(self._sink, self._file_schema,
                                        compression=self.encodings.compression,
                                        compression_level=self.encodings.compression_level(
                                            self.options.compression_level), write_statistics=True,
                                        use_dictionary=self.encodings.use_dictionary,
                                        column_encoding=self.encodings.column_encoding, store_schema=False,
                                        data_page_size=self.options.page_size_bytes,
                                        write_batch_size=page_check_rows(self.options.page_size_bytes))
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
        self._sink.close()  # flushes the buffer and closes the file under it
        self._writer, self._sink, self._file = None, None, None
        self.files.append(data_file_from_footer(self._rel, self.partition, size, footer, self.schema, self.spec,
                                                self.sort_order_id))

    def close(self) -> list[DataFile]:
        """Finish the last file; the files and their folder entries are durable unless the caller
        syncs them (``sync=False``, COMMIT-20)."""
        if self._writer is not None:
            self._finish()
        if self._sync:
            self.io.sync()
        return self.files

    def abort(self) -> None:
        """Close and delete everything this writer started, a partly written file too (COMMIT-21).

        Best effort: a failure here never hides the error that caused the abort.
        """
        for closable in (self._writer, self._sink, self._file):
            if closable is not None:
                with contextlib.suppress(Exception):
                    closable.close()
        self._writer, self._sink, self._file = None, None, None
        for path in self.paths_started:
            with contextlib.suppress(OSError):
                self.io.delete(path)


def _next_chunk_rows(rows: pa.Table, offset: int, options: WriteOptions, written_bytes: int,
                     bytes_per_row: float | None) -> int:
    """Rows to write next so the file rolls close to the target by bytes actually written."""
    remaining_rows = rows.num_rows - offset
    if bytes_per_row is None:  # first chunk: in-memory size over-estimates the Parquet size
        bytes_per_row = max(rows.nbytes / max(rows.num_rows, 1), 1.0)
    budget = max(options.target_file_size - written_bytes, 0)
    wanted = int(budget / bytes_per_row) + 1
    return max(1, min(remaining_rows, options.row_group_rows, max(wanted, MIN_CHUNK_ROWS)))
