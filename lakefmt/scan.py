"""Scans: two-pass planning and projected reads (spec/reading.md, READ-1..READ-9, READ-18).

Planning reads only metadata (READ-5): pass 1 prunes manifests of the manifest list
with their partition summaries; pass 2 prunes entries of the surviving manifests
(read in parallel) by partition values and column bounds. Reading opens only the
planned files (:mod:`lakefmt.file_reader`), only the needed columns, matched by field
id (READ-6), checks that each file is the one its manifest entry describes (READ-12),
applies the filter exactly with SQL semantics (READ-8) and drops deleted rows (READ-14).
A filtered scan of several files evaluates its filter over batches of files at once
(:mod:`lakefmt.file_batches`, READ-16). A scan of local files into one Arrow table is first
offered to DuckDB (:mod:`lakefmt.duckdb_reads`, READ-18): filtered, its Parquet reader decodes
the other columns only for the rows that pass (on the benchmarks' selective queries half the CPU
of pyarrow's); unfiltered, it decodes many files with less CPU than pyarrow's dataset scanner.

Scans are immutable: ``filter``, ``select`` and ``use_snapshot`` return new scans.

Example:
    >>> t.scan(filter="payload_id = 3", columns=["ts", "value"]).to_arrow()
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cached_property
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import pyarrow as pa

from lakefmt import arrow_values, duckdb_reads, fragment_scan
from lakefmt.errors import CorruptMetadataError, MissingDependencyError, ValidationError
from lakefmt.evaluators import ManifestEvaluator, MetricsEvaluator, PartitionEvaluator
from lakefmt.expressions import (
    ALWAYS_TRUE,
    AlwaysTrue,
    BoundExpression,
    Expression,
    bind,
)
from lakefmt.file_batches import read_filtered
from lakefmt.file_reader import (  # re-exported: the reader of one planned file lives there
    FileReader,
    data_file_field_ids,
    matching_row_groups,
    plain_arrow_schema,
    read_data_file,
)
from lakefmt.gc_pause import gc_paused
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile, ManifestContents, ManifestFile
from lakefmt.manifest_cache import read_contents, read_list
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.scan_filters import PreparedFilter, bind_filter, prepared
from lakefmt.schema import Schema
from lakefmt.threads import thread_map

__all__ = ["DataScan", "FileReader", "FileScanTask", "ScanPlan", "data_file_field_ids", "matching_row_groups",
           "read_data_file"]

IO_THREADS = max(4, min(16, 2 * (os.cpu_count() or 2)))
# Threads reading the files of one scan: decoding holds a core, waiting for storage does not.
READ_THREADS = IO_THREADS
# A filtered to_batches() reads runs of at most this many files and planned rows at once (READ-18).
STREAM_FILES = 128
STREAM_ROWS = 1 << 20


class FileScanTask(NamedTuple):
    """One data file to read, with its absolute location (a tuple: a plan builds one per file, cheaply)."""

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
        bound = bind_filter(expr, self.schema)  # the same filter object again: kept with its evaluators (READ-19)
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
        prepared = self._prepared
        evaluators: dict[int, tuple[ManifestEvaluator, PartitionEvaluator]] = {}
        selected: list[ManifestFile] = []
        for m in manifests:
            if m.live_files_count == 0:
                continue
            if m.spec_id not in evaluators:
                evaluators[m.spec_id] = prepared.for_spec(self.metadata.spec_by_id(m.spec_id))
            if evaluators[m.spec_id][0].might_match(m):
                selected.append(m)
        metrics = self._metrics
        partition_evals = {spec_id: pair[1] for spec_id, pair in evaluators.items()}
        # A partition tuple's verdict is the same for every file that has it: evaluated once per plan.
        verdicts: dict[int, dict[tuple[Any, ...], bool]] = {spec_id: {} for spec_id in evaluators}
        unfiltered = isinstance(self.row_filter, AlwaysTrue)

        def plan_manifest(m: ManifestFile) -> tuple[int, list[FileScanTask]]:
            spec = self.metadata.spec_by_id(m.spec_id)
            contents = read_contents(self.io, f"{location}/{m.path}", spec, self.schema)
            live = _live_tasks(contents, location)  # READ-9: DELETED entries are not part of the snapshot
            if unfiltered:  # every live entry is planned (READ-5)
                return len(live), live
            kept = _kept_plans(contents, location)
            found = kept.get(id(prepared))
            if found is not None and found[0]() is prepared and found[1] is spec:
                return found[2]  # this filter's files of this manifest, from a plan before (READ-19)
            partitions, known = partition_evals[m.spec_id], verdicts[m.spec_id]
            tasks = []
            for task in live:
                f = task.data_file
                keep = known.get(f.partition)
                if keep is None:
                    keep = known[f.partition] = partitions.might_match(f.partition)
                if keep and metrics.might_match(f):
                    tasks.append(task)
            if len(kept) >= _KEPT_PLANS:
                kept.clear()
            kept[id(prepared)] = (weakref.ref(prepared), spec, (len(live), tasks))
            return len(live), tasks

        with gc_paused():  # the tasks built are kept with the cached manifests (lakefmt.gc_pause)
            results = thread_map(plan_manifest, selected, _plan_threads(self.io))
            tasks = list(chain.from_iterable(ts for _, ts in results))  # a new list: the per-manifest lists are cached
            distinct = len(set(map(_location, tasks)))
        if distinct != len(tasks):  # READ-9: live in one entry only
            seen: set[str] = set()
            twice = next(t.data_file.path for t in tasks if t.location in seen or seen.add(t.location))
            raise CorruptMetadataError(f"data file {twice} is live in more than one manifest entry of snapshot "
                                       f"{self.snapshot.snapshot_id} (READ-9); the table's metadata is corrupt")
        return ScanPlan(tasks, len(manifests), len(selected), sum(c for c, _ in results))

    def plan_files(self) -> list[DataFile]:
        return self.plan().files

    # -- reading -----------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        tasks = self.plan().tasks
        schema = plain_arrow_schema(self.projected_schema)
        if not tasks:
            return arrow_values.empty_table(schema)
        reader = self._reader
        files = [(t.location, t.data_file) for t in tasks]
        matched = duckdb_reads.read_matching(reader, files, READ_THREADS)  # READ-18
        if matched is not None:
            return matched
        if reader.metrics is not None and len(tasks) > 1:  # filtered: evaluated a batch of files at once (READ-16)
            tables = read_filtered(reader, files, READ_THREADS)
        elif reader.metrics is None and reader.local and len(tasks) >= fragment_scan.MIN_FILES:
            tables = fragment_scan.read_unfiltered(reader, tasks, READ_THREADS)  # READ-6, READ-12, READ-14
        else:
            tables = thread_map(lambda task: _read_with(reader, task), tasks, READ_THREADS)
        if len(tables) == 1:
            return tables[0]  # concat_tables of one table of 10,000 files' chunks costs ~90 ms
        if not schema:  # no column asked for: concat_tables would drop the row counts
            return pa.table({"rows": pa.nulls(sum(t.num_rows for t in tables))}).drop_columns(["rows"])
        return pa.concat_tables(tables) if tables else arrow_values.empty_table(schema)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Record batches in plan order, file by file, reading ahead a few files in parallel.

        A filtered scan of local files reads runs of files (at most :data:`STREAM_FILES` files and
        :data:`STREAM_ROWS` planned rows) with DuckDB where it can (READ-18): only one run's matching
        rows are held at once.
        """
        tasks = self.plan().tasks
        reader = self._reader
        if reader.metrics is None or not reader.local:
            yield from self._read_ahead(tasks)
            return
        for run in _runs(tasks):
            matched = duckdb_reads.read_matching(reader, [(t.location, t.data_file) for t in run], READ_THREADS)
            if matched is None:
                yield from self._read_ahead(run)
            else:
                yield from matched.to_batches()

    def _read_ahead(self, tasks: list[FileScanTask]) -> Iterator[pa.RecordBatch]:
        """The batches of ``tasks``, read file by file, a few files ahead in parallel."""
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
            return sum(f.live_record_count for f in self.plan_files())  # READ-14: deleted rows do not count
        return self.to_arrow().num_rows

    @cached_property
    def _prepared(self) -> PreparedFilter:
        return prepared(self.row_filter, self.schema)

    @cached_property
    def _metrics(self) -> MetricsEvaluator:
        return self._prepared.metrics

    @cached_property
    def _reader(self) -> FileReader:
        return self._make_reader()

    def _make_reader(self, *, column_threads: bool = True) -> FileReader:
        return FileReader(self.io, self.schema, self.projected_schema, self.row_filter,
                          None if isinstance(self.row_filter, AlwaysTrue) else self._metrics,
                          table_location=self.metadata.location, column_threads=column_threads)

    def _read_task(self, task: FileScanTask) -> pa.Table:
        return _read_with(self._reader, task)


def _read_with(reader: FileReader, task: FileScanTask) -> pa.Table:
    return reader.read(task.location, expected_rows=task.data_file.record_count, data_file=task.data_file)



def _runs(tasks: list[FileScanTask]) -> Iterator[list[FileScanTask]]:
    """``tasks`` in consecutive runs of at most STREAM_FILES files and STREAM_ROWS planned rows (one file at least)."""
    start = 0
    while start < len(tasks):
        end, rows = start, 0
        while end < len(tasks) and end - start < STREAM_FILES and (end == start or rows < STREAM_ROWS):
            rows += tasks[end].data_file.record_count
            end += 1
        yield tasks[start:end]
        start = end


def _live_tasks(contents: ManifestContents, location: str) -> list[FileScanTask]:
    """A task per live file of a manifest, kept with its cached contents: a warm plan builds none (READ-5)."""
    key = ("scan-tasks", location)
    tasks = contents.derived.get(key)
    if tasks is None:
        files = contents.live_files
        # Built by tuple.__new__ without a Python frame per task: half the time of FileScanTask(f, location).
        tasks = list(map(tuple.__new__, repeat(FileScanTask, len(files)),
                         zip(files, map(f"{location}/".__add__, map(_path, files)))))
        contents.derived[key] = tasks
    return tasks


def _kept_plans(contents: ManifestContents, location: str) -> dict[int, Any]:
    """The files of a cached manifest that filters planned before, per :class:`PreparedFilter` (READ-19).

    Kept with the manifest's contents, so they go when it leaves the cache; each filter is held
    weakly. A warm plan of the telemetry selective query (11 manifests) took 0.16 ms before
    and 0.02 ms with them.
    """
    key = ("planned", location)
    kept = contents.derived.get(key)
    if kept is None:
        kept = contents.derived.setdefault(key, {})
    return kept


_KEPT_PLANS = 16  # filters whose planned files a manifest keeps
_path = attrgetter("path")
_location = itemgetter(1)  # FileScanTask.location


def _plan_threads(io: FileIO) -> int:
    """Threads decoding the manifests of one plan.

    Decoding a manifest holds the GIL most of the time, and a local file's read hardly
    waits: more threads than cores then only contend (measured on 2 cores, 10 manifests of
    1,100 entries: 2 threads planned 15-25% faster than 4). An object store's reads wait,
    so there the I/O width applies.
    """
    if io.scheme in ("file", "memory"):
        return _LOCAL_PLAN_THREADS
    return IO_THREADS


_LOCAL_PLAN_THREADS = max(2, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                 else os.cpu_count() or 2))


def _name_of(schema: Schema, field_id: int) -> str | None:
    field = schema.field_by_id(field_id)
    return field.name if field else None


def _to_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return int(value.timestamp() * 1000)

