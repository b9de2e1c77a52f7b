"""A read of local data files evaluated by DuckDB (spec/reading.md READ-18).

A selective query over many files spends its time decoding: pyarrow decodes whole pages of the
filter columns and, with late materialization and sparse page reads (READ-13, READ-15), still
whole pages of the other columns around each matching row. DuckDB's Parquet reader evaluates the
filter while it decodes and fetches the other columns only for the rows that pass. Measured on
the benchmarks' selective queries over the 100 planned files of 1,000-file tables (pyarrow 26,
DuckDB 2.0, 2 shared cores, CPU per query, medians of 11): telemetry (10,000 rows a file, 23 rows
found) 71-77 ms through pyarrow, 46-48 ms this way, 48-53 ms for DuckDB's own ``read_parquet`` of
the same files; artemis (75,000 rows a file, ~75 matches a file spread over every page) 250-310 ms,
125-156 ms and 125-149 ms.

:func:`read_matching` has DuckDB read the planned files in one ``read_parquet`` query with the
filter as its WHERE clause (:mod:`lakefmt.sql_filters`), and returns None, so the caller reads
the files itself, unless that query returns exactly what READ-6..READ-14 return:

* the files are local, enough of them or of their rows (:data:`MIN_FILES`, or :data:`MIN_ROWS` left
  after row-group pruning, :func:`_rows_after_pruning`; for a read without a filter,
  :data:`MIN_FULL_FILES`), and no path holds a glob character;
* the filter has an exact SQL translation (none filters a ``float`` or ``double`` column); every
  projected or filtered column has a type DuckDB hands back to Arrow with the same values
  (:data:`lakefmt.sql_filters.SQL_TYPES`);
* every file's footer (parsed once per process, :data:`lakefmt.file_reader.FOOTERS`) counts its
  manifest ``record_count`` and has the Parquet schema of the first, in which each column read
  carries its field's id, name and Arrow type: the names DuckDB selects by are then the columns
  the field ids select (READ-6), and no file lacks one (READ-7). A file that fails is left to the
  caller's reader, which reports it (READ-10, READ-12);
* DuckDB raises no error (it refuses, say, a string that is not UTF-8, which pyarrow reads).

The rows a deletion vector deletes are dropped by their file's index and position in it (DuckDB's
``file_index`` and ``file_row_number``, READ-14). Rows come back file by file in plan order, each
file's in stored order (DuckDB's ``preserve_insertion_order``), cast to the scan's Arrow schema
(READ-7): DuckDB names the zone of a ``timestamptz`` column after its session, and the literals of
:mod:`lakefmt.sql_filters` name their offset, so nothing depends on the machine's time zone.

Example:
    >>> table = read_matching(reader, [(location, data_file), ...], threads=4)
    >>> if table is None: ...  # read the files with pyarrow
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import cached_property

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt import arrow_values
from lakefmt.expressions import referenced_field_ids
from lakefmt.file_reader import FOOTERS, FileReader
from lakefmt.manifest import DataFile
from lakefmt.schema import Field, arrow_field_id
from lakefmt.sql_filters import SQL_TYPES, has_glob, quote_identifier, to_duckdb_sql

__all__ = ["ENABLED", "MIN_FILES", "MIN_FULL_FILES", "MIN_ROWS", "read_matching"]

ENABLED = True
# A filtered read of fewer files than MIN_FILES, with fewer than MIN_ROWS rows left after row-group pruning,
# is left to lakefmt's reader, whose setup costs less and which decodes only the pages of wide columns
# holding a matching row (READ-15). Measured (2 cores, under load, medians of 15): 4 files of 500 rows
# 3.6 ms of CPU with pyarrow against 3.4 ms with DuckDB; 20 files of 2,500 rows 16.0 against 7.3 ms.
# One unclustered telemetry file, one payload and sensor kind: 40,000 rows 3.0 against 5.2 ms of CPU,
# 100,000 rows 4.0-4.9 against 5.7-6.2 ms (wall 5.3-7.6 against 8.2-9.3 ms), 200,000 rows 8-10
# against 11-14 ms of CPU and even on wall. The telemetry selective query after a Z-order (2 files,
# 43,202 rows left in 16,384-row groups) takes 2.3-2.7 ms with lakefmt's reader against 5.1-5.7 ms.
MIN_FILES = 4
MIN_ROWS = 100_000
# An unfiltered read of at least this many files is DuckDB's too: its Parquet reader decodes into
# Arrow with less CPU than pyarrow's dataset scanner. Measured on full scans of the loop datasets
# (pyarrow 26, DuckDB 2.0, 2 cores): 10,000 files of 250 rows 3.1 s against 5.5 s for
# pyarrow.dataset (artemis); 1,000 files of ~1 MB 2.4 s against 4.0 s (telemetry) and 5.3 s against
# 8.4 s (artemis). Fewer files are read by lakefmt's own reader (READ-17).
MIN_FULL_FILES = 16
_POSITIONS = frozenset({"file_index", "file_row_number"})  # DuckDB's virtual columns of a row's file and position

_lock = threading.Lock()
_database: list[tuple[int, duckdb.DuckDBPyConnection]] = []  # (pid, connection): a forked child makes its own


def read_matching(reader: FileReader, files: Sequence[tuple[str, DataFile]], threads: int) -> pa.Table | None:
    """The rows of ``files`` (``(location, manifest entry)`` pairs, in plan order) that ``reader``'s filter
    selects, with ``reader``'s projected columns, read by DuckDB; None when DuckDB cannot read them
    exactly (see the module docstring) and the caller must read them itself."""
    if not _candidate(reader, files):
        return None
    paths = [reader.io.fs_path(location) for location, _ in files]
    if any(map(has_glob, paths)):
        return None
    footers = _footers(reader, files, paths)
    if footers is None:
        return None
    if reader.metrics is not None and len(files) < MIN_FILES and _rows_after_pruning(reader, files, footers) < MIN_ROWS:
        return None  # few row groups left: lakefmt's reader reads only their matching pages (READ-15)
    fields = _fields_read(reader)
    if fields is None:
        return None
    where = ("TRUE", []) if reader.metrics is None else to_duckdb_sql(reader.row_filter, reader.column_name)
    if where is None:
        return None
    names = _schemas_match(footers, fields)
    deleting = [i for i, (_, f) in enumerate(files) if f.deletion_vector is not None]
    if names is None or (deleting and not _POSITIONS.isdisjoint(names)):
        return None  # a column so named would hide DuckDB's own
    deleted = _deleted_keys(reader, files, deleting) if deleting else None  # read first, as the file reader does
    sql, params = where
    columns = ", ".join(quote_identifier(f.name) for f in reader.projected.fields)
    if deleting:
        columns += ", file_index, file_row_number"
    query = (f"SELECT {columns} FROM read_parquet(?, hive_partitioning = false, union_by_name = false) "
             f"WHERE {sql}")
    try:
        cursor = _cursor(threads)
    except duckdb.Error:
        return None
    try:
        got = cursor.sql(query, params=[paths, *params]).to_arrow_table()
    except duckdb.Error:
        return None  # pyarrow reads what DuckDB refuses (READ-18)
    finally:
        cursor.close()
    if deleted is not None:
        got = _drop_deleted(got, deleted)
    return _as_output(got, reader.output)


def _candidate(reader: FileReader, files: Sequence[tuple[str, DataFile]]) -> bool:
    """What the manifests and the scan decide: local, big enough (:data:`MIN_FILES`, :data:`MIN_ROWS`;
    an unfiltered read :data:`MIN_FULL_FILES`)."""
    if not (ENABLED and reader.local and files and reader.projected.fields):
        return False
    if reader.metrics is None:
        return len(files) >= MIN_FULL_FILES
    return len(files) >= MIN_FILES or sum(f.record_count for _, f in files) >= MIN_ROWS


class _Footer:
    """A parsed footer in the shape :meth:`FileReader.row_groups` reads (a ParquetFile's ``metadata`` and
    ``schema_arrow``), without opening the file again."""

    def __init__(self, footer: pq.FileMetaData) -> None:
        self.metadata = footer

    @cached_property
    def schema_arrow(self) -> pa.Schema:  # not needed when the row groups kept for the file are taken (READ-19)
        return self.metadata.schema.to_arrow_schema()


def _rows_after_pruning(reader: FileReader, files: Sequence[tuple[str, DataFile]],
                        footers: list[pq.FileMetaData]) -> int:
    """The rows of ``files`` (whose ``footers`` :func:`_footers` read) in row groups whose statistics
    do not rule the filter out (READ-11).

    DuckDB does not use Parquet's page index; lakefmt's reader reads, of the row groups left, only
    the pages holding matching rows (READ-15). Where a few files are clustered on the filter's
    columns (after a sort or a Z-order) little is left, and that reader is the faster: measured on
    the telemetry selective query after a sort (one planned file of 1,000,000 rows, 16,384-row
    groups), 7.1 ms through DuckDB against 4.5-5.0 ms.
    """
    total = 0
    for (location, _), footer in zip(files, footers):
        groups = reader.row_groups(_Footer(footer), location, keep=True)
        total += footer.num_rows if groups is None else sum(footer.row_group(g).num_rows for g in groups)
    return total


def _fields_read(reader: FileReader) -> list[Field] | None:
    """The fields the query reads (projected and filtered), None if one has no exact DuckDB type."""
    fields = list(reader.projected.fields)
    known = {f.id for f in fields}
    for fid in sorted(referenced_field_ids(reader.row_filter)):
        field = reader.table_schema.field_by_id(fid)
        if field is None:
            return None
        if fid not in known:
            fields.append(field)
            known.add(fid)
    for f in fields:
        t = f.type
        if t.name not in SQL_TYPES or (t.name == "decimal" and (t.precision or 0) > 38):
            return None
    return fields


def _footers(reader: FileReader, files: Sequence[tuple[str, DataFile]], paths: list[str]
             ) -> list[pq.FileMetaData] | None:
    """The files' footers, if every file counts its manifest rows (READ-12); else None."""
    footers = []
    try:
        for (location, data_file), path in zip(files, paths):
            size = os.stat(path).st_size
            key = f"{location}#{size}"  # the key the file reader caches the footer under
            footer = FOOTERS.get(reader.io, key)
            if footer is None:
                footer = FOOTERS.put(reader.io, key, pq.read_metadata(path))
            if footer.num_rows != data_file.record_count:
                return None
            footers.append(footer)
    except (OSError, pa.ArrowException):
        return None  # missing or unreadable: the caller's reader reports it (READ-10)
    return footers


def _schemas_match(footers: list[pq.FileMetaData], fields: list[Field]) -> frozenset[str] | None:
    """The files' column names if every footer has the first one's Parquet schema, which holds each of
    ``fields`` as a column of its name, field id and Arrow type (READ-6, READ-12); else None."""
    first = footers[0].schema
    try:
        arrow_schema = first.to_arrow_schema()
    except pa.ArrowException:
        return None
    if not _schema_holds(arrow_schema, fields):
        return None
    if any(not footer.schema.equals(first) for footer in footers[1:]):
        return None
    return frozenset(arrow_schema.names)


def _schema_holds(arrow_schema: pa.Schema, fields: list[Field]) -> bool:
    """Each field is one column of its name, with its field id and its plain Arrow type; no two columns
    share a field id (READ-12)."""
    ids = [arrow_field_id(f) for f in arrow_schema]
    if len({i for i in ids if i is not None}) != len([i for i in ids if i is not None]):
        return False
    for field in fields:
        found = arrow_schema.get_all_field_indices(field.name)
        if len(found) != 1:
            return False
        column = arrow_schema.field(found[0])
        if arrow_field_id(column) != field.id or column.type != field.type.to_arrow():
            return False
    return True


def _deleted_keys(reader: FileReader, files: Sequence[tuple[str, DataFile]], deleting: list[int]) -> pa.Array:
    """``file index << 32 | position`` of each row the deletion vectors of ``files[deleting]`` delete (READ-14)."""
    keys = []
    for i in deleting:
        live = reader.live_rows(*files[i])
        if live is not None:
            gone = pc.indices_nonzero(pc.invert(live)).cast(pa.int64())
            keys.append(pc.add(gone, arrow_values.scalar(i << 32, pa.int64())))
    return pa.concat_arrays(keys) if keys else arrow_values.array([], pa.int64())


def _drop_deleted(got: pa.Table, deleted: pa.Array) -> pa.Table:
    """``got`` less its rows whose file index and position (its last two columns) are ``deleted``, and
    less those two columns. Positions count every row of a file in stored order, as DuckDB's
    ``file_row_number`` does (READ-14)."""
    n = got.num_columns - 2
    index = got.column(n).cast(pa.int64())
    keys = pc.add(pc.shift_left(index, arrow_values.scalar(32, pa.int64())), got.column(n + 1).cast(pa.int64()))
    kept = got.select(range(n))
    return kept.filter(pc.invert(pc.is_in(keys, value_set=deleted))) if len(deleted) else kept


def _as_output(got: pa.Table, output: pa.Schema) -> pa.Table | None:
    """DuckDB's result with the scan's Arrow schema (READ-7): a ``timestamptz`` column comes in the
    session's zone name; the values are the same UTC instants."""
    if got.num_columns != len(output):
        return None
    columns = []
    for column, target in zip(got.columns, output):
        if column.type != target.type:
            if not (pa.types.is_timestamp(column.type) and pa.types.is_timestamp(target.type)
                    and column.type.unit == target.type.unit and column.type.tz and target.type.tz):
                return None
            column = column.cast(target.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=output)


def _cursor(threads: int) -> duckdb.DuckDBPyConnection:
    """A cursor of its own (thread-safe: one per read) on the process's in-memory DuckDB database.

    The database is made on first use (about 20 ms of CPU) with as many threads as the scan's
    ``threads`` allow and the process has cores: its reads decode, they hardly wait.
    """
    pid = os.getpid()
    with _lock:
        if not _database or _database[0][0] != pid:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            config = {"threads": max(1, min(threads, cores)), "preserve_insertion_order": True}
            _database[:] = [(pid, duckdb.connect(config=config))]
        return _database[0][1].cursor()
