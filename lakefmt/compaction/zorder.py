"""Z-order keys: rank-normalize columns and interleave their bits (spec/compaction.md COMPACT-15).

For ``k`` columns each column gets ``b = 64 // k`` bits. A column's values are
replaced by their dense rank (nulls rank last), ``r - 1`` is scaled to ``b`` bits
by shifting so that its highest possible bit is bit ``b - 1`` (a column with fewer
distinct values is spread over the same range as one with many), and the key
interleaves the bits, most significant first, column 0 first:

    key bit (j * k + (k - 1 - i)) = bit j of column i's scaled rank

Sorting rows by this unsigned 64-bit key clusters them on all ``k`` columns at once.
Everything is computed with ``pyarrow.compute`` (no per-row Python).

Example:
    >>> keys = zorder_keys(table, ["payload_id", "sensor_kind"])
    >>> table.take(pc.sort_indices(keys))
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.errors import ValidationError

_ONE = pa.scalar(1, pa.uint64())


def dense_ranks(column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, int]:
    """Dense ranks of ``column`` minus one (uint64, nulls ranked last), and the bit width they need."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if len(column) == 0:
        return pa.array([], pa.uint64()), 0
    ranks = pc.rank(column, sort_keys=[("", "ascending", "at_end")], tiebreaker="dense")
    zero_based = pc.subtract(ranks.cast(pa.uint64()), _ONE)
    return zero_based, int(pc.max(zero_based).as_py()).bit_length()


def zorder_keys(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """The Z-order key (uint64) of every row of ``table`` over ``columns`` (COMPACT-15)."""
    if not columns:
        raise ValidationError("Z-order needs at least one column")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValidationError(f"Z-order columns {missing} are not in the table; it has {table.column_names}")
    k = len(columns)
    bits = 64 // k
    key = pa.repeat(pa.scalar(0, pa.uint64()), table.num_rows)
    for i, name in enumerate(columns):
        ranks, width = dense_ranks(table.column(name))
        shift = bits - width  # > 0: spread the ranks over all b bits; < 0: keep their top b bits
        for src in range(max(0, -shift), width):
            bit = pc.bit_wise_and(pc.shift_right(ranks, pa.scalar(src, pa.uint64())), _ONE)
            position = (src + shift) * k + (k - 1 - i)
            key = pc.bit_wise_or(key, pc.shift_left(bit, pa.scalar(position, pa.uint64())))
    return key


def zorder_indices(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Row order of ``table`` by Z-order key (stable for equal keys)."""
    return pc.sort_indices(zorder_keys(table, columns))
