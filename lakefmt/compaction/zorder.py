"""Z-order keys: rank-normalize columns and interleave their bits (spec/compaction.md COMPACT-15).

For ``k`` columns each column gets ``b = 64 // k`` bits. A column's values are
replaced by their dense rank (nulls rank last), ``r - 1`` is scaled to ``b`` bits
by shifting so that its highest possible bit is bit ``b - 1`` (a column with fewer
distinct values is spread over the same range as one with many), and the key
interleaves the bits, most significant first, column 0 first:

    key bit (j * k + (k - 1 - i)) = bit j of column i's scaled rank

Sorting rows by this unsigned 64-bit key clusters them on all ``k`` columns at once.
Everything is computed with ``pyarrow.compute`` (no per-row Python); ranks come from
:func:`lakefmt.compaction.ranks.dense_rank` (hashing for columns with few values).

:func:`zorder_keys` returns the key as defined. :func:`zorder_indices`, which orders a
rewrite, sorts an equivalent *compact* key instead: the key bits that can be non-zero
(a column of width ``w < b`` only ever sets its top ``w`` bits) are packed together
in the same relative order. Dropping bit positions that are zero in every key keeps
the order of keys, so the stable sort returns the same permutation -- but the compact
key has only ``sum(w)`` bits, a small range Arrow sorts by counting.

Example:
    >>> keys = zorder_keys(table, ["payload_id", "sensor_kind"])
    >>> table.take(pc.sort_indices(keys))          # == table.take(zorder_indices(table, [...]))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.compaction.ranks import dense_rank
from lakefmt.errors import ValidationError


def dense_ranks(column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, int]:
    """Dense ranks of ``column`` minus one (uint64, nulls ranked last), and the bit width they need."""
    ranks, count = dense_rank(column, "ascending", "at_end")
    return ranks, max(0, count - 1).bit_length()


@dataclass(frozen=True)
class _Column:
    """One Z-order column: its zero-based dense ranks and where each rank bit goes in the key."""

    ranks: pa.Array
    count: int  # distinct ranks
    bits: tuple[tuple[int, int], ...]  # (bit of the rank, bit of the key)


def _columns(table: pa.Table, columns: Sequence[str]) -> list[_Column]:
    """Ranks and bit positions of every Z-order column (COMPACT-15)."""
    if not columns:
        raise ValidationError("Z-order needs at least one column")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValidationError(f"Z-order columns {missing} are not in the table; it has {table.column_names}")
    k = len(columns)
    bits = 64 // k
    out = []
    for i, name in enumerate(columns):
        ranks, count = dense_rank(table.column(name), "ascending", "at_end")
        width = max(0, count - 1).bit_length()
        shift = bits - width  # > 0: spread the ranks over all b bits; < 0: keep their top b bits
        out.append(_Column(ranks, count, tuple((src, (src + shift) * k + (k - 1 - i))
                                                for src in range(max(0, -shift), width))))
    return out


def _assemble(columns: list[_Column], rows: int) -> pa.Array:
    """OR of every column's bits placed at their key positions.

    Each column's contribution is computed once per distinct rank (over ``0..count-1``)
    and gathered by rank, instead of shifting every bit of every row.
    """
    key = None
    for column in columns:
        values = pa.array(range(column.count), pa.uint64()) if column.count < len(column.ranks) else column.ranks
        part = pa.repeat(pa.scalar(0, pa.uint64()), len(values))
        for src, position in column.bits:
            bit = pc.bit_wise_and(pc.shift_right(values, pa.scalar(src, pa.uint64())), pa.scalar(1, pa.uint64()))
            part = pc.bit_wise_or(part, pc.shift_left(bit, pa.scalar(position, pa.uint64())))
        if values is not column.ranks:
            part = part.take(column.ranks)
        key = part if key is None else pc.bit_wise_or(key, part)
    return key if key is not None else pa.repeat(pa.scalar(0, pa.uint64()), rows)


def zorder_keys(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """The Z-order key (uint64) of every row of ``table`` over ``columns`` (COMPACT-15)."""
    return _assemble(_columns(table, columns), table.num_rows)


def zorder_indices(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Row order of ``table`` by Z-order key (stable for equal keys), via the compact key."""
    cols = _columns(table, columns)
    order = sorted(position for c in cols for _, position in c.bits)
    compact = {position: i for i, position in enumerate(order)}  # drop the bits no key ever sets
    cols = [replace(c, bits=tuple((src, compact[position]) for src, position in c.bits)) for c in cols]
    key = _assemble(cols, table.num_rows)
    del cols  # the ranks are not needed while sorting: the group is what memory must hold
    return pc.sort_indices(key)
