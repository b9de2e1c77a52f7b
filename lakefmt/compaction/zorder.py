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

A column's contribution to the key depends on its rank only, so :func:`zorder_parts`
computes it once per distinct rank; a rewrite that does not hold its group
(:mod:`lakefmt.compaction.spill`) gathers it by the ranks each batch has in the whole
group (:class:`lakefmt.compaction.ranks.RankMap`) and gets the same keys.

Example:
    >>> keys = zorder_keys(table, ["payload_id", "sensor_kind"])
    >>> table.take(pc.sort_indices(keys))          # == table.take(zorder_indices(table, [...]))
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.compaction.ranks import dense_rank
from lakefmt.errors import ValidationError


def dense_ranks(column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, int]:
    """Dense ranks of ``column`` minus one (uint64, nulls ranked last), and the bit width they need."""
    ranks, count = dense_rank(column, "ascending", "at_end")
    return ranks, max(0, count - 1).bit_length()


def zorder_layout(counts: Sequence[int], *, compact: bool = False) -> list[tuple[tuple[int, int], ...]]:
    """For each column, ``(bit of the rank, bit of the key)`` pairs, given each column's distinct ranks.

    The positions are COMPACT-15's; with ``compact`` the key bits no row can set are
    dropped and the others renumbered in the same order (an order-preserving key of
    ``sum(w)`` bits).
    """
    if not counts:
        raise ValidationError("Z-order needs at least one column")
    k = len(counts)
    bits = 64 // k
    layout = []
    for i, count in enumerate(counts):
        width = max(0, count - 1).bit_length()
        shift = bits - width  # > 0: spread the ranks over all b bits; < 0: keep their top b bits
        layout.append(tuple((src, (src + shift) * k + (k - 1 - i)) for src in range(max(0, -shift), width)))
    if compact:
        order = sorted(position for column in layout for _, position in column)
        renumber = {position: i for i, position in enumerate(order)}
        layout = [tuple((src, renumber[position]) for src, position in column) for column in layout]
    return layout


def zorder_parts(counts: Sequence[int], *, compact: bool = False) -> list[pa.Array]:
    """For each column, its contribution to the key for each rank ``0..count-1`` (uint64).

    A row's key is the OR of ``parts[i][rank_i]``: the bits are placed once per distinct
    rank, not once per row.
    """
    out = []
    for count, bits in zip(counts, zorder_layout(counts, compact=compact)):
        values = pa.array(range(count), pa.uint64())
        part = pa.repeat(pa.scalar(0, pa.uint64()), count)
        for src, position in bits:
            bit = pc.bit_wise_and(pc.shift_right(values, pa.scalar(src, pa.uint64())), pa.scalar(1, pa.uint64()))
            part = pc.bit_wise_or(part, pc.shift_left(bit, pa.scalar(position, pa.uint64())))
        out.append(part)
    return out


def _ranks(table: pa.Table, columns: Sequence[str]) -> tuple[list[pa.Array], list[int]]:
    """Zero-based dense ranks of every Z-order column over ``table`` and their counts (COMPACT-15)."""
    if not columns:
        raise ValidationError("Z-order needs at least one column")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValidationError(f"Z-order columns {missing} are not in the table; it has {table.column_names}")
    ranks, counts = [], []
    for name in columns:
        rank, count = dense_rank(table.column(name), "ascending", "at_end")
        ranks.append(rank)
        counts.append(count)
    return ranks, counts


def _assemble(parts: list[pa.Array], ranks: list[pa.Array], rows: int) -> pa.Array:
    """OR of every column's part gathered by its ranks."""
    key = None
    for part, rank in zip(parts, ranks):
        gathered = part.take(rank)
        key = gathered if key is None else pc.bit_wise_or(key, gathered)
    return key if key is not None else pa.repeat(pa.scalar(0, pa.uint64()), rows)


def zorder_keys(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """The Z-order key (uint64) of every row of ``table`` over ``columns`` (COMPACT-15)."""
    ranks, counts = _ranks(table, columns)
    return _assemble(zorder_parts(counts), ranks, table.num_rows)


def zorder_indices(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Row order of ``table`` by Z-order key (stable for equal keys), via the compact key."""
    ranks, counts = _ranks(table, columns)
    key = _assemble(zorder_parts(counts, compact=True), ranks, table.num_rows)
    del ranks  # the ranks are not needed while sorting: the group is what memory must hold
    return pc.sort_indices(key)
