"""Reading a bin-pack group of small local files in one pass (spec/compaction.md COMPACT-38).

Opening a Parquet file costs pyarrow about 300 us before the first row (the file
object, the footer, the schema, a reader), as much as decoding a small file's rows:
for a group of tiny inputs that setup is most of the rewrite. :func:`read_small_inputs`
has DuckDB read every input of the group in one ``read_parquet`` pass instead, batch by
batch (``binpack`` still streams, COMPACT-13), through the rewrite thread's DuckDB
cursor of :mod:`lakefmt.compaction.verify` (one thread: its CPU is the rewrite's).

The pass is taken only when it reads exactly what the per-file reader would
(COMPACT-12, COMPACT-33), else None is returned and the caller reads file by file:

* local files, at least :data:`MIN_INPUTS` of them, of at most :data:`SMALL_INPUT_BYTES`
  each on average, none with a deletion vector;
* a flat schema of types DuckDB hands back to Arrow as they are (:func:`_one_pass_type`);
* every input's footer (read here) has the table's columns, in the table's order, with
  the table's names, field ids and Arrow types, and counts its manifest ``record_count``:
  names then select what the field ids would, and the rows of the pass are the inputs'
  rows, file by file, once the pass yields as many rows as the footers count.

Measured on a 20,000-row telemetry group of 80 files (pyarrow 26, DuckDB 2.0, CPU per
group): 46 ms read file by file, 22 ms in one pass (footers included); comparing the footers as
bytes (:mod:`lakefmt.compaction.footer_bytes`) takes the footers' 8 ms of that to 1.5 ms.

Example:
    >>> batches = read_small_inputs(io, location, schema, files, batch_rows=65_536)
    >>> if batches is None: ...  # read file by file
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.compaction.footer_bytes import footer_prefix, read_footer, rows_after_prefix
from lakefmt.compaction.verify import new_cursor
from lakefmt.errors import CorruptMetadataError
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.schema import Schema, arrow_field_id
from lakefmt.sql_filters import has_glob

SMALL_INPUT_BYTES = 128 * 1024  # mean input size at most this; larger files are read file by file
MIN_INPUTS = 8  # fewer inputs: the per-file setup saved is not worth a second reader
UTC = frozenset({"UTC", "Etc/UTC", "+00:00", "Z"})


class OnePassError(CorruptMetadataError):
    """DuckDB failed while reading the pass (say, a string column holding bytes that are not UTF-8,
    which it refuses and pyarrow reads): the caller deletes what it wrote and reads file by file."""


def read_small_inputs(io: FileIO, location: str, schema: Schema, files: Sequence[DataFile], *, batch_rows: int,
                      charge: Callable[[int], None] | None = None, counts: dict[str, int] | None = None
                      ) -> Iterator[pa.RecordBatch] | None:
    """The rows of ``files`` as batches of ``schema``, read in one DuckDB pass; None when the pass
    does not apply (see the module docstring) and the caller must read file by file.

    ``charge(nbytes)`` is called with each file's size before the pass reads it (COMPACT-25);
    once the pass has yielded every row, ``counts`` gets each input's rows (COMPACT-33).
    """
    if not one_pass_candidate(io.scheme, files):
        return None
    target = schema.to_arrow()
    if not all(_one_pass_type(f.type) for f in target):
        return None
    root = io.fs_path(location)
    paths = [f"{root}/{f.path}" for f in files]  # relative paths from manifests: no "..", nothing to normalize
    if any(map(has_glob, paths)):
        return None  # DuckDB would read a path with glob characters as a pattern
    if not _footers_match(paths, files, target):
        return None
    if charge is not None:
        for f in files:
            charge(f.file_size_bytes)
    cursor = new_cursor()  # its own: the thread's connection may hash rows meanwhile (COMPACT-17)
    try:
        reader = cursor.read_parquet(paths, hive_partitioning=False).to_arrow_reader(batch_rows)
    except duckdb.Error:
        cursor.close()
        return None
    cast = _cast_schema(reader.schema, target)
    if cast is None:
        reader.close()
        cursor.close()
        return None
    return _batches(reader, cursor, cast, target, files, paths, counts)


def one_pass_candidate(scheme: str, files: Sequence[DataFile]) -> bool:
    """Whether a group of ``files`` in storage of ``scheme`` may be read in one pass, judged from
    the manifests alone (the schema and the footers are checked when it is read)."""
    return (_small_local(scheme, len(files), sum(f.file_size_bytes for f in files))
            and all(f.deletion_vector is None for f in files))


def likely_candidates(scheme: str, summary: Mapping[str, str]) -> bool:
    """Whether a table in storage of ``scheme`` whose current snapshot has ``summary`` will likely
    have groups read in one pass: local, and at least :data:`MIN_INPUTS` files of at most
    :data:`SMALL_INPUT_BYTES` on average. Judged before planning, so that DuckDB can start while
    the run plans (its database costs about 20 ms of CPU); the plan decides."""
    return _small_local(scheme, int(summary.get("total-data-files", 0)), int(summary.get("total-files-size", 0)))


def _small_local(scheme: str, files: int, total_bytes: int) -> bool:
    """Local, at least :data:`MIN_INPUTS` files, at most :data:`SMALL_INPUT_BYTES` each on average."""
    return scheme == "file" and files >= MIN_INPUTS and total_bytes <= SMALL_INPUT_BYTES * files


def _batches(reader: pa.RecordBatchReader, cursor: duckdb.DuckDBPyConnection, cast: pa.Schema | bool,
             target: pa.Schema, files: Sequence[DataFile], paths: list[str], counts: dict[str, int] | None
             ) -> Iterator[pa.RecordBatch]:
    rows = 0
    try:
        for batch in reader:
            if cast is not True:
                batch = batch.cast(cast)  # type: ignore[arg-type]
            rows += batch.num_rows
            yield pa.RecordBatch.from_arrays(batch.columns, schema=target)
    except (duckdb.Error, OSError, pa.ArrowException) as exc:  # DuckDB's errors reach pyarrow's reader as OSError
        raise OnePassError(f"the data files {paths[0]} ... ({len(paths)} files) cannot be read in one pass: "
                           f"{exc}") from exc
    finally:
        reader.close()
        cursor.close()
    if counts is not None and rows == sum(f.record_count for f in files):
        counts.update((f.path, f.record_count) for f in files)  # each file's footer counts its record_count


def _one_pass_type(dtype: pa.DataType) -> bool:
    """A type DuckDB reads from Parquet and hands to Arrow with the very values and type
    (a tz-aware timestamp comes back in DuckDB's zone name for UTC, cast back)."""
    if pa.types.is_timestamp(dtype):
        return dtype.unit == "us" and (dtype.tz is None or dtype.tz in UTC)
    return any(check(dtype) for check in (pa.types.is_boolean, pa.types.is_int32, pa.types.is_int64,
                                          pa.types.is_float32, pa.types.is_float64, pa.types.is_string,
                                          pa.types.is_binary, pa.types.is_date32))


def _footers_match(paths: list[str], files: Sequence[DataFile], target: pa.Schema) -> bool:
    """Every footer has the table's columns (order, name, field id, type) and counts its manifest rows.

    The first footer is decoded by pyarrow and checked against the table; each other one must
    start with the first one's bytes up to the end of its schema (:mod:`footer_bytes`) and
    count its manifest rows: about 20 us a file instead of 100 us for a decoded footer.
    """
    try:
        with pa.OSFile(paths[0]) as source:
            footer = pq.read_metadata(source)
        stored = footer.schema.to_arrow_schema()
        if len(stored) != len(target) or any(
                s.name != t.name or s.type != t.type or arrow_field_id(s) != arrow_field_id(t)
                for s, t in zip(stored, target)):
            return False
        first = read_footer(paths[0])
        if first is None:
            return False
        prefix = footer_prefix(first)
        if prefix is None or rows_after_prefix(first, prefix) != footer.num_rows:
            return False
        for path, f in zip(paths, files):
            raw = first if path == paths[0] else read_footer(path)
            if raw is None or rows_after_prefix(raw, prefix) != f.record_count:
                return False  # the file-by-file read reports it (COMPACT-33)
    except (OSError, pa.ArrowException):
        return False  # the file-by-file read reports it
    return True


def _cast_schema(got: pa.Schema, target: pa.Schema) -> pa.Schema | bool | None:
    """True if DuckDB's batches have the target's types; the schema to cast them to when only
    timestamp zones name UTC differently; None otherwise."""
    if len(got) != len(target):
        return None
    same = True
    for g, t in zip(got, target):
        if g.type == t.type:
            continue
        if not (pa.types.is_timestamp(g.type) and pa.types.is_timestamp(t.type) and g.type.unit == t.type.unit
                and g.type.tz in UTC and (t.type.tz in UTC)):
            return None
        same = False
    return True if same else pa.schema([pa.field(g.name, t.type) for g, t in zip(got, target)])
