"""Scans: two-pass planning and projected reads (spec/reading.md, READ-1..READ-9).

Planning reads only metadata (READ-5): pass 1 prunes manifests of the manifest list
with their partition summaries; pass 2 prunes entries of the surviving manifests
(read in parallel) by partition values and column bounds. Reading opens only the
planned files, only the needed columns, matched by field id (READ-6), and applies
the filter exactly with SQL semantics (READ-8).

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

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.errors import CorruptMetadataError, LakefmtError, ValidationError
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
               as_of: datetime | None = None) -> DataScan:
        if snapshot_id is not None and as_of is not None:
            raise ValidationError("pass snapshot_id or as_of, not both")
        if snapshot_id is not None:
            snapshot: Snapshot | None = metadata.snapshot_by_id(snapshot_id)
        elif as_of is not None:
            snapshot = metadata.snapshot_as_of(_to_ms(as_of))
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
                              self._metrics)


def read_data_file(io: FileIO, location: str, table_schema: Schema, projected: Schema,
                   row_filter: BoundExpression, metrics: MetricsEvaluator | None = None) -> pa.Table:
    """Read one data file projected to ``projected`` by field id, filtered exactly (READ-6..READ-8).

    Row groups whose footer statistics prove that no row matches are not read (READ-11);
    ``metrics`` is the filter's evaluator, built here when not given.
    """
    try:
        with io.open_input(location) as source:
            parquet = pq.ParquetFile(source)
            file_names = {}
            for af in parquet.schema_arrow:
                fid = arrow_field_id(af)
                if fid is not None:
                    file_names[fid] = af.name
            needed_ids = {f.id for f in projected.fields} | referenced_field_ids(row_filter)
            read_names = [file_names[fid] for fid in sorted(needed_ids) if fid in file_names]
            groups = matching_row_groups(parquet, table_schema, row_filter, metrics)
            if groups is None:
                raw = parquet.read(columns=read_names)
            else:
                raw = parquet.read_row_groups(groups, columns=read_names)
    except FileNotFoundError as exc:
        raise CorruptMetadataError(f"data file {location} is referenced by the table but missing") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file {location} cannot be read: {exc}") from exc
    by_id = {fid: raw.column(name) for fid, name in file_names.items() if name in raw.column_names}
    filter_fields = [table_schema.field_by_id(fid) for fid in referenced_field_ids(row_filter)]
    work_fields = list(projected.fields) + [f for f in filter_fields if f is not None and f not in projected.fields]
    arrays, names = [], []
    for field in work_fields:
        target = field.type.to_arrow()
        column = by_id.get(field.id)
        if column is None:
            column = pa.chunked_array([pa.nulls(raw.num_rows, target)])  # added after the file was written
        elif column.type != target:
            try:
                stored = from_arrow(column.type)
            except LakefmtError:
                stored = None
            if stored is None or not can_promote(stored, field.type):
                raise CorruptMetadataError(f"data file {location} stores column {field.name!r} (field id "
                                           f"{field.id}) as {column.type}, which does not widen to {field.type} "
                                           "(READ-6)")
            column = column.cast(target)  # widened type (SCHEMA-6)
        arrays.append(column)
        names.append(field.name)
    table = pa.table(arrays, names=names) if arrays else pa.table({}).append_column(
        "__rows", pa.nulls(raw.num_rows)).drop_columns(["__rows"])
    if not isinstance(row_filter, AlwaysTrue):
        table = table.filter(to_arrow_expression(row_filter, lambda fid: _name_of(table_schema, fid)))
    table = table.select([f.name for f in projected.fields])
    return table.cast(_plain_arrow_schema(projected))


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

