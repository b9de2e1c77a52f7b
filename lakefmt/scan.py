"""Scans: two-pass planning and projected reads (spec/reading.md, READ-1..READ-9).

Planning reads only metadata (READ-5): pass 1 prunes manifests of the manifest list
with their partition summaries; pass 2 prunes entries of the surviving manifests
(read in parallel) by partition values and column bounds. Reading opens only the
planned files, only the needed columns, matched by field id (READ-6), checks that
each file is the one its manifest entry describes (READ-12), and applies the filter
exactly with SQL semantics (READ-8).

Scans are immutable: ``filter``, ``select`` and ``use_snapshot`` return new scans.

Example:
    >>> t.scan(filter="payload_id = 3", columns=["ts", "value"]).to_arrow()
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.errors import CorruptDataFileError, LakefmtError, MissingDependencyError, ValidationError
from lakefmt.evaluators import ManifestEvaluator, MetricsEvaluator, PartitionEvaluator, to_arrow_expression
from lakefmt.expressions import (
    ALWAYS_TRUE, AlwaysTrue, BoundExpression, Expression, bind, referenced_field_ids, to_expression,
)
from lakefmt.footer import row_group_metrics
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile, ManifestFile
from lakefmt.manifest_cache import read_entries, read_list
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.schema import Schema, arrow_field_id
from lakefmt.threads import thread_map
from lakefmt.types import can_promote, from_arrow

IO_THREADS = max(4, min(16, 2 * (os.cpu_count() or 2)))


@dataclass(frozen=True)
class FileScanTask:
    """One data file to read, with its absolute location."""

    data_file: DataFile
    location: str


@dataclass(frozen=True)
class ScanPlan:
    """What planning did: the files to read and how much it pruned."""

    tasks: list[FileScanTask]
    manifests_total: int
    manifests_read: int
    files_considered: int

    @property
    def files(self) -> list[DataFile]:
        return [t.data_file for t in self.tasks]


@dataclass(frozen=True)
class DataScan:
    """A read of one snapshot of a table, with a filter and a column selection."""

    io: FileIO
    metadata: TableMetadata
    snapshot: Snapshot | None
    schema: Schema
    row_filter: BoundExpression
    columns: tuple[str, ...] | None = None

    @staticmethod
    def create(io: FileIO, metadata: TableMetadata, *, filter: str | Expression | None = None,
               columns: Sequence[str] | None = None, snapshot_id: int | None = None,
               as_of: datetime | None = None, table: str | None = None) -> DataScan:
        """A scan; ``table`` (``namespace.name``) names the table in errors."""
        if snapshot_id is not None and as_of is not None:
            raise ValidationError("pass snapshot_id or as_of, not both")
        if snapshot_id is not None:
            snapshot: Snapshot | None = metadata.snapshot_by_id(snapshot_id, table=table)
        elif as_of is not None:
            snapshot = metadata.snapshot_as_of(_to_ms(as_of), table=table)
        else:
            snapshot = metadata.current_snapshot
        # Time travel reads with the schema of the snapshot; the current snapshot with the current schema (READ-3).
        if snapshot is not None and snapshot.snapshot_id != metadata.current_snapshot_id:
            schema = metadata.schema_by_id(snapshot.schema_id)
        else:
            schema = metadata.schema
        scan = DataScan(io, metadata, snapshot, schema, bind(ALWAYS_TRUE, schema))
        if filter is not None:
            scan = scan.filter(filter)
        if columns is not None:
            scan = scan.select(*columns)
        return scan

    # -- fluent refinements ------------------------------------------------------
    def filter(self, expr: str | Expression) -> DataScan:
        """A scan with ``expr`` AND-ed to the filter; unknown columns raise at once."""
        bound = bind(to_expression(expr), self.schema)
        combined = bound if isinstance(self.row_filter, AlwaysTrue) else self.row_filter & bound
        return replace(self, row_filter=combined)

    def select(self, *columns: str) -> DataScan:
        for c in columns:
            self.schema.find(c)
        return replace(self, columns=tuple(columns))

    @property
    def projected_schema(self) -> Schema:
        return self.schema if self.columns is None else self.schema.select(list(self.columns))

    # -- planning ----------------------------------------------------------------
    def plan(self) -> ScanPlan:
        """Two-pass planning from metadata only (READ-5)."""
        if self.snapshot is None:
            return ScanPlan([], 0, 0, 0)
        location = self.metadata.location
        manifests = read_list(self.io, f"{location}/{self.snapshot.manifest_list}")
        evaluators: dict[int, ManifestEvaluator] = {}
        selected: list[ManifestFile] = []
        for m in manifests:
            if m.live_files_count == 0:
                continue
            if m.spec_id not in evaluators:
                evaluators[m.spec_id] = ManifestEvaluator(self.row_filter, self.metadata.spec_by_id(m.spec_id),
                                                          self.schema)
            if evaluators[m.spec_id].might_match(m):
                selected.append(m)
        metrics = self._metrics
        partition_evals = {spec_id: PartitionEvaluator(self.row_filter, self.metadata.spec_by_id(spec_id),
                                                       self.schema) for spec_id in evaluators}

        def plan_manifest(m: ManifestFile) -> tuple[int, list[FileScanTask]]:
            entries = read_entries(self.io, f"{location}/{m.path}", m, self.metadata.spec_by_id(m.spec_id),
                                   self.schema)
            tasks, considered = [], 0
            partitions = partition_evals[m.spec_id]
            for e in entries:
                if not e.is_live:
                    continue  # READ-9
                considered += 1
                f = e.data_file
                if partitions.might_match(f.partition) and metrics.might_match(f):
                    tasks.append(FileScanTask(f, f"{location}/{f.path}"))
            return considered, tasks

        results = thread_map(plan_manifest, selected, IO_THREADS)
        tasks = [t for _, ts in results for t in ts]
        return ScanPlan(tasks, len(manifests), len(selected), sum(c for c, _ in results))

    def plan_files(self) -> list[DataFile]:
        return self.plan().files

    # -- reading -----------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        tasks = self.plan().tasks
        schema = _plain_arrow_schema(self.projected_schema)
        if not tasks:
            return schema.empty_table()
        tables = thread_map(self._read_task, tasks, IO_THREADS)
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Record batches, file by file, reading ahead a few files in parallel."""
        tasks = self.plan().tasks
        with ThreadPoolExecutor(max_workers=min(IO_THREADS, 4)) as pool:
            window = 4
            futures = [pool.submit(self._read_task, t) for t in tasks[:window]]
            next_index = len(futures)
            while futures:
                table = futures.pop(0).result()
                if next_index < len(tasks):
                    futures.append(pool.submit(self._read_task, tasks[next_index]))
                    next_index += 1
                yield from table.to_batches()

    def to_pandas(self) -> Any:
        """The scan's rows as a pandas DataFrame; needs the ``pandas`` extra.

        Raises:
            MissingDependencyError: pandas is not installed (``pip install 'lakefmt[pandas]'``).
        """
        try:
            import pandas  # noqa: F401 - optional (the ``pandas`` extra); checked before reading any file
        except ImportError as exc:
            raise MissingDependencyError(
                "to_pandas() needs pandas, which is not installed: pip install 'lakefmt[pandas]' "
                "(or use to_arrow(), which needs no extra)") from exc
        return self.to_arrow().to_pandas()

    def to_duckdb(self, connection: Any = None, *, name: str | None = None) -> Any:
        """A DuckDB relation over the scan's rows.

        The rows are read into Arrow first, so the relation can be run any number of
        times; register the relation (or pass ``name``) to query it with SQL.
        """
        import duckdb  # a core dependency; imported here to keep module import light

        con = connection or duckdb.connect()
        relation = con.from_arrow(self.to_arrow())
        if name:
            relation = relation.set_alias(name)
        return relation

    def count(self) -> int:
        if isinstance(self.row_filter, AlwaysTrue):
            return sum(f.record_count for f in self.plan_files())
        return self.to_arrow().num_rows

    @cached_property
    def _metrics(self) -> MetricsEvaluator:
        return MetricsEvaluator(self.row_filter, self.schema)

    def _read_task(self, task: FileScanTask) -> pa.Table:
        return read_data_file(self.io, task.location, self.schema, self.projected_schema, self.row_filter,
                              self._metrics, expected_rows=task.data_file.record_count)


def read_data_file(io: FileIO, location: str, table_schema: Schema, projected: Schema,
                   row_filter: BoundExpression, metrics: MetricsEvaluator | None = None, *,
                   expected_rows: int | None = None) -> pa.Table:
    """Read one data file projected to ``projected`` by field id, filtered exactly (READ-6..READ-8).

    Row groups whose footer statistics prove that no row matches are not read (READ-11);
    ``metrics`` is the filter's evaluator, built here when not given. With a filter, the
    filter's columns are read first and the other projected columns only from the row
    groups where some row matched, and only those rows are kept (late materialization):
    a selective query does not decompress a wide column it will not return.
    ``expected_rows`` is the manifest's ``record_count``: a footer that disagrees, like a
    file with no field ids, is not the file the manifest describes (READ-12).

    Raises:
        CorruptDataFileError: the file is missing, unreadable or not the table's (READ-10, READ-12).
    """
    try:
        with io.open_input(location) as source:
            parquet = pq.ParquetFile(source)
            file_names = data_file_field_ids(parquet, location, expected_rows)
            groups = matching_row_groups(parquet, table_schema, row_filter, metrics)
            if isinstance(row_filter, AlwaysTrue):
                table = _read_fields(parquet, groups, projected.fields, file_names, location)
            else:
                table = _read_filtered(parquet, groups, table_schema, projected, row_filter, file_names, location)
    except FileNotFoundError as exc:
        raise CorruptDataFileError(f"data file {location} is referenced by the table but missing "
                                   "(READ-10); restore it from a copy") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(f"data file {location} is not a readable Parquet file (READ-10): {exc}; "
                                   "restore the file the table wrote") from exc
    return table.select([f.name for f in projected.fields]).cast(_plain_arrow_schema(projected))


_POSITION = "__lakefmt_position"


def _read_filtered(parquet: pq.ParquetFile, groups: list[int] | None, table_schema: Schema, projected: Schema,
                   row_filter: BoundExpression, file_names: dict[int, str], location: str) -> pa.Table:
    """The rows of ``groups`` that match ``row_filter``: filter columns first, then the rest (READ-8)."""
    filter_ids = referenced_field_ids(row_filter)
    filter_fields = [f for f in (table_schema.field_by_id(fid) for fid in sorted(filter_ids)) if f is not None]
    rest = [f for f in projected.fields if f.id not in filter_ids]
    groups = list(range(parquet.metadata.num_row_groups)) if groups is None else groups
    if not groups:
        return _plain_arrow_schema(projected).empty_table()
    keys = _read_fields(parquet, groups, filter_fields, file_names, location)
    keys = keys.append_column(_POSITION, pa.array(range(keys.num_rows), pa.int64()))
    matched = keys.filter(to_arrow_expression(row_filter, lambda fid: _name_of(table_schema, fid)))
    if not rest:
        return matched.drop_columns([_POSITION])
    positions = matched.column(_POSITION).to_numpy()
    if len(positions) == keys.num_rows:
        others = _read_fields(parquet, groups, rest, file_names, location)
    else:
        # Only the row groups holding a match are read; positions are renumbered into them.
        sizes = [parquet.metadata.row_group(g).num_rows for g in groups]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        owner = np.searchsorted(starts, positions, side="right") - 1
        hit = np.unique(owner)
        shift = np.zeros(len(groups), dtype=np.int64)
        shift[hit] = starts[hit] - np.concatenate([[0], np.cumsum(np.asarray(sizes)[hit])[:-1]])
        others = _read_fields(parquet, [groups[i] for i in hit], rest, file_names, location)
        others = others.take(pa.array(positions - shift[owner])) if len(positions) else others.slice(0, 0)
    for field in rest:
        matched = matched.append_column(field.name, others.column(field.name))
    return matched.drop_columns([_POSITION])


def _read_fields(parquet: pq.ParquetFile, groups: list[int] | None, fields: Sequence[Any],
                 file_names: dict[int, str], location: str) -> pa.Table:
    """``fields`` of the table, from ``groups`` of the file (all when None), by field id (READ-6).

    A field the file does not hold reads as nulls (added after the file was written);
    a narrower stored type is widened (SCHEMA-6).
    """
    names = [file_names[f.id] for f in fields if f.id in file_names]
    raw = parquet.read(columns=names) if groups is None else parquet.read_row_groups(groups, columns=names)
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
        return pa.table({}).append_column("__rows", pa.nulls(rows)).drop_columns(["__rows"])
    return pa.table(arrays, names=[f.name for f in fields])


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


def _name_of(schema: Schema, field_id: int) -> str | None:
    field = schema.field_by_id(field_id)
    return field.name if field else None


def _plain_arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type.to_arrow(), nullable=not f.required) for f in schema.fields])


def _to_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return int(value.timestamp() * 1000)

