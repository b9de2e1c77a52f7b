"""Reading and writing manifests and manifest lists as Parquet (spec/manifests.md).

The column layouts here are the ones tabled in MAN-2 and ML-2. A manifest holds
entries of one partition spec; its ``partition`` struct column has one field per
partition field, typed by the transform's result type (MAN-4), and is omitted for
an unpartitioned spec.
"""

from __future__ import annotations

import io as _io
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt import arrow_values
from lakefmt.conversions import from_bytes, lower_bound_value, to_bytes, to_physical, upper_bound_value
from lakefmt.deletion_vectors import DeletionVector
from lakefmt.errors import CorruptMetadataError, MissingFileError
from lakefmt.io import FileIO
from lakefmt.manifest import (
    STATS_FIELDS,
    DataFile,
    EntryStatus,
    FieldSummary,
    ManifestContents,
    ManifestEntry,
    ManifestFile,
    data_files_from_manifest,
)
from lakefmt.manifest_stats import ManifestStats, stored_stats
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema
from lakefmt.types import LakeType

_STATS_MAP_INT = pa.map_(pa.int32(), pa.int64())
_BOUNDS_MAP = pa.map_(pa.int32(), pa.binary())

# MAN-2 column 14, format version 2 only (DV-5).
DELETION_VECTOR_TYPE = pa.struct([
    pa.field("path", pa.string(), nullable=False), pa.field("offset", pa.int64(), nullable=False),
    pa.field("length", pa.int64(), nullable=False), pa.field("cardinality", pa.int64(), nullable=False)])

_SUMMARY_TYPE = pa.struct([("contains_null", pa.bool_()), ("lower_bound", pa.binary()),
                           ("upper_bound", pa.binary())])
MANIFEST_LIST_SCHEMA = pa.schema([
    pa.field("manifest_path", pa.string(), nullable=False),
    pa.field("manifest_length", pa.int64(), nullable=False),
    pa.field("partition_spec_id", pa.int32(), nullable=False),
    pa.field("added_snapshot_id", pa.int64(), nullable=False),
    pa.field("sequence_number", pa.int64(), nullable=False),
    pa.field("added_files_count", pa.int32(), nullable=False),
    pa.field("existing_files_count", pa.int32(), nullable=False),
    pa.field("deleted_files_count", pa.int32(), nullable=False),
    pa.field("added_rows_count", pa.int64(), nullable=False),
    pa.field("existing_rows_count", pa.int64(), nullable=False),
    pa.field("deleted_rows_count", pa.int64(), nullable=False),
    pa.field("partitions", pa.list_(_SUMMARY_TYPE)),
])


def manifest_schema(spec: PartitionSpec, schema: Schema, format_version: int = 1) -> pa.Schema:
    """The Arrow schema of a manifest for ``spec`` (MAN-2); version 2 adds ``deletion_vector`` (DV-5)."""
    fields = [
        pa.field("status", pa.int32(), nullable=False),
        pa.field("snapshot_id", pa.int64()),
        pa.field("sequence_number", pa.int64()),
        pa.field("file_path", pa.string(), nullable=False),
        pa.field("file_format", pa.string(), nullable=False),
    ]
    if not spec.is_unpartitioned:
        fields.append(pa.field("partition", spec.arrow_struct_type(schema), nullable=False))
    fields += [
        pa.field("record_count", pa.int64(), nullable=False),
        pa.field("file_size_bytes", pa.int64(), nullable=False),
        pa.field("value_counts", _STATS_MAP_INT),
        pa.field("null_value_counts", _STATS_MAP_INT),
        pa.field("lower_bounds", _BOUNDS_MAP),
        pa.field("upper_bounds", _BOUNDS_MAP),
        pa.field("sort_order_id", pa.int32()),
    ]
    if format_version >= 2:
        fields.append(pa.field("deletion_vector", DELETION_VECTOR_TYPE))
    return pa.schema(fields)


ZSTD_MIN_ROWS = 2_048
"""Manifests and lists of fewer rows are Snappy-compressed, larger ones ZSTD level 1 (MAN-12).

Measured (pyarrow 26) on the 1,100-entry manifests of the planning benchmark, reading
the columns planning reads: 0.62 ms with ZSTD and dictionaries (as written before), 0.49 ms
with ZSTD alone, 0.34 ms with Snappy alone; the files are 63, 53 and 97 KB. Planning
reads every manifest of a snapshot, so the small ones are kept fast to decode, and
the large ones (a compacted table's) small.
"""


def _write_parquet(io: FileIO, location: str, table: pa.Table) -> int:
    """Write a manifest or manifest list (MAN-12): no dictionary pages, codec by size, no statistics."""
    buf = _io.BytesIO()
    if table.num_rows < ZSTD_MIN_ROWS:
        pq.write_table(table, buf, compression="snappy", use_dictionary=False, write_statistics=False)
    else:
        pq.write_table(table, buf, compression="zstd", compression_level=1, use_dictionary=False,
                       write_statistics=False)
    data = buf.getvalue()
    io.write_bytes(location, data)
    return len(data)


def write_manifest(io: FileIO, location: str, relative_path: str, entries: list[ManifestEntry],
                   spec: PartitionSpec, schema: Schema, *, snapshot_id: int, sequence_number: int,
                   format_version: int = 1) -> ManifestFile:
    """Write ``entries`` as a manifest and describe it as a manifest-list row.

    ``snapshot_id``/``sequence_number`` are those the ADDED entries will inherit
    (MAN-5); they go into the returned :class:`ManifestFile`. ``format_version`` is the
    table's (MAN-9): only a version 2 manifest can hold deletion vectors (DV-5).
    """
    arrow_schema = manifest_schema(spec, schema, format_version)
    files = [e.data_file for e in entries]
    # Column by column, not row by row: a list per column is several times cheaper than a dict per row.
    columns: dict[str, list[Any]] = {
        "status": [int(e.status) for e in entries],
        "snapshot_id": [e.snapshot_id for e in entries],
        "sequence_number": [e.sequence_number for e in entries],
        "file_path": [f.path for f in files],
        "file_format": [f.file_format for f in files],
        "record_count": [f.record_count for f in files],
        "file_size_bytes": [f.file_size_bytes for f in files],
        "sort_order_id": [f.sort_order_id for f in files],
    }
    vectors = [f.deletion_vector for f in files]
    if "deletion_vector" in arrow_schema.names:
        columns["deletion_vector"] = [None if dv is None else {"path": dv.path, "offset": dv.offset, "length": dv.length,
                                                                "cardinality": dv.cardinality} for dv in vectors]
    elif any(dv is not None for dv in vectors):
        path = next(f.path for f in files if f.deletion_vector is not None)
        raise ValueError(f"data file {path} has a deletion vector: its manifest needs format version 2")
    stored = stored_stats(files, arrow_schema)
    if stored is None:
        for name in STATS_FIELDS:
            columns[name] = [list(getattr(f, name).items()) for f in files]
    arrow_schema = arrow_schema.with_metadata({
        "lakefmt.format-version": str(format_version),
        "lakefmt.spec-id": str(spec.spec_id),
        "lakefmt.partition-spec": json.dumps(spec.to_json()),
        "lakefmt.schema": json.dumps(schema.to_json()),
    })
    arrays = dict(stored or {})
    if not spec.is_unpartitioned:
        arrays["partition"] = _partition_array(files, arrow_schema.field("partition").type)
    # Built from buffers, not with from_pydict: that imports pandas.
    table = pa.Table.from_arrays([arrays[f.name] if f.name in arrays else arrow_values.array(columns[f.name], f.type)
                                  for f in arrow_schema], schema=arrow_schema)
    length = _write_parquet(io, location, table)
    counts = {s: [0, 0] for s in EntryStatus}
    for status, record_count in zip(columns["status"], columns["record_count"]):
        counts[status][0] += 1
        counts[status][1] += record_count
    return ManifestFile(
        path=relative_path, length=length, spec_id=spec.spec_id,
        added_snapshot_id=snapshot_id, sequence_number=sequence_number,
        added_files_count=counts[EntryStatus.ADDED][0],
        existing_files_count=counts[EntryStatus.EXISTING][0],
        deleted_files_count=counts[EntryStatus.DELETED][0],
        added_rows_count=counts[EntryStatus.ADDED][1],
        existing_rows_count=counts[EntryStatus.EXISTING][1],
        deleted_rows_count=counts[EntryStatus.DELETED][1],
        partitions=summarize_partitions([e.data_file for e in entries if e.is_live], spec, schema),
    )


def _partition_array(files: list[DataFile], struct_type: pa.StructType) -> pa.StructArray:
    """The ``partition`` column (MAN-4): a child array per partition field, from the files' tuples in spec order."""
    partitions = [f.partition for f in files]
    width = struct_type.num_fields
    if any(len(p) != width for p in partitions):  # a short tuple leaves its last fields null
        partitions = [tuple(p[:width]) + (None,) * (width - len(p)) for p in partitions]
    fields = [struct_type.field(i) for i in range(width)]
    children = [arrow_values.array([p[i] for p in partitions], field.type) for i, field in enumerate(fields)]
    return pa.StructArray.from_arrays(children, fields=fields)


def summarize_partitions(files: Iterable[DataFile], spec: PartitionSpec, schema: Schema
                         ) -> tuple[FieldSummary, ...]:
    """Per partition field: whether any value is null, and the min and max (ML-4); a float zero is
    written -0.0 as the lower and +0.0 as the upper bound (TYPE-11)."""
    types = [t for _, t in spec.partition_type(schema)]
    lows: list[Any] = [None] * len(types)
    highs: list[Any] = [None] * len(types)
    nulls = [False] * len(types)
    for f in files:
        for i, v in enumerate(f.partition):
            if v is None:
                nulls[i] = True
                continue
            if isinstance(v, float) and math.isnan(v):  # bounds cover non-NaN values only (ML-4, TYPE-8)
                continue
            if lows[i] is None or v < lows[i]:
                lows[i] = v
            if highs[i] is None or v > highs[i]:
                highs[i] = v
    return tuple(
        FieldSummary(nulls[i],
                     None if lows[i] is None else to_bytes(types[i], lower_bound_value(types[i], lows[i])),
                     None if highs[i] is None else to_bytes(types[i], upper_bound_value(types[i], highs[i])))
        for i in range(len(types)))


def read_manifest(io: FileIO, location: str, manifest: ManifestFile, spec: PartitionSpec,
                  schema: Schema, *, inherit: bool = True) -> list[ManifestEntry]:
    """Read a manifest's entries, filling inherited snapshot ids and sequence numbers (MAN-5).

    Every statistic is decoded before this returns (tools that check a table want the
    file as it is now); planning goes through :func:`read_manifest_contents`, which defers them.
    """
    contents = read_manifest_contents(io, location, spec, schema)
    entries = (contents.entries(manifest.added_snapshot_id, manifest.sequence_number) if inherit
               else contents.entries())
    for f in contents.data_files:
        f.value_counts  # noqa: B018 - decodes the four statistics maps of the row
    return entries


def read_manifest_contents(io: FileIO, location: str, spec: PartitionSpec, schema: Schema) -> ManifestContents:
    """A manifest's entries, column by column, without inheritance (MAN-2, MAN-5).

    The file's footer is parsed and every column but the statistics maps is decoded
    here, so a missing or unreadable manifest fails at once (READ-10). The maps (MAN-6,
    MAN-7), most of a manifest's bytes, are decoded from the same parsed file only when a
    file's statistics are first asked for (:class:`lakefmt.manifest_stats.ManifestStats`): a plan without a
    filter never needs them. Columns are decoded a Python list at a time, not a row at a
    time: a dict per row costs several times more.
    """
    parquet = _open_parquet(io, location, "manifest")
    try:
        arrow_schema = parquet.schema_arrow
        stats = ManifestStats(parquet, location, _read_open, arrow_schema)
        table = _read_open(parquet, location, "manifest",
                           [name for name in arrow_schema.names if name not in STATS_FIELDS])
        part_types: list[LakeType] = [t for _, t in spec.partition_type(schema)]
        statuses = table.column("status").to_pylist()
        if not set(statuses) <= {0, 1, 2}:
            raise ValueError(f"unknown entry status in {sorted(set(statuses) - {0, 1, 2})} (MAN-3)")
        required = [table.column(name) for name in ("file_path", "file_format", "record_count", "file_size_bytes")]
        if any(c.null_count for c in required):
            raise ValueError("a required column holds a null (MAN-11)")
        paths, record_counts, sizes = (c.to_pylist() for c in (required[0], required[2], required[3]))
        files = data_files_from_manifest(paths, _partition_tuples(table, spec, part_types), record_counts, sizes,
                                         spec.spec_id, _same_or_each(required[1]),
                                         _same_or_each(table.column("sort_order_id"))
                                         if "sort_order_id" in table.column_names else None,
                                         _deletion_vectors(table), stats)
        return ManifestContents(statuses, table.column("snapshot_id").to_pylist(),
                                table.column("sequence_number").to_pylist(), files)
    except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as exc:
        raise CorruptMetadataError(f"manifest {location} is malformed: {exc}") from exc


def _same_or_each(column: pa.ChunkedArray) -> Any:
    """A column's one value when every row holds it (None for all nulls), else its values per row (a list).

    A manifest's file format and sort order are mostly the same for every file: one
    Python object stands for all rows (:func:`~lakefmt.manifest.data_files_from_manifest`).
    """
    if not len(column):
        return []
    if column.null_count == len(column):
        return None
    if len(column) < _FEW_ROWS:  # a few rows: cheaper in Python than in two compute calls
        values = column.to_pylist()
        return values[0] if values.count(values[0]) == len(values) else values
    if not column.null_count:
        first = column[0]
        if pc.all(pc.equal(column, first)).as_py():
            return first.as_py()
    return column.to_pylist()


_FEW_ROWS = 64  # below this, per-row Python beats the fixed cost of Arrow compute calls (a 1-row manifest)


def _deletion_vectors(table: pa.Table) -> list[DeletionVector | None] | None:
    """Per row, the entry's deletion vector (DV-5); None when no row has one (and in version 1 manifests)."""
    if "deletion_vector" not in table.column_names:
        return None
    column = table.column("deletion_vector")
    if column.null_count == len(column):
        return None
    return [None if v is None else DeletionVector(v["path"], v["offset"], v["length"], v["cardinality"])
            for v in column.to_pylist()]


def _partition_tuples(table: pa.Table, spec: PartitionSpec, part_types: list[LakeType]) -> list[tuple[Any, ...]]:
    """Per row, the partition tuple in physical form (MAN-4); ``()`` for an unpartitioned spec.

    Only the distinct partitions become Python objects, each one tuple shared by its rows:
    every field is dictionary-encoded, and the rows' codes are combined field by field.
    """
    n = table.num_rows
    if not spec.fields:
        return [()] * n
    if "partition" not in table.column_names:
        return [(None,) * len(spec.fields)] * n
    column = table.column("partition").combine_chunks()
    struct_type = column.type
    if n < _FEW_ROWS:
        return _partition_tuples_by_row(column, spec, part_types)
    distinct: list[tuple[Any, ...]] = [()]
    codes: pa.Array | None = None  # per row, its index in ``distinct`` (None: 0 for every row)
    for pf, ltype in zip(spec.fields, part_types):
        index = struct_type.get_field_index(pf.name)
        if index < 0:
            distinct = [d + (None,) for d in distinct]
            continue
        child = column.field(index)
        if column.null_count:
            child = pc.if_else(column.is_valid(), child, pa.nulls(n, child.type))
        values, field_codes = _encoded(child, ltype)
        if codes is None:
            distinct, codes = [distinct[0] + (v,) for v in values], field_codes
            continue
        combined = pc.add(pc.multiply(codes, len(values)), field_codes).dictionary_encode()
        distinct = [distinct[c // len(values)] + (values[c % len(values)],) for c in combined.dictionary.to_pylist()]
        codes = combined.indices.cast(pa.int64())
    return [distinct[0]] * n if codes is None else list(map(distinct.__getitem__, codes.to_pylist()))


def _partition_tuples_by_row(column: pa.StructArray, spec: PartitionSpec, part_types: list[LakeType]
                             ) -> list[tuple[Any, ...]]:
    """:func:`_partition_tuples` of a few rows, a Python value at a time, each row its own tuple."""
    return [tuple(None if row is None else to_physical(ltype, row.get(pf.name))
                  for pf, ltype in zip(spec.fields, part_types)) for row in column.to_pylist()]


def _encoded(child: pa.Array, ltype: LakeType) -> tuple[list[Any], pa.Array]:
    """A partition field's distinct values in physical form (TYPE-2) and, per row, the index of its value.

    Floats are not merged (hashing may take -0.0 for 0.0, TYPE-11), nor types without a
    hash kernel: each row is then its own value.
    """
    array, codes = child, None
    if not pa.types.is_floating(child.type):
        try:
            encoded = child.dictionary_encode(null_encoding="encode")
            array, codes = encoded.dictionary, encoded.indices.cast(pa.int64())
        except pa.ArrowNotImplementedError:
            pass
    if codes is None:
        codes = arrow_values.array(range(len(child)), pa.int64())
    if pa.types.is_date32(array.type):  # the physical form is the day number (TYPE-2)
        return array.cast(pa.int32()).to_pylist(), codes
    if pa.types.is_timestamp(array.type) and array.type.unit == "us":
        return array.cast(pa.int64()).to_pylist(), codes
    return [to_physical(ltype, v) for v in array.to_pylist()], codes


def write_manifest_list(io: FileIO, location: str, manifests: list[ManifestFile], *, format_version: int = 1) -> int:
    """Write a manifest list (ML-1) of a table of ``format_version`` (ML-7); returns its length in bytes."""
    rows = {name: [] for name in MANIFEST_LIST_SCHEMA.names}  # type: dict[str, list[Any]]
    for m in manifests:
        rows["manifest_path"].append(m.path)
        rows["manifest_length"].append(m.length)
        rows["partition_spec_id"].append(m.spec_id)
        rows["added_snapshot_id"].append(m.added_snapshot_id)
        rows["sequence_number"].append(m.sequence_number)
        rows["added_files_count"].append(m.added_files_count)
        rows["existing_files_count"].append(m.existing_files_count)
        rows["deleted_files_count"].append(m.deleted_files_count)
        rows["added_rows_count"].append(m.added_rows_count)
        rows["existing_rows_count"].append(m.existing_rows_count)
        rows["deleted_rows_count"].append(m.deleted_rows_count)
        rows["partitions"].append([
            {"contains_null": s.contains_null, "lower_bound": s.lower_bound, "upper_bound": s.upper_bound}
            for s in m.partitions])
    schema = MANIFEST_LIST_SCHEMA.with_metadata({"lakefmt.format-version": str(format_version)})
    table = arrow_values.table(rows, schema)  # not from_pydict: that imports pandas
    return _write_parquet(io, location, table)


def read_manifest_list(io: FileIO, location: str) -> list[ManifestFile]:
    """The rows of a manifest list (ML-2), decoded a column at a time."""
    table = _read_parquet(io, location, "manifest list")
    try:
        names = ("manifest_path", "manifest_length", "partition_spec_id", "added_snapshot_id", "sequence_number",
                 "added_files_count", "existing_files_count", "deleted_files_count", "added_rows_count",
                 "existing_rows_count", "deleted_rows_count")
        columns = [table.column(name).to_pylist() for name in names]
        summaries = [tuple(FieldSummary(p["contains_null"], p["lower_bound"], p["upper_bound"]) for p in ps or ())
                     for ps in table.column("partitions").to_pylist()]
        return list(map(ManifestFile, *columns, summaries))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptMetadataError(f"manifest list {location} is malformed: {exc}") from exc


def read_columns(io: FileIO, location: str, columns: Sequence[str], *, what: str) -> pa.Table:
    """Only ``columns`` of a manifest or manifest list (MAN-2, ML-2), e.g. paths and sizes for maintenance."""
    table = _read_parquet(io, location, what, columns)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise CorruptMetadataError(f"{what} {location} has no column(s) {missing}")
    return table


def _read_parquet(io: FileIO, location: str, what: str, columns: Sequence[str] | None = None) -> pa.Table:
    return _read_open(_open_parquet(io, location, what), location, what, columns)


def _open_parquet(io: FileIO, location: str, what: str) -> pq.ParquetFile:
    """The file read into memory with its footer parsed; a missing or unparsable file fails here (READ-10)."""
    try:
        data = io.read_bytes(location)
    except FileNotFoundError as exc:
        raise MissingFileError(f"{what} {location} is missing") from exc
    try:
        # Small files read whole: ParquetFile.read without the dataset layer of pq.read_table, without
        # pre-buffering and without a thread pool per file is ~3x faster; callers read files in parallel.
        return pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"{what} {location} is not a readable Parquet file: {exc}") from exc


def _read_open(parquet: pq.ParquetFile, location: str, what: str, columns: Sequence[str] | None) -> pa.Table:
    try:
        return parquet.read(columns=None if columns is None else list(columns), use_threads=False)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"{what} {location} is not a readable Parquet file: {exc}") from exc


def decode_bound(ltype: LakeType, data: bytes | None) -> Any:
    return None if data is None else from_bytes(ltype, data)
