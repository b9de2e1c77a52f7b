"""Reading compaction inputs batch by batch, projected to the current schema by field id (COMPACT-12).

The projection rule is the reader's (READ-4, as :func:`lakefmt.scan.read_data_file`
applies it): a column is found by the field id in the Parquet schema, never by name;
a column added after the file was written reads as nulls; a widened column is cast.
Unlike ``read_data_file`` this yields record batches, so a rewrite holds one batch per
input rather than whole files (bin-pack and the k-way merge stream; COMPACT-13/14).
Rows come out with the table's Arrow schema (field ids in the field metadata), ready
for :class:`~lakefmt.write.RollingFileWriter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.errors import CorruptMetadataError
from lakefmt.io import FileIO
from lakefmt.schema import Schema, arrow_field_id

DEFAULT_BATCH_ROWS = 65_536


def iter_batches(io: FileIO, location: str, schema: Schema, *, batch_rows: int = DEFAULT_BATCH_ROWS,
                 charge: Callable[[int], None] | None = None, size_hint: int | None = None,
                 keep_dictionaries: bool = False) -> Iterator[pa.RecordBatch]:
    """Record batches of one data file, projected to ``schema`` (COMPACT-12).

    ``charge(nbytes)`` is called with the file's size before it is read (the read
    budget, COMPACT-25); ``size_hint`` saves a size look-up when the manifest knows it.
    With ``keep_dictionaries``, string and binary columns that the file stores with a
    dictionary come out as Arrow dictionary arrays of the column's type (same values,
    see :func:`lakefmt.write.plain_schema`): decoding them is skipped, and a writer given them
    dictionary-encodes without hashing every value again.
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
            for batch in parquet.iter_batches(batch_size=batch_rows, columns=names, use_threads=False):
                produced = True
                yield project(batch, schema, by_id, target)
            if not produced and parquet.metadata.num_rows:
                raise CorruptMetadataError(f"data file {location} yielded no rows")
    except FileNotFoundError as exc:
        raise CorruptMetadataError(f"data file {location} is referenced by the table but missing") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file {location} cannot be read: {exc}") from exc


def read_table(io: FileIO, location: str, schema: Schema, *, charge: Callable[[int], None] | None = None,
               size_hint: int | None = None) -> pa.Table:
    """A whole data file, projected to ``schema``."""
    batches = list(iter_batches(io, location, schema, charge=charge, size_hint=size_hint))
    return pa.Table.from_batches(batches, schema=schema.to_arrow())


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
    batch's schema then says so; :func:`lakefmt.write.plain_schema` of it is ``target``).
    """
    arrays, fields = [], []
    for field, arrow_field in zip(schema.fields, target):
        name = file_names.get(field.id)
        if name is None:
            arrays.append(pa.nulls(batch.num_rows, arrow_field.type))  # added after the file was written
            fields.append(arrow_field)
            continue
        column = batch.column(name)
        if pa.types.is_dictionary(column.type) and column.type.value_type == arrow_field.type:
            fields.append(arrow_field.with_type(column.type))
        else:
            if column.type != arrow_field.type:
                column = column.cast(arrow_field.type)  # widened type (SCHEMA-6)
            fields.append(arrow_field)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
