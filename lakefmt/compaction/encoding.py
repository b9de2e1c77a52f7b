"""Which output columns get Parquet dictionary encoding (spec/compaction.md COMPACT-16).

pyarrow dictionary-encodes every column by default and falls back to plain encoding
only once a row group's dictionary page passes 1 MiB. For a column whose values are
nearly all distinct — timestamps in microseconds, sequence numbers, measured doubles —
the dictionary never pays: the writer hashes every value, stores each one in the
dictionary *and* an index per row, then usually falls back anyway. Measured on one
partition of 4.8 million Artemis-like rows (pyarrow 26, ZSTD 3): with a dictionary,
``ts``, ``seq`` and ``value`` wrote 35-60% slower and 4-26% larger than plain + ZSTD,
while ``mission_id`` and ``sensor_kind`` wrote 2-3x smaller with one.

:func:`dictionary_columns` decides per column from a sample of the group's rows: a
top-level column keeps its dictionary unless at least :data:`HIGH_CARDINALITY_RATIO`
of the sample's non-null values are distinct. With a sample of 65,536 rows, a ratio of
0.9 means at least ~300,000 distinct values per million rows, whose dictionary
(2.4 MB of 8-byte values) would overflow the 1 MiB page limit regardless. Nested
columns and samples too small to tell keep the dictionary (pyarrow's default).
The choice changes only the encoding, never a value.

Example:
    >>> dictionary_columns(table.slice(0, SAMPLE_ROWS))
    ['mission_id', 'payload_id', 'sensor_kind']
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SAMPLE_ROWS = 65_536
MIN_SAMPLE_ROWS = 1_024
HIGH_CARDINALITY_RATIO = 0.9


def high_cardinality(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether at least :data:`HIGH_CARDINALITY_RATIO` of the non-null values of a sample are distinct."""
    non_null = len(column) - column.null_count
    if non_null < MIN_SAMPLE_ROWS:
        return False
    try:
        distinct = pc.count_distinct(column, mode="only_valid").as_py()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False  # a type count_distinct does not know: keep pyarrow's default
    return distinct >= HIGH_CARDINALITY_RATIO * non_null


def _leaves(dtype: pa.DataType) -> int:
    """How many Parquet leaf columns a column of ``dtype`` writes."""
    if pa.types.is_struct(dtype):
        return sum(_leaves(dtype.field(i).type) for i in range(dtype.num_fields))
    if pa.types.is_map(dtype):
        return _leaves(dtype.key_type) + _leaves(dtype.item_type)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return _leaves(dtype.value_type)
    return 1


def leaf_paths(schema: pa.Schema) -> list[tuple[int, str]]:
    """``(top-level column index, Parquet leaf path)`` for every leaf column ``schema`` writes."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    parquet_schema = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    owners = [i for i, field in enumerate(schema) for _ in range(_leaves(field.type))]
    return [(owners[i], parquet_schema.column(i).path) for i in range(len(parquet_schema))]


def dictionary_columns(sample: pa.Table) -> list[str] | bool:
    """The leaf paths to dictionary-encode, for pyarrow's ``use_dictionary`` (COMPACT-16).

    ``True`` (every column, pyarrow's default) when no column of ``sample`` is
    high-cardinality; otherwise every leaf path except those of the high-cardinality
    top-level primitive columns.
    """
    sample = sample.slice(0, SAMPLE_ROWS)
    plain = {i for i, (field, column) in enumerate(zip(sample.schema, sample.columns))
             if not pa.types.is_nested(field.type) and not pa.types.is_boolean(field.type)
             and high_cardinality(column)}
    if not plain:
        return True
    return [path for owner, path in leaf_paths(sample.schema) if owner not in plain]
