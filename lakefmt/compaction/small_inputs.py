"""Reading a bin-pack group of small local files in one pass (spec/compaction.md COMPACT-38).

Opening a Parquet file costs pyarrow about 300 us before the first row (the file
object, the footer, the schema, a reader), as much as decoding a small file's rows:
for a group of tiny inputs that setup is most of the rewrite. :func:`read_small_inputs`
reads each input whole with one read call and decodes it from memory, and hands on the
rows of several inputs at once, batch by batch (``binpack`` still streams, COMPACT-13). A
batch's arrays are combined into one copy: handing on each input's arrays as decoded, one chunk
per input, saved that copy but made the tiny Artemis bin-pack ~9% slower (246-253 against 226
ms, pyarrow 26): the Parquet writer and the COMPACT-17 check pay per chunk.

The pass is taken only when it reads exactly what the per-file reader would
(COMPACT-12, COMPACT-33), else None is returned and the caller reads file by file:

* local files, at least :data:`MIN_INPUTS` of them, of at most :data:`SMALL_INPUT_BYTES`
  each on average, none with a deletion vector;
* a flat schema of plain types (:func:`_one_pass_type`);
* every input's footer (read here) has the table's columns, in the table's order, with
  the table's names, field ids and Arrow types, and counts its manifest ``record_count``:
  names then select what the field ids would. Each input must then decode to its
  ``record_count`` rows of the table's types, else the pass stops with :class:`OnePassError`.

Measured on a 20,000-row telemetry group of 80 files (pyarrow 26, CPU of the group's whole
rewrite, warm): 51 ms, against 48 ms when DuckDB read the pass; but DuckDB's in-memory
database cost 20-35 ms of CPU to start in each process, ahead of the first group. Comparing
the footers as bytes (:mod:`lakefmt.compaction.footer_bytes`) costs 1.5 ms a group instead of 8 ms.

Example:
    >>> batches = read_small_inputs(io, location, schema, files, batch_rows=65_536)
    >>> if batches is None: ...  # read file by file
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.compaction.footer_bytes import footer_prefix, read_footer, rows_after_prefix
from lakefmt.errors import CorruptMetadataError
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.schema import Schema, arrow_field_id

SMALL_INPUT_BYTES = 128 * 1024  # mean input size at most this; larger files are read file by file
MIN_INPUTS = 8  # fewer inputs: the per-file setup saved is not worth a second reader
UTC = frozenset({"UTC", "Etc/UTC", "+00:00", "Z"})


class OnePassError(CorruptMetadataError):
    """An input of the pass cannot be read or does not decode as its footer said (a footer that also
    stores an Arrow schema may give other types): the caller deletes what it wrote and reads file by file."""


def read_small_inputs(io: FileIO, location: str, schema: Schema, files: Sequence[DataFile], *, batch_rows: int,
                      charge: Callable[[int], None] | None = None, counts: dict[str, int] | None = None
                      ) -> Iterator[pa.RecordBatch] | None:
    """The rows of ``files`` as batches of ``schema``, read in one pass; None when the pass
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
    if not _footers_match(paths, files, target):
        return None
    return _batches(paths, files, target, batch_rows, charge, counts)


def one_pass_candidate(scheme: str, files: Sequence[DataFile]) -> bool:
    """Whether a group of ``files`` in storage of ``scheme`` may be read in one pass, judged from
    the manifests alone (the schema and the footers are checked when it is read)."""
    return (scheme == "file" and len(files) >= MIN_INPUTS
            and sum(f.file_size_bytes for f in files) <= SMALL_INPUT_BYTES * len(files)
            and all(f.deletion_vector is None for f in files))


def _batches(paths: list[str], files: Sequence[DataFile], target: pa.Schema, batch_rows: int,
             charge: Callable[[int], None] | None, counts: dict[str, int] | None) -> Iterator[pa.RecordBatch]:
    """The inputs' rows, in order, as batches of ``target`` of about ``batch_rows`` rows: each file
    read whole into memory with one read call and decoded there."""
    read: dict[str, int] = {}
    pending: list[pa.Table] = []
    rows = 0
    for path, f in zip(paths, files):
        if charge is not None:
            charge(f.file_size_bytes)
        try:
            with open(path, "rb") as source:
                data = source.read()
            table = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise OnePassError(f"the data file {path} cannot be read in the one pass: {exc}") from exc
        if table.num_rows != f.record_count or table.schema.types != target.types:
            # A footer's key-value metadata (a stored Arrow schema) may give other types than the schema
            # the footers share; the file-by-file reader converts by field id (COMPACT-12).
            raise OnePassError(f"the data file {path} does not read as the footers said: {table.num_rows} rows "
                               f"of {table.schema.types}")
        read[f.path] = table.num_rows
        pending.append(pa.Table.from_arrays(table.columns, schema=target))
        rows += table.num_rows
        if rows >= batch_rows:
            yield from _joined(pending, batch_rows)
            pending, rows = [], 0
    yield from _joined(pending, batch_rows)
    if counts is not None:
        counts.update(read)


def _joined(tables: list[pa.Table], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of ``tables`` (one schema) in batches of up to ``batch_rows``, each of contiguous arrays."""
    if tables:
        yield from pa.concat_tables(tables).combine_chunks().to_batches(batch_rows)


def _one_pass_type(dtype: pa.DataType) -> bool:
    """A flat type whose Parquet column decodes to the same Arrow type in every writer's file (a
    timestamp in microseconds, naive or in UTC; the footer check compares the zone)."""
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
