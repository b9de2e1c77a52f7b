"""Reading compaction inputs batch by batch, projected to the current schema by field id (COMPACT-12),
without the rows their deletion vectors delete (COMPACT-32).

The projection rule is the reader's (READ-4, as :func:`lakefmt.scan.read_data_file`
applies it): a column is found by the field id in the Parquet schema, never by name;
a column added after the file was written reads as nulls; a widened column is cast.
Unlike ``read_data_file`` this yields record batches, so a rewrite holds one batch per
input rather than whole files (bin-pack and the k-way merge stream; COMPACT-13/14).
Rows come out with the table's Arrow schema (field ids in the field metadata), ready
for :class:`~lakefmt.write.RollingFileWriter`.

A file with a deletion vector is read with its *live mask* (True for each row the
vector keeps, :func:`live_rows`): each batch is filtered by the mask's slice at the
batch's position in the file, so deleted rows never reach a rewrite (READ-14). The
rows read must be exactly as many as the mask covers (the manifest's ``record_count``,
DV-4); otherwise the file is not the one the vector was written for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.deletion_vectors import live_mask
from lakefmt.errors import CorruptMetadataError
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.schema import Schema, arrow_field_id

DEFAULT_BATCH_ROWS = 65_536


def iter_batches(io: FileIO, location: str, schema: Schema, *, batch_rows: int = DEFAULT_BATCH_ROWS,
                 charge: Callable[[int], None] | None = None, size_hint: int | None = None,
                 keep_dictionaries: bool = False, live: pa.BooleanArray | None = None
                 ) -> Iterator[pa.RecordBatch]:
    """Record batches of one data file, projected to ``schema`` (COMPACT-12), live rows only (COMPACT-32).

    ``charge(nbytes)`` is called with the file's size before it is read (the read
    budget, COMPACT-25); ``size_hint`` saves a size look-up when the manifest knows it.
    With ``keep_dictionaries``, string and binary columns that the file stores with a
    dictionary come out as Arrow dictionary arrays of the column's type (same values,
    see :func:`lakefmt.write.plain_schema`): decoding them is skipped, and a writer given them
    dictionary-encodes without hashing every value again. ``live`` is the file's live mask
    (one entry per row of the file, True = kept); None keeps every row.
    """
    if charge is not None:
        charge(size_hint if size_hint is not None else io.size(location))
    target = schema.to_arrow()
    try:
        with io.open_input(location) as source:
            parquet = pq.ParquetFile(source)
            by_id: dict[int, str] = {}
            for af in parquet.schema_arrow:
                fid = arrow_field_id(af)
                if fid is not None:
                    by_id[fid] = af.name
            names = [by_id[f.id] for f in schema.fields if f.id in by_id]
            if keep_dictionaries:
                parquet = _reopen_with_dictionaries(parquet, source, schema, by_id)
            produced = False
            position = 0  # of the batch's first row in the file
            for batch in parquet.iter_batches(batch_size=batch_rows, columns=names, use_threads=False):
                produced = True
                start, position = position, position + batch.num_rows
                if live is not None:
                    if position > len(live):
                        break  # reported below: the file holds more rows than its vector covers
                    keep = live.slice(start, batch.num_rows)
                    if keep.true_count != batch.num_rows:
                        batch = batch.filter(keep)
                yield project(batch, schema, by_id, target)
            if not produced and parquet.metadata.num_rows:
                raise CorruptMetadataError(f"data file {location} yielded no rows")
            if live is not None and position != len(live):
                raise CorruptMetadataError(
                    f"data file {location} holds {'at least ' if position > len(live) else ''}{position} rows but "
                    f"its deletion vector covers {len(live)} (DV-4): it is not the file the vector was written for")
    except FileNotFoundError as exc:
        raise CorruptMetadataError(f"data file {location} is referenced by the table but missing") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file {location} cannot be read: {exc}") from exc


def read_table(io: FileIO, location: str, schema: Schema, *, charge: Callable[[int], None] | None = None,
               size_hint: int | None = None, live: pa.BooleanArray | None = None) -> pa.Table:
    """A whole data file, projected to ``schema``, without the rows ``live`` leaves out."""
    batches = list(iter_batches(io, location, schema, charge=charge, size_hint=size_hint, live=live))
    return pa.Table.from_batches(batches, schema=schema.to_arrow())


def live_rows(io: FileIO, table_location: str, data_file: DataFile) -> pa.BooleanArray | None:
    """The live mask of a planned input (True = row kept), or None when it has no deletion vector.

    Raises:
        CorruptMetadataError: the vector is corrupt or not the file's (DV-4).
        MissingFileError: its deletion-vector file is gone (READ-10).
    """
    mask = live_mask(io, table_location, data_file)
    if mask is None:
        return None
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    return mask


def _reopen_with_dictionaries(parquet: pq.ParquetFile, source: object, schema: Schema,
                              by_id: dict[int, str]) -> pq.ParquetFile:
    """``parquet`` again, reading its dictionary-encoded string and binary columns as dictionaries."""
    footer = parquet.metadata
    if footer.num_row_groups == 0:
        return parquet
    first = footer.row_group(0)
    index = {first.column(i).path_in_schema: i for i in range(first.num_columns)}
    names = [by_id[f.id] for f in schema.fields
             if f.id in by_id and _is_bytes(f.type.to_arrow()) and by_id[f.id] in index
             and first.column(index[by_id[f.id]]).has_dictionary_page]
    if not names:
        return parquet
    return pq.ParquetFile(source, metadata=footer, read_dictionary=names)


def _is_bytes(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_binary(dtype)


def project(batch: pa.RecordBatch, schema: Schema, file_names: dict[int, str], target: pa.Schema
            ) -> pa.RecordBatch:
    """One batch read from a file, as ``schema``: by field id, nulls for new columns, widened casts.

    A dictionary column whose value type is the target type stays a dictionary (the
    batch's schema then says so; :func:`lakefmt.write.plain_schema` of it is ``target``),
    unless its dictionary holds more entries than half the batch's rows: such values
    hardly repeat (a small file written with a dictionary for every column), and a
    dictionary would only cost the rewrite a merge of large dictionaries and the output
    a dictionary page that overflows.
    """
    arrays, fields = [], []
    for field, arrow_field in zip(schema.fields, target):
        name = file_names.get(field.id)
        if name is None:
            arrays.append(pa.nulls(batch.num_rows, arrow_field.type))  # added after the file was written
            fields.append(arrow_field)
            continue
        column = batch.column(name)
        if pa.types.is_dictionary(column.type) and 2 * len(column.dictionary) > len(column):
            column = column.dictionary_decode()  # mostly distinct values: a dictionary would not pay
        if pa.types.is_dictionary(column.type) and column.type.value_type == arrow_field.type:
            fields.append(arrow_field.with_type(column.type))
        else:
            if column.type != arrow_field.type:
                column = column.cast(arrow_field.type)  # widened type (SCHEMA-6)
            fields.append(arrow_field)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
