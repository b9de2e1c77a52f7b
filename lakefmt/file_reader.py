"""Reading one planned data file: projection by field id, exact filtering, deleted rows (spec/reading.md).

:class:`FileReader` does the per-scan work once (schemas, evaluators) and then reads
files in parallel: it checks each file is the one its manifest entry describes
(READ-12), skips row groups (READ-11), evaluates only the filter's residual (READ-13),
reads the filter's columns before the others (late materialization), decodes only the
pages of the other columns that hold matching rows (READ-15), and drops the rows a
deletion vector deletes (READ-14). :func:`read_data_file` reads one file.
:mod:`lakefmt.scan` plans which files to read.

A read is two steps around evaluating the filter: :meth:`FileReader.start` opens and checks
the file and reads the residual filter's columns, :meth:`FileReader.finish` reads the other
columns of the matching rows. :meth:`FileReader.read` evaluates the filter on the one file
between them; :mod:`lakefmt.file_batches` evaluates it over many files at once (READ-16).

Most of what reading a file costs beyond decoding is per file, so the reader keeps it
small: how a file's columns map to the table's fields is worked out once per distinct
file schema of the scan (:class:`Layout`), not once per file; a small file is read with
one request (:data:`WHOLE_FILE_BYTES`); a file's footer is parsed once per process
(:data:`FOOTERS`, READ-12).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt import arrow_values, parquet_pages
from lakefmt.deletion_vectors import live_mask
from lakefmt.errors import CorruptDataFileError
from lakefmt.evaluators import MetricsEvaluator, matching_positions, row_mask
from lakefmt.expressions import AlwaysFalse, AlwaysTrue, BoundExpression, Expression, referenced_field_ids
from lakefmt.file_cache import ImmutableFileCache
from lakefmt.file_layout import (  # re-exported: callers import them from here
    Layout,
    checked,
    data_file_field_ids,
    matching_row_groups,
    plain_arrow_schema,
    read_fields,
)
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.row_masks import IntValues, constant_mask, keep_live, rows_of_groups, scatter_groups
from lakefmt.schema import Field, Schema
from lakefmt.types import STRING

__all__ = ["FileReader", "data_file_field_ids", "matching_row_groups", "plain_arrow_schema", "read_data_file"]

# A local file at most this large is read with one request and parsed from memory: the footer
# and the columns would otherwise take two or three requests, each costing more than copying
# the rest of such a file.
WHOLE_FILE_BYTES = 256 * 1024
_NOT_PRUNED: Any = object()


def _footer_weight(footer: pq.FileMetaData) -> int:
    return max(1, footer.num_row_groups * footer.num_columns)


# Parsed footers of data files, weighed in column chunks (a few hundred bytes each): parsing a
# footer cost about 60 us of the ~0.5 ms a selective read of a small file costs.
FOOTERS = ImmutableFileCache[pq.FileMetaData](max_weight=200_000, weight=_footer_weight)


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


@dataclass(frozen=True)
class PendingFile:
    """A data file whose filter columns are read, waiting for its filter to be evaluated (see
    :meth:`FileReader.start`); ``source`` is open until the caller closes it."""

    location: str
    source: Any
    parquet: pq.ParquetFile
    layout: Layout
    groups: list[int] | None  # the row groups read (all when None), READ-11
    row_filter: Expression  # the file's residual filter (READ-13), NOT-free, never TRUE or FALSE
    columns: _FilterColumns
    keys: pa.Table  # the residual's columns, of the rows of ``groups``
    live: pa.ChunkedArray | None  # the rows of ``groups`` no deletion vector deletes (READ-14)


class FileReader:
    """Reads data files for one scan: the per-scan work (schemas, evaluators) is done once (READ-6..READ-15).

    Thread-safe: a scan reads its files in parallel through one reader. ``column_threads``
    decodes the columns of a large file in parallel: worth it when a scan has fewer files
    than cores, a cost when files are read in parallel anyway.
    """

    def __init__(self, io: FileIO, table_schema: Schema, projected: Schema, row_filter: BoundExpression,
                 metrics: MetricsEvaluator | None = None, *, table_location: str | None = None,
                 column_threads: bool = True) -> None:
        self.io = io
        self.table_location = table_location
        self.table_schema = table_schema
        self.projected = projected
        self.row_filter = row_filter
        self.unfiltered = isinstance(row_filter, AlwaysTrue)
        self.metrics = None if self.unfiltered else metrics or MetricsEvaluator(row_filter, table_schema)
        self._residuals = None if self.metrics is None else self.metrics.residuals  # shared by a filter's scans (READ-19)
        self.output = plain_arrow_schema(projected)
        self.column_threads = column_threads
        self.local = getattr(io, "scheme", "file") == "file"
        # Pre-buffering coalesces the column reads into few requests: a gain on object stores and
        # for whole files, a copy for nothing when a filtered read of a local file takes a few columns.
        self.pre_buffer = self.unfiltered or not self.local
        self._names = {f.id: f.name for f in table_schema.fields}
        self.column_name = self._names.get  # a field id's column in the keys read (EXPR-10)
        self._columns: dict[int, tuple[Expression, _FilterColumns]] = {}
        self._layouts: list[Layout] = []
        if self.metrics is not None:  # the scans of one filter share their layouts and columns (READ-19)
            self._columns, self._layouts = _shared(self.metrics.derived, table_schema, projected)
        self._pruned: dict[str, list[int] | None] = {}  # row groups a check before the read chose (READ-18)
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
        with _read_errors(location), self._input(location, data_file) as source:
            parquet = self._open(source, location, data_file)
            layout = self._layout(parquet, location, expected_rows)
            rows = parquet.metadata.num_rows
            if self.metrics is None:
                return constant_mask(rows, True)
            remaining = self.metrics.expr if data_file is None else self._residuals.of(data_file)  # type: ignore[union-attr]
            if isinstance(remaining, (AlwaysTrue, AlwaysFalse)):
                return constant_mask(rows, isinstance(remaining, AlwaysTrue))
            groups = matching_row_groups(parquet, self.table_schema, self.row_filter, self.metrics,
                                    cached_as=(self.io, location))
            if groups is not None and not groups:
                return constant_mask(rows, False)
            columns = self._filter_columns(remaining)
            keys = read_fields(parquet, layout, groups, columns.filter_fields, location, keep_dictionary=True)
            mask = row_mask(remaining, keys, self._names.get)
            if groups is None:
                return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
            return scatter_groups(parquet, groups, mask)

    def read(self, location: str, *, expected_rows: int | None = None, data_file: DataFile | None = None
             ) -> pa.Table:
        """The rows of one data file that match the filter, with the projected columns (see read_data_file)."""
        step = self.start(location, expected_rows=expected_rows, data_file=data_file)
        if isinstance(step, pa.Table):
            return step
        try:
            with _read_errors(location):
                return self.finish(step, self.matching_positions(step))
        finally:
            step.source.close()

    def start(self, location: str, *, expected_rows: int | None = None, data_file: DataFile | None = None
              ) -> pa.Table | PendingFile:
        """A file's rows when its statistics decide them, else the file with its filter columns read.

        The file is checked (READ-12), its row groups skipped (READ-11) and the filter reduced to
        its residual (READ-13). A :class:`PendingFile` still holds the open file: the caller
        evaluates the filter on its keys (alone, or batched with other files' keys), passes the
        matching positions to :meth:`finish`, and closes ``source``.
        """
        with _read_errors(location):
            source = self._input(location, data_file)
            try:
                step = self._start(source, location, expected_rows, data_file)
            except BaseException:
                source.close()
                raise
            if isinstance(step, pa.Table):
                source.close()
            return step

    def _start(self, source: Any, location: str, expected_rows: int | None, data_file: DataFile | None
               ) -> pa.Table | PendingFile:
        parquet = self._open(source, location, data_file)
        layout = self._layout(parquet, location, expected_rows)
        live = self.live_rows(location, data_file)
        threads = self.column_threads and (data_file is None or data_file.file_size_bytes > WHOLE_FILE_BYTES)
        if self.metrics is None:
            return keep_live(read_fields(parquet, layout, None, self.projected.fields, location, self.output,
                                     use_threads=threads), live)
        remaining = self.metrics.expr if data_file is None else self._residuals.of(data_file)  # type: ignore[union-attr]
        if isinstance(remaining, AlwaysFalse):
            return arrow_values.empty_table(self.output)
        groups = self.row_groups(parquet, location)
        if groups is not None and not groups:
            return arrow_values.empty_table(self.output)
        live = None if live is None else rows_of_groups(parquet, groups, live)
        if isinstance(remaining, AlwaysTrue):
            return keep_live(read_fields(parquet, layout, groups, self.projected.fields, location, self.output,
                                     use_threads=threads), live)
        columns = self._filter_columns(remaining)
        keys = read_fields(parquet, layout, groups, columns.filter_fields, location, keep_dictionary=True)
        return PendingFile(location, source, parquet, layout, groups, remaining, columns, keys, live)

    def row_groups(self, parquet: Any, location: str, *, keep: bool = False) -> list[int] | None:
        """The row groups of the file at ``location`` (``parquet``: its reader, or a footer in that
        shape) that might hold matching rows, None for all (READ-11). With ``keep``, the answer is
        kept for this scan's read of the file, which then takes it instead of pruning again: a
        check before the read (READ-18) prunes the same file with the same footer."""
        groups = self._pruned.pop(location, _NOT_PRUNED)
        if groups is _NOT_PRUNED:
            groups = matching_row_groups(parquet, self.table_schema, self.row_filter, self.metrics,
                                         cached_as=(self.io, location))
        if keep:
            self._pruned[location] = groups
        return groups  # type: ignore[return-value]

    def matching_positions(self, pending: PendingFile) -> pa.Array:
        """The row numbers (ascending, over the rows of its row groups read) of ``pending``'s keys where
        its residual filter is TRUE (READ-8, EXPR-10)."""
        return matching_positions(pending.row_filter, pending.keys, self._names.get, prepared=True)

    def finish(self, pending: PendingFile, positions: pa.Array) -> pa.Table:
        """The projected columns of the rows of ``pending`` numbered ``positions`` (where its filter is
        TRUE) that no deletion vector deletes: filter columns first, then the rest (READ-8, READ-14).

        String columns of the filter come as dictionaries where the file was opened so (see
        ``_open``). Only the row groups, and of wide columns only the pages, holding one of the
        rows are read (READ-15).
        """
        with _read_errors(pending.location):
            return self._finish(pending, positions)

    def _finish(self, pending: PendingFile, positions: pa.Array) -> pa.Table:
        live, keys, columns = pending.live, pending.keys, pending.columns
        if live is not None and len(positions):
            keep = pc.take(live, positions)
            positions = pc.filter(positions, keep.combine_chunks() if isinstance(keep, pa.ChunkedArray) else keep)
        if len(positions) == 0:
            return arrow_values.empty_table(self.output)
        parquet, layout, groups, location = pending.parquet, pending.layout, pending.groups, pending.location
        rest = columns.rest
        others = None
        if len(positions) == keys.num_rows:
            matched = keys
            if rest:
                others = read_fields(parquet, layout, groups, rest, location)
        else:
            matched = keys.take(positions)
            if rest:
                others = self._read_rows(parquet, layout, pending.source, groups, rest, location, positions)
        if not self.projected.fields:
            return matched.select([])  # no column asked for: as many rows as match
        arrays = [matched.column(f.name) if f.id in columns.filter_ids else others.column(f.name)  # type: ignore[union-attr]
                  for f in self.projected.fields]
        # Only the columns read otherwise (a filter's strings as dictionaries) are cast: Table.cast casts
        # every column, 30 us for a few rows of six columns.
        output = self.output
        arrays = [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, output)]
        return pa.Table.from_arrays(arrays, schema=output)

    def _input(self, location: str, data_file: DataFile | None) -> Any:
        """The file, opened; a small local file is read whole first (see :data:`WHOLE_FILE_BYTES`)."""
        source = self.io.open_input(location)
        if self.local and data_file is not None and data_file.file_size_bytes <= WHOLE_FILE_BYTES:
            with source:
                return pa.BufferReader(source.read_buffer())
        return source

    def live_rows(self, location: str, data_file: DataFile | None) -> pa.BooleanArray | None:
        """True for each row of the file its deletion vector keeps; None when it has none (READ-14)."""
        if data_file is None or data_file.deletion_vector is None:
            return None
        table_location = self.table_location
        if table_location is None:
            suffix = "/" + data_file.path
            table_location = location[:-len(suffix)] if location.endswith(suffix) else location.rsplit("/", 1)[0]
        return live_mask(self.io, table_location, data_file)

    def _open(self, source: Any, location: str, data_file: DataFile | None) -> pq.ParquetFile:
        """The file's reader; the filter's string columns read as dictionaries (compared on their dictionary).

        They are named by the table's names; a file where one is missing (the column was renamed
        or added since) is opened without. Any string column so named reads as a dictionary;
        a read plan decodes it unless it is a filter column.

        The footer of a file a manifest entry describes is parsed once per process and kept
        (:data:`FOOTERS`, READ-12): data files are never modified (LAYOUT-4), and the size of
        the file opened is part of the key, so a file of another size put at the same path is
        parsed anew and checked against its manifest entry.
        """
        pre_buffer = self.pre_buffer and not isinstance(source, pa.BufferReader)
        size = None if data_file is None else _source_size(source)
        key = None if size is None else f"{location}#{size}"
        footer = None if key is None else FOOTERS.get(self.io, key)
        parquet = None
        if self._dictionary_names:
            try:
                parquet = pq.ParquetFile(source, metadata=footer, pre_buffer=pre_buffer,
                                         read_dictionary=self._dictionary_names)
            except KeyError:
                pass
        if parquet is None:
            parquet = pq.ParquetFile(source, metadata=footer, pre_buffer=pre_buffer)
        if key is not None and footer is None:
            FOOTERS.put(self.io, key, parquet.metadata)
        return parquet

    def _layout(self, parquet: pq.ParquetFile, location: str, expected_rows: int | None) -> Layout:
        """The file's layout, after checking it is the table's file (READ-12)."""
        return checked(self.layout_of(parquet.schema_arrow, parquet.metadata), parquet, location, expected_rows)

    def layout_of(self, arrow_schema: pa.Schema, footer: pq.FileMetaData) -> Layout:
        """The layout of files with ``arrow_schema`` (one per distinct file schema of the scan), unchecked."""
        for layout in self._layouts:
            if layout.arrow_schema.equals(arrow_schema, check_metadata=True):
                return layout
        layout = Layout(arrow_schema, footer)
        if len(self._layouts) < _LAYOUTS:
            self._layouts.append(layout)
        return layout

    def _filter_columns(self, row_filter: Expression) -> _FilterColumns:
        """Per remainder (one object per combination of verdicts, see ``Residuals``), its columns."""
        found = self._columns.get(id(row_filter))
        if found is None or found[0] is not row_filter:
            ids = frozenset(referenced_field_ids(row_filter))
            fields = tuple(f for f in (self.table_schema.field_by_id(fid) for fid in sorted(ids)) if f is not None)
            found = (row_filter, _FilterColumns(ids, fields, tuple(f for f in self.projected.fields if f.id not in ids)))
            if len(self._columns) < 1024:
                self._columns[id(row_filter)] = found  # the remainder kept alive, so its id names it
        return found[1]

    def _read_rows(self, parquet: pq.ParquetFile, layout: Layout, source: Any, groups: list[int] | None,
                   fields: Sequence[Field], location: str, positions: pa.Array) -> pa.Table:
        """``fields`` of the rows numbered ``positions`` (ascending, over the rows of ``groups``): only
        the row groups holding one are read, and of their wide columns only the pages holding
        one (READ-15). Arrow kernels only: numpy is not required."""
        footer = parquet.metadata
        groups = list(range(footer.num_row_groups)) if groups is None else groups
        starts, start = [], 0
        for g in groups:
            starts.append(start)
            start += footer.row_group(g).num_rows
        ends = [bisect.bisect_left(IntValues(positions), s) for s in starts[1:]] + [len(positions)]
        bounds = [0] + ends[:-1]
        hit = [i for i in range(len(groups)) if ends[i] > bounds[i]]
        parts, offset = [], 0
        for i in hit:  # renumber the positions over the rows of the groups read
            part = positions.slice(bounds[i], ends[i] - bounds[i])
            shift = starts[i] - offset
            parts.append(pc.subtract(part, arrow_values.scalar(shift, part.type)) if shift else part)
            offset += footer.row_group(groups[i]).num_rows
        taken = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        hit_groups = [groups[i] for i in hit]
        sparse = self._sparse(parquet, layout, source, fields, hit_groups,
                              {groups[i]: (positions, bounds[i], ends[i], starts[i]) for i in hit}, location)
        if sparse is not None:
            try:
                return read_fields(sparse, layout, hit_groups, fields, location).take(taken)
            except (pa.ArrowInvalid, OSError):
                pass  # read the whole chunks instead: never worse than reading them in the first place
        return read_fields(parquet, layout, hit_groups, fields, location).take(taken)

    def _sparse(self, parquet: pq.ParquetFile, layout: Layout, source: Any, fields: Sequence[Field],
                groups: list[int], hits: dict[int, tuple[pa.Array, int, int, int]], location: str
                ) -> pq.ParquetFile | None:
        """A reader of a copy of the file in which the pages of ``fields``' columns holding no wanted row
        read as nulls (READ-15); None when no column chunk is worth it (or the file is not local).
        The pages found in the file's chunks are kept for the next read (``parquet_pages.PAGES``)."""
        if not parquet_pages.ENABLED or not self.local or not layout.flat or not hasattr(source, "readinto"):
            return None
        plan = layout.plan(fields, False, None)
        leaves = [layout.leaf[name] for name in plan.columns]
        footer = parquet.metadata
        walk = set()
        for g in groups:
            positions, lo, hi, first = hits[g]
            wanted = positions.slice(lo, hi - lo)
            row_group = footer.row_group(g)
            walk.update((g, c) for c in leaves if c in layout.nullable_leaves
                        and parquet_pages.worth_walking(row_group.column(c), row_group.num_rows, wanted, first))
        if not walk:
            return None
        rows = {}
        for g in {g for g, _ in walk}:
            positions, lo, hi, first = hits[g]
            rows[g] = [p - first for p in positions.slice(lo, hi - lo).to_pylist()]
        size = source.size()
        buffer = parquet_pages.sparse_copy(source, footer, size, groups, leaves, rows, walk,
                                           cached_as=(self.io, f"{location}#{size}"))
        return pq.ParquetFile(pa.BufferReader(buffer), metadata=footer, pre_buffer=False)


_LAYOUTS = 64  # distinct file schemas whose layouts a reader keeps


def _shared(derived: dict[Any, Any], table_schema: Schema, projected: Schema
            ) -> tuple[dict[int, tuple[Expression, _FilterColumns]], list[Layout]]:
    """The columns per residual filter and the file layouts kept with a shared evaluator (READ-19) for
    readers of ``projected`` from ``table_schema``. A file's layout depends on the file alone, the
    columns of a residual on the two schemas, checked by identity. Measured on the telemetry selective
    query after a sort: a reader's first layout and plans cost ~60 us of a 1.1 ms scan."""
    key = ("reader", id(table_schema), id(projected))
    found = derived.get(key)
    if found is None or found[0] is not table_schema or found[1] is not projected:
        found = derived[key] = (table_schema, projected, {}, [])
    return found[2], found[3]


def _source_size(source: Any) -> int | None:
    """The size in bytes of an open file (a pyarrow file's ``size()``, an fsspec file's ``size``), if known."""
    size = getattr(source, "size", None)
    if callable(size):
        size = size()
    return size if isinstance(size, int) else None


@contextmanager
def _read_errors(location: str) -> Iterator[None]:
    """A missing or unreadable file as :class:`CorruptDataFileError` naming it (READ-10)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise CorruptDataFileError(f"data file {location} is referenced by the table but missing "
                                   "(READ-10); restore it from a copy") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(f"data file {location} is not a readable Parquet file (READ-10): {exc}; "
                                   "restore the file the table wrote") from exc
