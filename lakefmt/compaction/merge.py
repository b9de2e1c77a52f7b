"""Streaming k-way merge of sorted inputs (spec/compaction.md COMPACT-14).

When every input of a group is already sorted by the target order, the group is
merged instead of sorted whole: each input contributes one buffered slice at a time,
so memory is bounded by ``k`` batches, not by the group.

One round of the merge, with Arrow kernels only:

1. The *frontier* is the smallest of the buffers' last rows; its run is ``f``.
2. Runs whose first row is after the frontier cannot contribute this round.
3. The buffers of the other runs are concatenated and sorted (stably); every row up
   to and including ``f``'s last row is emitted. No row still unread can sort
   before it, since every run's unread rows come after its buffer's last row, which
   is not before the frontier. Each participant's emitted rows are a prefix of its
   buffer (its rows keep their order in a stable sort), so the rest stays buffered.
4. ``f``'s buffer is now empty and is refilled; short buffers are topped up.

When a single run is left, or only ``f`` participates, its rows go out unsorted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.sorting import sort_indices

SortKeys = Sequence[tuple[str, str, str]]


class _Run:
    """One sorted input: an iterator of batches and the rows buffered from it."""

    def __init__(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> None:
        self._batches = batches
        self._schema = schema
        self.buffer: pa.Table = schema.empty_table()
        self.exhausted = False

    def fill(self, min_rows: int) -> None:
        parts = [self.buffer] if self.buffer.num_rows else []
        rows = self.buffer.num_rows
        while rows < min_rows and not self.exhausted:
            try:
                batch = next(self._batches)
            except StopIteration:
                self.exhausted = True
                break
            if batch.num_rows:
                parts.append(pa.Table.from_batches([batch], schema=self._schema))
                rows += batch.num_rows
        if len(parts) > 1:
            self.buffer = pa.concat_tables(parts)
        elif parts:
            self.buffer = parts[0]

    def take_all(self) -> pa.Table:
        out, self.buffer = self.buffer, self._schema.empty_table()
        return out


def merge_sorted(inputs: Sequence[Iterator[pa.RecordBatch]], schema: pa.Schema, keys: SortKeys, *,
                 batch_rows: int) -> Iterator[pa.Table]:
    """Yield the rows of ``inputs`` (each sorted by ``keys``) as sorted tables, in order."""
    key_names = list(dict.fromkeys(k[0] for k in keys))
    runs = [_Run(it, schema) for it in inputs]
    for run in runs:
        run.fill(batch_rows)
    while True:
        active = [r for r in runs if r.buffer.num_rows]
        if not active:
            return
        if len(active) == 1:
            yield active[0].take_all()
            active[0].fill(batch_rows)
            continue
        lasts = pa.concat_tables([r.buffer.select(key_names).slice(r.buffer.num_rows - 1, 1) for r in active])
        frontier = int(sort_indices(lasts, list(keys))[0].as_py())
        # Firsts, then the frontier row last: in a stable sort, runs placed before it start at or before it.
        firsts = pa.concat_tables([r.buffer.select(key_names).slice(0, 1) for r in active]
                                  + [lasts.slice(frontier, 1)])
        order = sort_indices(firsts, list(keys)).to_pylist()
        participants = sorted(order[:order.index(len(active))])
        if participants == [frontier]:
            yield active[frontier].take_all()
            active[frontier].fill(batch_rows)
            continue
        members = [active[i] for i in participants]
        combined = pa.concat_tables([m.buffer for m in members])
        offsets, start = [], 0
        for m in members:
            offsets.append(start)
            start += m.buffer.num_rows
        indices = sort_indices(combined, list(keys))
        f = participants.index(frontier)
        last_of_frontier = offsets[f] + members[f].buffer.num_rows - 1
        upto = int(pc.index(indices, pa.scalar(last_of_frontier, indices.type)).as_py())
        chosen = indices.slice(0, upto + 1)
        yield combined.take(chosen)
        for m, offset in zip(members, offsets):
            low = pc.greater_equal(chosen, pa.scalar(offset, chosen.type))
            high = pc.less(chosen, pa.scalar(offset + m.buffer.num_rows, chosen.type))
            emitted = int(pc.sum(pc.and_(low, high)).as_py() or 0)
            m.buffer = m.buffer.slice(emitted)
        for m in members:
            if m.buffer.num_rows < batch_rows // 2:
                m.fill(batch_rows)
