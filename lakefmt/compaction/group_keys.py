"""The order key of a whole group, computed one batch at a time (spec/compaction.md COMPACT-14, 15, 36).

A rewrite that holds its group ranks each key column over the rows it holds
(:func:`lakefmt.compaction.ranks.sort_indices`, :func:`lakefmt.compaction.zorder.zorder_indices`).
A rewrite that does not hold its group (:mod:`lakefmt.compaction.spill`) first collects the
distinct values of the key columns over the whole group; from them a :class:`GroupKey`
gives every batch of the group's rows a 64-bit key that orders rows exactly as the
in-memory rewrite orders the group:

* ``zorder``: the compact Z-order key of COMPACT-15 (every significant bit), built from
  the ranks the rows have in the whole group. Rows with equal keys are ordered by their
  input position, as the in-memory stable sort orders them.
* ``sort``: the dense ranks of the sort columns packed into one integer, first column in the
  highest bits. When the ranks of all the columns do not fit in 64 bits, the key packs the
  longest prefix of columns that does: it orders rows by that prefix only
  (``complete`` is False) and rows with equal keys are then sorted by the full order.

Each column's contribution to the key is a function of its value, so it is computed once
per distinct value and gathered by a hash look-up (``pc.index_in``) for each batch.

Example:
    >>> key = zorder_group_key({"x": pa.array([3, 1, 2]), "y": pa.array(["a", "b"])}, ["x", "y"])
    >>> key.of(batch)                      # uint64, one key per row of batch
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.compaction.ranks import RankMap
from lakefmt.compaction.zorder import zorder_layout, zorder_parts

_U64 = pa.uint64()


@dataclass(frozen=True)
class _Part:
    """One key column: its rank map and the key bits of each of its distinct values."""

    name: str
    ranks: RankMap
    by_value: pa.Array  # uint64, aligned with ranks.values
    null_bits: int


@dataclass(frozen=True)
class GroupKey:
    """A 64-bit key for the rows of one group: sorting by it (stably) orders them (COMPACT-36)."""

    parts: tuple[_Part, ...]
    bits: int  # significant bits: every key is below 2**bits
    complete: bool  # False: rows with equal keys still need sorting by the full sort order

    @property
    def names(self) -> list[str]:
        """The columns the key is computed from (each once)."""
        return list(dict.fromkeys(p.name for p in self.parts))

    def of(self, rows: pa.Table | pa.RecordBatch) -> pa.Array:
        """The key of every row of ``rows`` (uint64).

        Raises:
            ValueError: a row holds a value the group's distinct values did not include.
        """
        key = None
        for part in self.parts:
            column = part.ranks.lookup(rows.column(part.name), part.by_value, part.null_bits)
            key = column if key is None else pc.bit_wise_or(key, column)
        return key if key is not None else pa.repeat(pa.scalar(0, _U64), rows.num_rows)


def zorder_group_key(distinct: Mapping[str, pa.Array], columns: Sequence[str]) -> GroupKey:
    """The compact Z-order key (COMPACT-15) over ``columns`` of the group whose distinct values are ``distinct``."""
    maps = [RankMap(distinct[name]) for name in columns]
    counts = [m.count for m in maps]
    pieces = zorder_parts(counts, compact=True)
    parts = []
    for name, ranks, piece in zip(columns, maps, pieces):
        null_bits = int(piece[ranks.null_rank].as_py()) if ranks.null_rank is not None else 0
        parts.append(_Part(name, ranks, piece.take(ranks.ranks), null_bits))
    bits = sum(len(column) for column in zorder_layout(counts, compact=True))  # the compact key's bits
    return GroupKey(tuple(parts), bits, True)


def sort_group_key(distinct: Mapping[str, pa.Array], keys: Sequence[tuple[str, str, str]]) -> GroupKey:
    """The packed dense ranks of the longest prefix of ``keys`` that fits in 64 bits (COMPACT-14)."""
    maps, widths = [], []
    for name, order, placement in keys:
        ranks = RankMap(distinct[name], order, placement)
        width = max(1, (ranks.count - 1).bit_length())
        if sum(widths) + width > 64:
            break
        maps.append((name, ranks))
        widths.append(width)
    shift = sum(widths)
    parts = []
    for (name, ranks), width in zip(maps, widths):
        shift -= width
        by_value = pc.shift_left(ranks.ranks, pa.scalar(shift, _U64)) if shift else ranks.ranks
        null_bits = (ranks.null_rank << shift) if ranks.null_rank is not None else 0
        parts.append(_Part(name, ranks, by_value, null_bits))
    return GroupKey(tuple(parts), sum(widths), len(maps) == len(keys))
