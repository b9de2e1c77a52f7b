"""Batch reads through Spark: pinned snapshot, pushed filters, packed input partitions (spec/spark.md, SPARK-2..SPARK-7).

The reader is created on the driver with a :class:`ScanSpec` (plain data: where the
table is, which metadata file and snapshot were pinned when the DataFrame was
created, the schema to read with). ``pushFilters`` keeps the filters lakefmt can apply
exactly (:mod:`lakefmt.spark.filters`); ``partitions`` plans the scan from metadata
only (READ-5) and packs the planned files into input partitions of about
``split-size`` bytes, so a table of many small files never costs one Python task per
file; ``read`` runs on executors and yields Arrow batches cast to exactly the schema
Spark asked for.

Each input partition carries the planned files' manifest entries
(:class:`~lakefmt.manifest.DataFile`, with the deletion vector each had in the pinned
snapshot), and the executor reads every file through the core reader with its entry:
rows a vector deletes are never returned, also when reading an older snapshot, which
sees the vectors of that snapshot (READ-14).
"""

from __future__ import annotations

import heapq
import json
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from lakefmt.expressions import ALWAYS_TRUE, Expression, and_, bind, to_expression
from lakefmt.manifest import DataFile
from lakefmt.metadata import read_metadata
from lakefmt.scan import DataScan, read_data_file
from lakefmt.schema import Schema
from lakefmt.spark.filters import push
from lakefmt.spark.options import DEFAULT_OPEN_COST, DEFAULT_SPLIT_SIZE, TableRef
from lakefmt.spark.types import spark_arrow_schema, to_spark_arrow

BATCH_ROWS = 131_072
READ_AHEAD = 2
T = TypeVar("T")
R = TypeVar("R")
F = TypeVar("F", bound=tuple[Any, ...])


@dataclass(frozen=True)
class ScanSpec:
    """Everything planning and reading need, as plain data (picklable, no catalog)."""

    ref: TableRef
    metadata_location: str
    snapshot_id: int | None
    schema_json: str  # the schema the snapshot is read with (READ-3)
    filter: Expression = ALWAYS_TRUE  # the ``filter`` option
    split_size: int = DEFAULT_SPLIT_SIZE
    open_cost: int = DEFAULT_OPEN_COST
    min_partitions: int = 1
    table_location: str | None = None  # resolves deletion-vector paths (None: derived from each file's location)

    def schema(self) -> Schema:
        return Schema.from_json(json.loads(self.schema_json))


PlannedFile = tuple[str, int, DataFile]  # absolute location, size in bytes, manifest entry


class FilesPartition(InputPartition):
    """One Spark input partition: planned files (absolute location, size, manifest entry with its vector)."""

    def __init__(self, files: Sequence[PlannedFile]) -> None:
        super().__init__(tuple(files))

    @property
    def files(self) -> tuple[PlannedFile, ...]:
        return self.value  # type: ignore[no-any-return]


class LakefmtReader(DataSourceReader):
    """Reads one pinned snapshot of a lakefmt table (SPARK-2)."""

    def __init__(self, scan: ScanSpec, schema: StructType) -> None:
        self.scan = scan
        self.schema = schema
        self.columns = tuple(schema.fieldNames())
        scan.schema().select(list(self.columns))  # UnknownColumnError for a user schema naming other columns
        self.pushed: list[Expression] = []

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        """Keep what lakefmt applies exactly; return the rest, by reference, to Spark (SPARK-5)."""
        return iter(push(list(filters), self.scan.schema(), self.pushed.append))

    def row_filter(self) -> Expression:
        return and_(to_expression(self.scan.filter), *self.pushed)

    def planned(self) -> list[PlannedFile]:
        """The planned data files of the pinned snapshot after pruning (READ-5), with their entries."""
        io = self.scan.ref.io()
        metadata = read_metadata(io, self.scan.metadata_location)
        scan = DataScan.create(io, metadata, filter=self.row_filter(), snapshot_id=self.scan.snapshot_id)
        return [(t.location, t.data_file.file_size_bytes, t.data_file) for t in scan.plan().tasks]

    def plan_files(self) -> list[tuple[str, int]]:
        """The planned data files of the pinned snapshot, after pruning (READ-5): location and size."""
        return [(location, size) for location, size, _ in self.planned()]

    def partitions(self) -> list[InputPartition]:
        bins = partition_files(self.planned(), self.scan.split_size, self.scan.open_cost, self.scan.min_partitions)
        return [FilesPartition(b) for b in bins]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs on an executor: read each file, filter exactly, cast to Spark's Arrow schema (SPARK-6)."""
        if not isinstance(partition, FilesPartition) or not partition.files:
            return  # an empty scan still gets one (empty) partition from Spark
        io = self.scan.ref.io()
        table_schema = self.scan.schema()
        projected = table_schema.select(list(self.columns))
        row_filter = bind(self.row_filter(), table_schema)
        target = spark_arrow_schema(self.schema)

        def read_one(file: PlannedFile) -> pa.Table:
            location, _, data_file = file  # the entry: its vector's rows are dropped (READ-14)
            return read_data_file(io, location, table_schema, projected, row_filter,
                                  expected_rows=data_file.record_count, data_file=data_file,
                                  table_location=self.scan.table_location)

        for table in read_ahead(read_one, partition.files, READ_AHEAD):
            if table.num_rows:
                yield from to_spark_arrow(table, target).to_batches(max_chunksize=BATCH_ROWS)


def partition_files(files: Sequence[F], largest: int, open_cost: int, min_partitions: int) -> list[list[F]]:
    """Files in balanced input partitions of at most about ``largest`` bytes each (SPARK-4).

    A file is a tuple whose first two items are its location and size in bytes.

    Every file weighs its size plus ``open_cost``, so many small files share a partition.
    The number of partitions is a multiple of ``min_partitions`` (the cores): as many
    rounds of ``min_partitions`` as ``largest`` requires. Spark's own file sources cut
    at ``largest`` and leave a short last partition, which one core then reads alone
    while the others wait: 312 MiB of weight on 2 cores makes 128 + 128 + 56 MiB there,
    4 x 78 MiB here. Files go largest first to the lightest partition; there are never
    more partitions than files.

    Example:
        >>> partition_files([("a", 100), ("b", 60), ("c", 50), ("d", 10)], 1000, 0, 2)
        [[('a', 100), ('d', 10)], [('b', 60), ('c', 50)]]
    """
    if not files:
        return []
    cores = max(1, min_partitions)
    total = sum(f[1] + open_cost for f in files)
    rounds = max(1, -(-total // (cores * max(1, largest))))
    count = min(len(files), cores * rounds)
    bins: list[list[F]] = [[] for _ in range(count)]
    weights = [(0, i) for i in range(count)]  # a heap of (weight, bin)
    for file in sorted(files, key=lambda f: f[1], reverse=True):
        weight, i = heapq.heappop(weights)
        bins[i].append(file)
        heapq.heappush(weights, (weight + file[1] + open_cost, i))
    return [b for b in bins if b]


def read_ahead(fn: Callable[[T], R], items: Sequence[T], depth: int) -> Iterator[R]:
    """``fn`` over ``items`` in order, computing up to ``depth`` results ahead in threads."""
    with ThreadPoolExecutor(max_workers=max(1, depth)) as pool:
        futures = deque(pool.submit(fn, item) for item in items[:depth])
        next_index = len(futures)
        while futures:
            result = futures.popleft().result()
            if next_index < len(items):
                futures.append(pool.submit(fn, items[next_index]))
                next_index += 1
            yield result
