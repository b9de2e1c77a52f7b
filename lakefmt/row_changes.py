"""Keyed row changes: find the target rows whose key equals a source key, and commit
row-level deletes plus new rows as one snapshot (spec/deletes.md ROWDEL-1..ROWDEL-9;
spec/commits.md COMMIT-9, COMMIT-10, COMMIT-12).

Upsert and MERGE (:mod:`lakefmt.merge`) share these steps:

1. :func:`key_filter`: the source keys as a filter, an ``IN`` list per key column (a
   superset of the matching rows for multi-column keys; a range when there are more
   than ``MAX_IN_KEYS`` distinct values). It prunes planning and is the commit's
   conflict filter, so a concurrent commit that adds one of the keys conflicts (ROWDEL-9).
2. :func:`find_matches`: per planned file, read the key columns only, keep the live rows
   (a row an existing deletion vector deletes never matches, READ-14) whose values are in
   the filter's sets, and join them with the source keys exactly. A target row with a
   NULL key never matches, as with SQL equality; a NULL source key is refused
   (ROWDEL-8). The result pairs (file, row position, source row).
3. :func:`commit_rows`: one snapshot that deletes the matched positions, by deletion
   vectors (``write.delete.mode=merge-on-read``, ROWDEL-1) or by rewriting the touched
   files without them (``copy-on-write``, COMMIT-12), and adds the new rows.
4. :func:`with_replans`: on a :class:`CommitConflictError` the whole operation is planned
   again on the refreshed table, at most ``commit.retry.num-retries`` times (ROWDEL-5).
   Unlike a delete, a key conflict (ROWDEL-9) is replanned too: the loser then finds
   the winner's rows and updates them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import deletion_vectors as dv
from lakefmt.commit import FileChange, RowDeletes
from lakefmt.errors import AlreadyCommittedError, CommitConflictError, DuplicateKeyError, ValidationError
from lakefmt.expressions import ALWAYS_TRUE, Expression, and_, bind, col
from lakefmt.manifest import DataFile
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.properties import COMMIT_RETRIES, delete_mode, int_property
from lakefmt.scan import IO_THREADS, DataScan, FileScanTask, read_data_file
from lakefmt.schema import Schema
from lakefmt.threads import thread_map
from lakefmt.write import conform

if TYPE_CHECKING:
    from lakefmt.io import FileIO
    from lakefmt.table import Table

T = TypeVar("T")
MAX_IN_KEYS = 10_000
"""Above this many distinct values of a key column, filters use the values' range instead of an IN list."""
SOURCE_ROW, FILE, POSITION = "__lakefmt_source_row", "__lakefmt_file", "__lakefmt_position"


def key_columns(on: str | Sequence[str], schema: Schema, source_names: Sequence[str], *, what: str,
                table: str) -> list[str]:
    """The ``on`` columns, checked: each a column of the table and of the source, none twice.

    Raises:
        ValidationError: ``on`` is empty, names a column twice, or names a column the table
            or the source does not have (nothing was written).
    """
    keys = [on] if isinstance(on, str) else list(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValidationError(f"{what} needs on=[column, ...] naming the key columns, got {on!r}")
    if len(set(keys)) != len(keys):
        raise ValidationError(f"{what} key columns {keys} name a column twice")
    for k in keys:
        if k not in schema.names:
            raise ValidationError(f"{what} key column {k!r} is not a column of table {table} "
                                  f"(columns: {', '.join(schema.names)}); nothing was written")
        if k not in source_names:
            raise ValidationError(f"{what} key column {k!r} is missing from the source data "
                                  f"(columns: {', '.join(source_names)}); nothing was written")
    return keys


def source_keys(rows: pa.Table, on: Sequence[str], *, what: str) -> pa.Table:
    """The key columns of the source rows with a ``SOURCE_ROW`` index.

    Raises:
        ValidationError: a source row has a NULL key column: it could never match, so
            repeating the operation would insert it again (ROWDEL-8).
    """
    for k in on:
        nulls = rows.column(k).null_count
        if nulls:
            raise ValidationError(f"{what}: {nulls} source row(s) have a NULL in key column {k!r}; a NULL key "
                                  "never matches a row, so each repeat would insert the row again (ROWDEL-8). "
                                  "Nothing was written")
    return rows.select(list(on)).append_column(SOURCE_ROW, pa.array(range(rows.num_rows), pa.int64()))


def refuse_duplicates(keys: pa.Table, on: Sequence[str], *, what: str, why: str,
                      detail: str = "occur in more than one source row") -> None:
    """Raise :class:`DuplicateKeyError` naming a few keys ``keys`` holds more than once."""
    if keys.num_rows < 2:
        return
    counts = keys.group_by(list(on)).aggregate([([], "count_all")])
    dups = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not dups.num_rows:
        return
    shown = [", ".join(f"{k}={r[k]!r}" for k in on) + f" ({r['count_all']} rows)"
             for r in dups.slice(0, 5).to_pylist()]
    raise DuplicateKeyError(
        f"{what}: {dups.num_rows} key(s) {detail}, e.g. {'; '.join(shown)}. "
        f"{why} Nothing was written", keys=[tuple(r[k] for k in on) for r in dups.slice(0, 5).to_pylist()],
        count=dups.num_rows)


def key_filter(keys: pa.Table, on: Sequence[str], schema: Schema) -> Expression:
    """The bound filter ``k1 IN (...) AND k2 IN (...)`` of the source keys (a superset for several
    columns); a column with more than ``MAX_IN_KEYS`` distinct values gives its range instead."""
    terms: list[Expression] = []
    for k in on:
        values = pc.unique(keys.column(k))
        if len(values) <= MAX_IN_KEYS:
            terms.append(col(k).isin(values.to_pylist()))
        else:
            low, high = pc.min_max(values).values()
            terms.append((col(k) >= low.as_py()) & (col(k) <= high.as_py()))
    return bind(and_(*terms), schema)


@dataclass(frozen=True)
class Matches:
    """Target rows whose key equals a source key, planned on ``snapshot_id``.

    ``pairs`` has one row per (target row, source row) pair: ``FILE`` (index into
    ``tasks``), ``POSITION`` (0-based row of that data file) and ``SOURCE_ROW``; sorted by
    file and position.
    """

    snapshot_id: int | None
    tasks: list[FileScanTask]
    pairs: pa.Table
    conflict_filter: Expression

    def matched_source_rows(self) -> pa.Array:
        return pc.unique(self.pairs.column(SOURCE_ROW)) if self.pairs.num_rows else pa.array([], pa.int64())

    def positions(self, pairs: pa.Table | None = None) -> dict[str, tuple[FileScanTask, pa.Array]]:
        """``{path: (task, ascending distinct positions)}`` of ``pairs`` (default: all pairs)."""
        pairs = self.pairs if pairs is None else pairs
        if not pairs.num_rows:
            return {}
        grouped = pairs.group_by(FILE, use_threads=False).aggregate([(POSITION, "distinct")]).combine_chunks()
        lists = grouped.column(f"{POSITION}_distinct").chunk(0)
        out: dict[str, tuple[FileScanTask, pa.Array]] = {}
        for i, index in enumerate(grouped.column(FILE).to_pylist()):
            task, values = self.tasks[index], lists[i].values
            out[task.data_file.path] = (task, values.take(pc.array_sort_indices(values)))
        return out


def find_matches(table: Table, keys: pa.Table, on: Sequence[str]) -> Matches:
    """The live target rows of the current snapshot whose ``on`` columns equal a row of ``keys``."""
    meta = table.metadata
    schema = meta.schema
    bound = key_filter(keys, on, schema)
    tasks = DataScan(table.io, meta, meta.current_snapshot, schema, bound).plan().tasks
    projected = schema.select(list(on))
    value_sets = {k: pc.unique(keys.column(k)) for k in on}

    def candidates(item: tuple[int, FileScanTask]) -> pa.Table | None:
        index, task = item
        f = task.data_file
        rows = read_data_file(table.io, task.location, schema, projected, ALWAYS_TRUE, expected_rows=f.record_count)
        mask = pc.is_in(rows.column(on[0]), value_set=value_sets[on[0]])
        for k in on[1:]:
            mask = pc.and_(mask, pc.is_in(rows.column(k), value_set=value_sets[k]))
        deleted = dv.read_deleted(table.io, meta.location, f)  # positions count every row written (DV-1)
        if deleted is not None:
            mask = pc.and_(mask, pc.invert(deleted))
        positions = pc.indices_nonzero(mask)
        if not len(positions):
            return None
        found = rows.take(positions).append_column(POSITION, positions.cast(pa.int64()))
        return found.append_column(FILE, pa.repeat(pa.scalar(index, pa.int32()), len(positions)))

    parts = [p for p in thread_map(candidates, list(enumerate(tasks)), IO_THREADS) if p is not None]
    if parts:
        pairs = pa.concat_tables(parts).join(keys, list(on), join_type="inner")
        pairs = pairs.select([FILE, POSITION, SOURCE_ROW]).sort_by([(FILE, "ascending"), (POSITION, "ascending")])
    else:
        pairs = pa.table({FILE: pa.array([], pa.int32()), POSITION: pa.array([], pa.int64()),
                          SOURCE_ROW: pa.array([], pa.int64())})
    return Matches(meta.current_snapshot_id, tasks, pairs, bound)


def read_rows(table: Table, task: FileScanTask, positions: pa.Array | None = None) -> pa.Table:
    """Every column of a data file as written, deleted rows included (or only ``positions``)."""
    schema = table.metadata.schema
    rows = read_data_file(table.io, task.location, schema, schema, ALWAYS_TRUE,
                          expected_rows=task.data_file.record_count)
    return rows if positions is None else rows.take(positions)


def commit_rows(table: Table, deletes: dict[str, tuple[FileScanTask, pa.Array]], new_rows: pa.Table, *,
                operation: str, summary: dict[str, str], planned_snapshot_id: int | None,
                conflict_filter: Expression, updated: dict[str, tuple[FileScanTask, pa.Array]] | None = None
                ) -> Snapshot | None:
    """Delete ``deletes`` (positions per file) and add ``new_rows`` in one snapshot; None if it changes nothing.

    ``updated`` names the deleted positions whose rows ``new_rows`` holds new versions of:
    a concurrent commit that deleted one of them is a conflict (:class:`UpdatedRowsLive`,
    ROWDEL-19) rather than a union of vectors (ROWDEL-3), so an updated row never reappears
    after a concurrent delete removed it.
    """
    meta = table.metadata
    copy_on_write = delete_mode(meta.properties) == "copy-on-write"
    removed: list[DataFile] = []
    row_deletes: list[RowDeletes] = []
    outputs = [conform(new_rows, meta.schema)] if new_rows.num_rows else []

    def new_mask(task: FileScanTask, positions: pa.Array) -> pa.BooleanArray:
        mask = dv.mask_of(positions, task.data_file.record_count)
        return dv.union(mask, dv.read_deleted(table.io, meta.location, task.data_file))

    items = list(deletes.values())
    if copy_on_write:  # COMMIT-12: the touched files are rewritten without the deleted rows
        def survivors(item: tuple[FileScanTask, pa.Array]) -> pa.Table:
            task, positions = item
            return read_rows(table, task).filter(pc.invert(new_mask(task, positions)))

        outputs += [conform(t, meta.schema) for t in thread_map(survivors, items, IO_THREADS) if t.num_rows]
        removed = [task.data_file for task, _ in items]
    else:  # ROWDEL-1, ROWDEL-2: merge-on-read
        row_deletes = [RowDeletes(task.data_file, new_mask(task, positions)) for task, positions in items]
    if not outputs and not removed and not row_deletes:
        return None
    added = table.write_survivors(outputs)
    requirements = []
    if updated and not copy_on_write:  # a removed file is checked whole (ROWDEL-4)
        requirements.append(UpdatedRowsLive(table.io, planned_snapshot_id,
                                            {path: (task.data_file, pos) for path, (task, pos) in updated.items()}))
    change = FileChange(operation, added=added, removed=removed, deletes=row_deletes,  # type: ignore[arg-type]
                        planned_snapshot_id=planned_snapshot_id, conflict_filter=conflict_filter,
                        summary=summary, requirements=requirements)  # type: ignore[arg-type]
    return table.commit_change(change, cleanup_on_failure=added)


@dataclass(frozen=True)
class UpdatedRowsLive:
    """A commit requirement: no concurrent commit deleted a row this commit writes a new version of (ROWDEL-19).

    ``rows`` maps a path to the file as read and the positions updated. On the planned
    snapshot it holds by construction; on a newer base, a file whose vector changed has
    its new vector read and checked against the positions.
    """

    io: FileIO
    planned_snapshot_id: int | None
    rows: dict[str, tuple[DataFile, pa.Array]]

    def check(self, base: TableMetadata) -> None:
        if base.current_snapshot_id == self.planned_snapshot_id:
            return
        for f in DataScan(self.io, base, base.current_snapshot, base.schema, ALWAYS_TRUE).plan_files():
            read = self.rows.get(f.path)
            if read is None or f.deletion_vector == read[0].deletion_vector:
                continue  # a file no longer live fails the commit anyway (ROWDEL-5)
            deleted = dv.read_deleted(self.io, base.location, f)
            if deleted is not None and pc.any(deleted.take(read[1])).as_py():
                raise CommitConflictError(f"a concurrent commit deleted rows of {f.path} that this merge "
                                          "updates; writing their new versions would bring them back (ROWDEL-19)")


def with_replans(table: Table, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` under the table's write lease; plan it again on the refreshed table when its
    commit conflicts, at most ``commit.retry.num-retries`` times (files of a failed attempt are
    deleted by its commit)."""
    with table.write_lease():
        for n in itertools.count():
            try:
                return attempt()
            except AlreadyCommittedError:
                raise
            except CommitConflictError:
                uuid = table.metadata.table_uuid
                if n >= int_property(table.metadata.properties, COMMIT_RETRIES):
                    raise
                if table.refresh().metadata.table_uuid != uuid:
                    raise  # dropped and re-created: the operation was meant for the old table

    raise AssertionError("unreachable")
