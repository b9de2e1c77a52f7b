"""Reading one planned data file: projection by field id, exact filtering, deleted rows (spec/reading.md).

:class:`FileReader` does the per-scan work once (schemas, evaluators) and then reads
files in parallel: it checks each file is the one its manifest entry describes
(READ-12), skips row groups (READ-11), evaluates only the filter's residual (READ-13),
reads the filter's columns before the others (late materialization), and drops the
rows a deletion vector deletes (READ-14). :func:`read_data_file` reads one file.
:mod:`lakefmt.scan` plans which files to read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt.deletion_vectors import live_mask
from lakefmt.errors import CorruptDataFileError, LakefmtError
from lakefmt.evaluators import MetricsEvaluator, residual, row_mask
from lakefmt.expressions import AlwaysFalse, AlwaysTrue, BoundExpression, Expression, referenced_field_ids
from lakefmt.footer import row_group_metrics
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.schema import Field, Schema, arrow_field_id
from lakefmt.types import STRING, can_promote, from_arrow


def read_data_file(io: FileIO, location: str, table_schema: Schema, projected: Schema,
                   row_filter: BoundExpression, metrics: MetricsEvaluator | None = None, *,
                   expected_rows: int | None = None, data_file: DataFile | None = None,
                   table_location: str | None = None) -> pa.Table:
    """Read one data file projected to ``projected`` by field id, filtered exactly (READ-6..READ-8).

    Row groups whose footer statistics prove that no row matches are not read (READ-11);
    ``metrics`` is the filter's evaluator, built here when not given. With a filter, the
    filter's columns are read first and the other projected columns only from the row
    groups where some row matched, and only those rows are kept (late materialization):
    a selective query does not decompress a wide column it will not return. ``data_file``
    is the file's manifest entry: the leaves of the filter its statistics decide for every
    row are not evaluated, and their columns not read (READ-13). ``expected_rows`` is the
    manifest's ``record_count``: a footer that disagrees, like a file with no field ids, is
    not the file the manifest describes (READ-12). The rows ``data_file``'s deletion vector
    deletes are never returned (READ-14); the vector's path is resolved against
    ``table_location`` (by default ``location`` less the entry's relative path).

    Raises:
        CorruptDataFileError: the file is missing, unreadable or not the table's (READ-10, READ-12).
        CorruptMetadataError: its deletion vector is missing or corrupt (DV-4).
    """
    reader = FileReader(io, table_schema, projected, row_filter, metrics, table_location=table_location)
    return reader.read(location, expected_rows=expected_rows, data_file=data_file)


@dataclass(frozen=True)
class _FilterColumns:
    """What a (residual) filter needs from a file: its columns, and the projected columns besides."""

    filter_ids: frozenset[int]
    filter_fields: tuple[Field, ...]
    rest: tuple[Field, ...]


class FileReader:
    """Reads data files for one scan: the per-scan work (schemas, evaluators) is done once (READ-6..READ-13).

    Thread-safe: a scan reads its files in parallel through one reader.
    """

    def __init__(self, io: FileIO, table_schema: Schema, projected: Schema, row_filter: BoundExpression,
                 metrics: MetricsEvaluator | None = None, *, table_location: str | None = None) -> None:
        self.io = io
        self.table_location = table_location
        self.table_schema = table_schema
        self.projected = projected
        self.row_filter = row_filter
        self.unfiltered = isinstance(row_filter, AlwaysTrue)
        self.metrics = None if self.unfiltered else metrics or MetricsEvaluator(row_filter, table_schema)
        self.output = plain_arrow_schema(projected)
        # Pre-buffering coalesces the column reads into few requests: a gain on object stores and
        # for whole files, a copy for nothing when a filtered read of a local file takes a few columns.
        self.pre_buffer = self.unfiltered or getattr(io, "scheme", "file") != "file"
        self._names = {f.id: f.name for f in table_schema.fields}
        self._columns: dict[Any, _FilterColumns] = {}
        self._dictionary_names = [] if self.unfiltered else sorted(
            f.name for f in (table_schema.field_by_id(fid) for fid in referenced_field_ids(row_filter))
            if f is not None and f.type == STRING)

    def matching_rows(self, location: str, *, expected_rows: int | None = None, data_file: DataFile | None = None
                      ) -> pa.BooleanArray:
        """True for each row of the file where the filter is TRUE, rows its deletion vector deletes included.

        What a delete needs to find positions (ROWDEL-2): only the filter's columns are read
        (strings as dictionaries), only from the row groups that might match (READ-11), and
        the leaves ``data_file``'s statistics decide are not evaluated (READ-13).
        """
        try:
            with self.io.open_input(location) as source:
                parquet = self._open(source)
                file_names = data_file_field_ids(parquet, location, expected_rows)
                rows = parquet.metadata.num_rows
                if self.metrics is None:
                    return _constant_mask(rows, True)
                remaining = self.metrics.expr if data_file is None else residual(self.metrics.expr, data_file)
                if isinstance(remaining, (AlwaysTrue, AlwaysFalse)):
                    return _constant_mask(rows, isinstance(remaining, AlwaysTrue))
                groups = matching_row_groups(parquet, self.table_schema, self.row_filter, self.metrics)
                if groups is not None and not groups:
                    return _constant_mask(rows, False)
                columns = self._filter_columns(remaining)
                keys = _read_fields(parquet, groups, columns.filter_fields, file_names, location,
                                    keep_dictionary=True, use_threads=False)
                mask = row_mask(remaining, keys, self._names.get)
                if groups is None:
                    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
                return _scatter_groups(parquet, groups, mask)
        except FileNotFoundError as exc:
            raise CorruptDataFileError(f"data file {location} is referenced by the table but missing "
                                       "(READ-10); restore it from a copy") from exc
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptDataFileError(f"data file {location} is not a readable Parquet file (READ-10): {exc}; "
                                       "restore the file the table wrote") from exc

    def read(self, location: str, *, expected_rows: int | None = None, data_file: DataFile | None = None
             ) -> pa.Table:
        """The rows of one data file that match the filter, with the projected columns (see read_data_file)."""
        try:
            with self.io.open_input(location) as source:
                parquet = self._open(source)
                file_names = data_file_field_ids(parquet, location, expected_rows)
                live = self._live_rows(location, data_file)
                if self.metrics is None:
                    return _keep(_read_fields(parquet, None, self.projected.fields, file_names, location, self.output),
                                 live)
                remaining = self.metrics.expr if data_file is None else residual(self.metrics.expr, data_file)
                if isinstance(remaining, AlwaysFalse):
                    return self.output.empty_table()
                groups = matching_row_groups(parquet, self.table_schema, self.row_filter, self.metrics)
                if groups is not None and not groups:
                    return self.output.empty_table()
                live = None if live is None else _rows_of_groups(parquet, groups, live)
                if isinstance(remaining, AlwaysTrue):
                    return _keep(_read_fields(parquet, groups, self.projected.fields, file_names, location,
                                              self.output), live)
                return self._read_filtered(parquet, groups, remaining, file_names, location, live)
        except FileNotFoundError as exc:
            raise CorruptDataFileError(f"data file {location} is referenced by the table but missing "
                                       "(READ-10); restore it from a copy") from exc
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptDataFileError(f"data file {location} is not a readable Parquet file (READ-10): {exc}; "
                                       "restore the file the table wrote") from exc

    def _live_rows(self, location: str, data_file: DataFile | None) -> pa.BooleanArray | None:
        """True for each row of the file its deletion vector keeps; None when it has none (READ-14)."""
        if data_file is None or data_file.deletion_vector is None:
            return None
        table_location = self.table_location
        if table_location is None:
            suffix = "/" + data_file.path
            table_location = location[:-len(suffix)] if location.endswith(suffix) else location.rsplit("/", 1)[0]
        return live_mask(self.io, table_location, data_file)

    def _open(self, source: Any) -> pq.ParquetFile:
        """The file's reader; the filter's string columns read as dictionaries (compared on their dictionary).

        They are named by the table's names; a file where one is missing (the column was renamed
        or added since) is opened without. Any string column so named reads as a dictionary;
        ``_read_fields`` decodes it unless it is a filter column.
        """
        if self._dictionary_names:
            try:
                return pq.ParquetFile(source, pre_buffer=self.pre_buffer, read_dictionary=self._dictionary_names)
            except KeyError:
                pass
        return pq.ParquetFile(source, pre_buffer=self.pre_buffer)

    def _filter_columns(self, row_filter: Expression) -> _FilterColumns:
        key = id(row_filter) if row_filter is self.metrics.expr else row_filter  # type: ignore[union-attr]
        found = self._columns.get(key)
        if found is None:
            ids = frozenset(referenced_field_ids(row_filter))
            fields = tuple(f for f in (self.table_schema.field_by_id(fid) for fid in sorted(ids)) if f is not None)
            found = _FilterColumns(ids, fields, tuple(f for f in self.projected.fields if f.id not in ids))
            self._columns[key] = found
        return found

    def _read_filtered(self, parquet: pq.ParquetFile, groups: list[int] | None, row_filter: Expression,
                       file_names: dict[int, str], location: str, live: pa.ChunkedArray | None = None) -> pa.Table:
        """The rows of ``groups`` that match ``row_filter``: filter columns first, then the rest (READ-8).

        String columns of the filter come as dictionaries where the file was opened so (see
        ``_open``) and are compared on their dictionary (EXPR-10). ``live`` marks the rows of
        ``groups`` that no deletion vector deletes (READ-14).
        """
        columns = self._filter_columns(row_filter)
        keys = _read_fields(parquet, groups, columns.filter_fields, file_names, location, keep_dictionary=True,
                            use_threads=False)
        mask = row_mask(row_filter, keys, self._names.get)
        if live is not None:
            mask = pc.fill_null(pc.and_(mask, live), False)
        positions = pc.indices_nonzero(mask)
        if len(positions) == 0:
            return self.output.empty_table()
        rest = columns.rest
        others = None
        if len(positions) == keys.num_rows:
            matched = keys
            if rest:
                others = _read_fields(parquet, groups, rest, file_names, location, use_threads=False)
        else:
            matched = keys.take(positions)
            if rest:
                others = self._read_rows(parquet, groups, rest, file_names, location, mask, positions)
        arrays = [matched.column(f.name) if f.id in columns.filter_ids else others.column(f.name)  # type: ignore[union-attr]
                  for f in self.projected.fields]
        table = pa.table(arrays, names=self.output.names)
        return table if table.schema == self.output else table.cast(self.output)

    @staticmethod
    def _read_rows(parquet: pq.ParquetFile, groups: list[int] | None, fields: Sequence[Field],
                   file_names: dict[int, str], location: str, mask: pa.ChunkedArray, positions: pa.Array
                   ) -> pa.Table:
        """``fields`` of the rows where ``mask`` (over ``groups``) is true, reading only the row groups
        holding one; ``positions`` are those rows' numbers. Arrow kernels only: numpy is not required."""
        footer = parquet.metadata
        groups = list(range(footer.num_row_groups)) if groups is None else groups
        if len(groups) == 1:
            return _read_fields(parquet, groups, fields, file_names, location, use_threads=False).take(positions)
        hit, parts, start = [], [], 0
        for group in groups:
            rows = footer.row_group(group).num_rows
            part = mask.slice(start, rows)
            start += rows
            if pc.any(part).as_py():
                hit.append(group)
                parts.extend(part.chunks)
        others = _read_fields(parquet, hit, fields, file_names, location, use_threads=False)
        # The mask of the groups read numbers their rows as the read table does.
        return others.take(pc.indices_nonzero(pa.chunked_array(parts, pa.bool_())))


def _rows_of_groups(parquet: pq.ParquetFile, groups: list[int] | None, mask: pa.BooleanArray) -> pa.ChunkedArray:
    """The part of a per-file row mask that covers ``groups`` (all when None), in read order."""
    if groups is None:
        return pa.chunked_array([mask], pa.bool_())
    footer = parquet.metadata
    starts, start = [], 0
    for g in range(footer.num_row_groups):
        starts.append(start)
        start += footer.row_group(g).num_rows
    return pa.chunked_array([mask.slice(starts[g], footer.row_group(g).num_rows) for g in groups], pa.bool_())


def _constant_mask(rows: int, value: bool) -> pa.BooleanArray:
    return pa.BooleanArray.from_buffers(pa.bool_(), rows, [None, pa.py_buffer(
        (b"\xff" if value else b"\x00") * ((rows + 7) // 8))])


def _scatter_groups(parquet: pq.ParquetFile, groups: list[int], mask: pa.ChunkedArray | pa.Array) -> pa.BooleanArray:
    """A per-file mask from the mask of ``groups`` (in read order): rows of other groups are False."""
    footer = parquet.metadata
    wanted = dict.fromkeys(groups)
    pieces, start = [], 0
    for g in range(footer.num_row_groups):
        rows = footer.row_group(g).num_rows
        if g in wanted:
            pieces.append(mask.slice(start, rows))
            start += rows
        else:
            pieces.append(_constant_mask(rows, False))
    chunks = [c for p in pieces for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    return pa.chunked_array(chunks, pa.bool_()).combine_chunks()


def _keep(table: pa.Table, live: pa.Array | pa.ChunkedArray | None) -> pa.Table:
    """The rows of ``table`` that ``live`` keeps (all without a mask, READ-14)."""
    return table if live is None else table.filter(live)


def _read_fields(parquet: pq.ParquetFile, groups: list[int] | None, fields: Sequence[Any],
                 file_names: dict[int, str], location: str, output: pa.Schema | None = None, *,
                 keep_dictionary: bool = False, use_threads: bool = True) -> pa.Table:
    """``fields`` of the table, from ``groups`` of the file (all when None), by field id (READ-6).

    A field the file does not hold reads as nulls (added after the file was written);
    a narrower stored type is widened (SCHEMA-6). With ``output`` (the plain Arrow schema of
    ``fields``), the result is cast to it (READ-7); with ``keep_dictionary``, a column read as
    a dictionary of the field's type stays one. ``use_threads`` decodes columns in parallel
    (worth it for whole files; a selective read is parallel across files instead).
    """
    names = [file_names[f.id] for f in fields if f.id in file_names]
    raw = (parquet.read(columns=names, use_threads=use_threads) if groups is None
           else parquet.read_row_groups(groups, columns=names, use_threads=use_threads))
    rows = raw.num_rows if names else (
        parquet.metadata.num_rows if groups is None else sum(parquet.metadata.row_group(g).num_rows for g in groups))
    arrays = []
    for field in fields:
        target = field.type.to_arrow()
        name = file_names.get(field.id)
        if name is None or name not in raw.column_names:
            arrays.append(pa.chunked_array([pa.nulls(rows, target)]))  # added after the file was written
            continue
        column = raw.column(name)
        if column.type != target:
            if keep_dictionary and pa.types.is_dictionary(column.type) and column.type.value_type == target:
                arrays.append(column)
                continue
            if pa.types.is_dictionary(column.type):
                column = column.cast(column.type.value_type)
            try:
                stored = from_arrow(column.type)
            except LakefmtError:
                stored = None
            if stored is None or not can_promote(stored, field.type):
                raise CorruptDataFileError(f"data file {location} stores column {field.name!r} (field id "
                                           f"{field.id}) as {column.type}, which does not widen to "
                                           f"{field.type} (READ-6); the file was replaced or written by "
                                           "another writer: restore the file the table wrote")
            column = column.cast(target)  # widened type (SCHEMA-6)
        arrays.append(column)
    if not arrays:
        table = pa.table({}).append_column("__rows", pa.nulls(rows)).drop_columns(["__rows"])
    else:
        table = pa.table(arrays, names=[f.name for f in fields])
    if output is not None and table.schema != output:
        table = table.cast(output)
    return table


def data_file_field_ids(parquet: pq.ParquetFile, location: str, expected_rows: int | None) -> dict[int, str]:
    """``{field id: column name}`` of a data file, after checking it is the table's file (READ-12).

    Raises:
        CorruptDataFileError: no column carries a field id (WRITE-1), two columns carry the
            same one, or the footer's row count differs from ``expected_rows`` (the
            manifest's ``record_count``, WRITE-6).
    """
    file_names: dict[int, str] = {}
    for af in parquet.schema_arrow:
        fid = arrow_field_id(af)
        if fid is not None and fid in file_names:
            raise CorruptDataFileError(f"data file {location} has two columns with field id {fid} "
                                       f"({file_names[fid]!r}, {af.name!r}) (READ-12); restore the file the "
                                       "table wrote")
        if fid is not None:
            file_names[fid] = af.name
    if not file_names and parquet.schema_arrow.names:
        raise CorruptDataFileError(f"data file {location} has no column with a field id (columns "
                                   f"{parquet.schema_arrow.names}), so it was not written for this table "
                                   "(WRITE-1, READ-12); restore the file the table wrote")
    rows = parquet.metadata.num_rows
    if expected_rows is not None and rows != expected_rows:
        raise CorruptDataFileError(f"data file {location} holds {rows} rows but its manifest entry records "
                                   f"{expected_rows} (READ-12); the file was replaced or truncated, restore "
                                   "the file the table wrote")
    return file_names


def matching_row_groups(parquet: pq.ParquetFile, table_schema: Schema, row_filter: BoundExpression,
                        metrics: MetricsEvaluator | None) -> list[int] | None:
    """The row groups that might hold matching rows, or None for all of them (READ-11).

    Only top-level columns stored with the table's type take part; any other column
    referenced by the filter counts as unknown, so pruning stays conservative (READ-4).
    """
    footer = parquet.metadata
    if isinstance(row_filter, AlwaysTrue) or footer.num_row_groups < 2:
        return None
    wanted = referenced_field_ids(row_filter)
    arrow_schema = parquet.schema_arrow
    columns = {}
    for col_index in range(footer.num_columns):
        path = footer.schema.column(col_index).path
        index = arrow_schema.get_field_index(path)
        if index < 0:
            continue  # a nested leaf: its statistics are not used
        fid = arrow_field_id(arrow_schema.field(index))
        field = table_schema.field_by_id(fid) if fid in wanted else None
        if field is not None and _stored_as(arrow_schema.field(index).type) == field.type:
            columns[col_index] = field
    if not columns:
        return None
    evaluator = metrics or MetricsEvaluator(row_filter, table_schema)
    return [i for i, stats in enumerate(row_group_metrics(footer, columns)) if evaluator.might_match(stats)]


def _stored_as(arrow_type: pa.DataType) -> Any:
    try:
        return from_arrow(arrow_type)
    except LakefmtError:
        return None


def plain_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of a read: each field's plain Arrow type (READ-7)."""
    return pa.schema([pa.field(f.name, f.type.to_arrow(), nullable=not f.required) for f in schema.fields])
