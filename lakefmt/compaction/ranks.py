"""Dense ranks, and row orders computed from them (spec/compaction.md COMPACT-14, COMPACT-15).

Sorting a group by several keys, one of them a string, is the slowest step of a
``sort`` rewrite when done with ``pc.sort_indices(table, sort_keys=[...])``: the
multi-key comparison sort compares strings row against row. Compaction keys
(payload ids, sensor kinds, ...) usually have few distinct values, so instead:

1. each key column is replaced by its **dense rank** under that key's direction and
   null placement (:func:`dense_rank`): for a column with few distinct values, by
   hashing (``pc.unique``, sort the distinct values, ``pc.index_in``), otherwise with
   ``pc.rank``;
2. the ranks are packed into one unsigned 64-bit key, first sort key in the highest
   bits (:func:`sort_indices`), and that key is sorted with Arrow's stable sort; with
   few distinct values its range is small and Arrow sorts it by counting.

A packed key orders rows exactly as the key tuple does, and both sorts are stable, so
the permutation is the one the multi-key sort returns. When the ranks need more than
64 bits together, :func:`sort_indices` falls back to the multi-key sort.

Example:
    >>> indices = sort_indices(table, [("payload_id", "ascending", "at_end"),
    ...                                ("sensor_kind", "ascending", "at_end")])
    >>> table.take(indices)
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import sorting

SAMPLE_ROWS = 65_536
FEW_DISTINCT_RATIO = 0.5  # hash when at most this fraction of a sample is distinct
_U64 = pa.uint64()


def _few_distinct(column: pa.Array) -> bool:
    """Whether hashing beats sorting: a sample of ``column`` repeats its values (not floats)."""
    dtype = column.type
    if pa.types.is_floating(dtype) or pa.types.is_nested(dtype) or pa.types.is_dictionary(dtype):
        return False  # NaN and -0.0 compare as pc.rank defines; nested types do not hash
    sample = column.slice(0, SAMPLE_ROWS)
    non_null = len(sample) - sample.null_count
    if non_null == 0:
        return True
    try:
        distinct = pc.count_distinct(sample, mode="only_valid").as_py()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return distinct <= FEW_DISTINCT_RATIO * non_null


def dense_rank(column: pa.Array | pa.ChunkedArray, order: str = "ascending",
               null_placement: str = "at_end") -> tuple[pa.Array, int]:
    """Zero-based dense ranks of ``column`` (uint64) and how many distinct ranks there are.

    Equal values share a rank, ranks follow ``order``, and all nulls share the first or
    the last rank (``null_placement``) -- exactly ``pc.rank(..., tiebreaker="dense") - 1``.
    """
    if pa.types.is_dictionary(column.type):  # ranked once per used dictionary entry, gathered by code
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        if not chunks or len(column) == 0:
            return pa.array([], _U64), 0
        rank_map = RankMap(pa.concat_arrays([c.dictionary.take(pc.unique(c.indices)) for c in chunks]),
                           order, null_placement)
        ranks = [rank_map.of(c) for c in chunks]
        return (pa.concat_arrays(ranks) if len(ranks) > 1 else ranks[0]), rank_map.count
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if len(column) == 0:
        return pa.array([], _U64), 0
    if _few_distinct(column):
        try:
            return _hashed_rank(column, order, null_placement)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # a type the hash kernels do not take: rank by sorting
    ranks = pc.rank(column, sort_keys=[("", order, null_placement)], tiebreaker="dense")
    zero_based = pc.subtract(ranks.cast(_U64), pa.scalar(1, _U64))
    return zero_based, int(pc.max(zero_based).as_py()) + 1


def _hashed_rank(column: pa.Array, order: str, null_placement: str) -> tuple[pa.Array, int]:
    distinct = pc.unique(column).drop_null()
    ordered = distinct.take(pc.sort_indices(distinct, sort_keys=[("", order)]))
    ranks = pc.index_in(column, value_set=ordered)  # null for null
    count = len(ordered)
    if column.null_count:
        if null_placement == "at_start":
            ranks = pc.add(ranks, pa.scalar(1, ranks.type))
            ranks = pc.fill_null(ranks, pa.scalar(0, ranks.type))
        else:
            ranks = pc.fill_null(ranks, pa.scalar(count, ranks.type))
        count += 1
    return ranks.cast(_U64), count


def sort_indices(table: pa.Table, keys: Sequence[tuple[str, str, str]]) -> pa.Array:
    """The stable row order of ``table`` by ``keys`` (``(column, order, null placement)``).

    Same result as :func:`lakefmt.sorting.sort_indices`, computed from one packed
    rank key when the ranks fit in 64 bits.
    """
    if table.num_rows == 0 or not keys:
        return sorting.sort_indices(_plain_keys(table, keys) if keys else table, list(keys))
    ranks: list[tuple[pa.Array, int]] = []
    bits = 0
    for name, order, placement in keys:
        rank, count = dense_rank(table.column(name), order, placement)
        width = max(1, (count - 1).bit_length())
        ranks.append((rank, width))
        bits += width
        if bits > 64:
            return sorting.sort_indices(_plain_keys(table, keys), list(keys))
    key = None
    shift = bits
    while ranks:
        rank, width = ranks.pop(0)  # released once packed
        shift -= width
        part = pc.shift_left(rank, pa.scalar(shift, _U64)) if shift else rank
        key = part if key is None else pc.bit_wise_or(key, part)
        del rank, part
    return pc.sort_indices(key)


def _plain_keys(table: pa.Table, keys: Sequence[tuple[str, str, str]]) -> pa.Table:
    """The key columns of ``table``, dictionary columns decoded (for the multi-key sort)."""
    names = list(dict.fromkeys(name for name, _, _ in keys))
    columns = [table.column(n) for n in names]
    return pa.table([c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in columns], names=names)


class RankMap:
    """Dense ranks of a column over a whole group, from the group's distinct values (COMPACT-36).

    ``distinct`` holds every value the group's column holds (in any order, repeats and a
    null allowed). :meth:`of` gives any batch of the group's rows the zero-based dense ranks
    those rows have among *all* the group's rows -- what :func:`dense_rank` computes over the
    group held in memory -- so keys can be computed one batch at a time.

    Example:
        >>> m = RankMap(pa.array(["b", None, "a"]))
        >>> m.of(pa.array(["b", "b", None])).to_pylist(), m.count
        ([1, 1, 2], 3)
    """

    def __init__(self, distinct: pa.Array, order: str = "ascending", null_placement: str = "at_end") -> None:
        values = pc.unique(distinct).drop_null()
        if len(values):
            ranks = pc.rank(values, sort_keys=[("", order, null_placement)], tiebreaker="dense")
            ranks = pc.subtract(ranks.cast(_U64), pa.scalar(1, _U64))
            count = int(pc.max(ranks).as_py()) + 1
        else:
            ranks, count = pa.array([], _U64), 0
        self.null_rank: int | None = None
        if distinct.null_count:
            if null_placement == "at_start":
                ranks = pc.add(ranks, pa.scalar(1, _U64))
                self.null_rank = 0
            else:
                self.null_rank = count
            count += 1
        self.values, self.ranks, self.count = values, ranks, count

    def lookup(self, column: pa.Array | pa.ChunkedArray, table: pa.Array, null_value: int) -> pa.Array:
        """``table[rank]`` for every row of ``column`` (``null_value`` for a null).

        Raises:
            ValueError: a value of ``column`` is not among the distinct values the map was built from.
        """
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_dictionary(column.type):  # looked up once per dictionary entry, gathered by index
            out = table.take(pc.index_in(column.dictionary, value_set=self.values)).take(column.indices)
        else:
            out = table.take(pc.index_in(column, value_set=self.values))
        if out.null_count != column.null_count:
            raise ValueError(f"{out.null_count - column.null_count} values are not among the group's "
                             f"{len(self.values)} distinct values")
        if column.null_count:
            out = pc.fill_null(out, pa.scalar(null_value, table.type))
        return out

    def of(self, column: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Zero-based dense ranks (uint64) of ``column``'s values among the group's."""
        return self.lookup(column, self.ranks, self.null_rank or 0)
