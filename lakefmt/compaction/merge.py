"""Streaming k-way merge of sorted inputs (spec/compaction.md COMPACT-14).

When every input of a group is already sorted by the target order, the group is
merged instead of sorted whole: each input contributes one buffered slice at a time,
so memory is bounded by ``k`` batches, not by the group.

One round of the merge, with Arrow kernels only:

1. The *frontier* is the smallest of the buffers' last rows; its run is ``f``.
2. Runs whose first row is after the frontier cannot contribute this round.
3. The buffers of the other runs are concatenated with the frontier key appended
   last and sorted (stably); every row before that sentinel, i.e. every buffered
   row not after the frontier, is emitted. No row still unread can sort before
   them, since every run's unread rows come after its buffer's last row, which is
   not before the frontier. Each participant's emitted rows are a prefix of its
   buffer (its rows keep their order in a stable sort), so the rest stays buffered.
4. ``f``'s buffer is now empty and is refilled; short buffers are topped up.

When a single run is left, or only ``f`` participates, its rows go out unsorted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.arrow_values import empty_table
from lakefmt.sorting import sort_indices

SortKeys = Sequence[tuple[str, str, str]]


class _Run:
    """One sorted input: an iterator of batches and the rows buffered from it."""

    def __init__(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> None:
        self._batches = batches
        self._schema = schema
        self.buffer: pa.Table = empty_table(schema)
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
        out, self.buffer = self.buffer, empty_table(self._schema)
        return out


def merge_sorted(inputs: Sequence[Iterator[pa.RecordBatch]], schema: pa.Schema, keys: SortKeys, *,
                 batch_rows: int) -> Iterator[pa.Table]:
    """Yield the rows of ``inputs`` (each sorted by ``keys``) as sorted tables, in order."""
    key_names = list(dict.fromkeys(k[0] for k in keys))
    sort_keys = list(keys)
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
        key_tables = [r.buffer.select(key_names) for r in active]
        lasts = pa.concat_tables([t.slice(t.num_rows - 1, 1) for t in key_tables])
        frontier = int(sort_indices(lasts, sort_keys)[0].as_py())
        sentinel = lasts.slice(frontier, 1)
        # The frontier key goes last: a stable sort places every row equal to it before it.
        firsts = pa.concat_tables([t.slice(0, 1) for t in key_tables] + [sentinel])
        order = sort_indices(firsts, sort_keys).to_pylist()
        participants = sorted(order[:order.index(len(active))])
        if participants == [frontier]:
            yield active[frontier].take_all()
            active[frontier].fill(batch_rows)
            continue
        members = [active[i] for i in participants]
        keys_table = pa.concat_tables([key_tables[i] for i in participants] + [sentinel])
        indices = sort_indices(keys_table, sort_keys)
        upto = int(pc.index(indices, pa.scalar(keys_table.num_rows - 1, indices.type)).as_py())
        chosen = indices.slice(0, upto)  # every buffered row not after the frontier key
        yield pa.concat_tables([m.buffer for m in members]).take(chosen)
        run_of_row = pa.chunked_array([pa.repeat(pa.scalar(i, pa.int32()), m.buffer.num_rows)
                                       for i, m in enumerate(members)], pa.int32())
        emitted = [0] * len(members)
        for item in pc.value_counts(run_of_row.take(chosen)).to_pylist():
            emitted[item["values"]] = item["counts"]
        for m, count in zip(members, emitted):
            m.buffer = m.buffer.slice(count)
            if m.buffer.num_rows < max(1, batch_rows // 2):
                m.fill(batch_rows)
