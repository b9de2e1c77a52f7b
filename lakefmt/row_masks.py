"""Row masks and positions of one data file across its row groups (READ-11, READ-14).

A reader of a file reads some of its row groups; the masks it evaluates cover the rows it
read, in read order, and deletion vectors and row positions cover the whole file. These
helpers move between the two.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


class IntValues:
    """An ascending Arrow array as a sequence of Python ints, for :func:`bisect.bisect_left`."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: int) -> int:
        return self.array[i].as_py()


def rows_of_groups(parquet: pq.ParquetFile, groups: list[int] | None, mask: pa.BooleanArray) -> pa.ChunkedArray:
    """The part of a per-file row mask that covers ``groups`` (all when None), in read order."""
    if groups is None:
        return pa.chunked_array([mask], pa.bool_())
    footer = parquet.metadata
    starts, start = [], 0
    for g in range(footer.num_row_groups):
        starts.append(start)
        start += footer.row_group(g).num_rows
    return pa.chunked_array([mask.slice(starts[g], footer.row_group(g).num_rows) for g in groups], pa.bool_())


def constant_mask(rows: int, value: bool) -> pa.BooleanArray:
    return pa.BooleanArray.from_buffers(pa.bool_(), rows, [None, pa.py_buffer(
        (b"\xff" if value else b"\x00") * ((rows + 7) // 8))])


def scatter_groups(parquet: pq.ParquetFile, groups: list[int], mask: pa.ChunkedArray | pa.Array) -> pa.BooleanArray:
    """A per-file mask from the mask of ``groups`` (in read order): rows of other groups are False."""
    footer = parquet.metadata
    wanted = dict.fromkeys(groups)
    pieces, start = [], 0
    for g in range(footer.num_row_groups):
        rows = footer.row_group(g).num_rows
        if g in wanted:
            pieces.append(mask.slice(start, rows))
            start += rows
        else:
            pieces.append(constant_mask(rows, False))
    chunks = [c for p in pieces for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    return pa.chunked_array(chunks, pa.bool_()).combine_chunks()


def keep_live(table: pa.Table, live: pa.Array | pa.ChunkedArray | None) -> pa.Table:
    """The rows of ``table`` that ``live`` keeps (all without a mask, READ-14)."""
    return table if live is None else table.filter(live)
