"""Deleting rows by filter: finding them file by file, and committing the delete or overwrite
(spec/deletes.md ROWDEL-1, ROWDEL-2, ROWDEL-5; COMMIT-12).

:func:`plan_deletes` turns a bound filter into the change it makes to the current
snapshot's files, in either delete mode:

* **merge-on-read** (``write.delete.mode``, the default): a file some of whose rows match
  gets a deletion vector holding them, together with the rows its vector already
  deleted (:class:`~lakefmt.commit.RowDeletes`); no data is rewritten.
* **copy-on-write**: such a file is removed, and its remaining live rows are returned to
  be written again (COMMIT-12).

In both modes a file whose statistics prove that every row matches (EXPR-9), or whose
every live row matches, is removed whole. Upsert and merge (:mod:`lakefmt.merge`) find
their rows by key instead (:mod:`lakefmt.row_changes`).

:func:`delete_rows` and :func:`replace_rows` are ``Table.delete`` and ``Table.overwrite``:
each plans the change on the current snapshot and commits it with :func:`commit_replanned`,
which plans it again when a concurrent commit removed or deleted rows of a file it touches.

Example:
    >>> plan = plan_deletes(table, bind(to_expression("payload_id = 7"), table.schema()))
    >>> len(plan.removed), len(plan.deletes), plan.rows_deleted
    (0, 3, 1250)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import deletion_vectors as dv
from lakefmt.commit import FileChange, RowDeletes
from lakefmt.errors import CommitConflictError, ValidationError
from lakefmt.evaluators import MetricsEvaluator, StrictMetricsEvaluator, to_arrow_expression
from lakefmt.expressions import ALWAYS_TRUE, AlwaysTrue, BoundExpression, Expression, bind, to_expression
from lakefmt.manifest import DataFile
from lakefmt.properties import COMMIT_RETRIES, delete_mode, int_property
from lakefmt.scan import DataScan, FileReader, read_data_file
from lakefmt.threads import thread_map
from lakefmt.write import conform

if TYPE_CHECKING:
    from lakefmt.idempotency import WriterBatch
    from lakefmt.metadata import Snapshot
    from lakefmt.table import Table

Planned = tuple[FileChange, list[DataFile]]
"""One attempt of a row-level change: the change, and the files written for this attempt alone."""

READ_THREADS = 8


@dataclass
class DeletePlan:
    """What a delete changes: files removed whole, new deletion vectors, or rows to write again."""

    mode: str
    removed: list[DataFile] = field(default_factory=list)
    deletes: list[RowDeletes] = field(default_factory=list)
    survivors: list[pa.Table] = field(default_factory=list)  # copy-on-write: rows written again
    rows_deleted: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.removed and not self.deletes


def plan_deletes(table: Table, bound: BoundExpression, *, mode: str | None = None) -> DeletePlan:
    """The change that deletes the rows of the current snapshot matching ``bound`` (ROWDEL-2, COMMIT-12)."""
    meta = table.metadata
    mode = mode or delete_mode(meta.properties)
    schema = meta.schema
    scan = DataScan(table.io, meta, meta.current_snapshot, schema, bound)
    strict = StrictMetricsEvaluator(bound, schema)
    plan = DeletePlan(mode)
    to_read: list[DataFile] = []
    for task in scan.plan().tasks:
        f = task.data_file
        if strict.must_match(f, meta.spec_by_id(f.spec_id)):
            plan.removed.append(f)
            plan.rows_deleted += f.live_record_count
        else:
            to_read.append(f)
    reader = FileReader(table.io, schema, schema, bound, MetricsEvaluator(bound, schema),
                        table_location=table.location)

    def matches(f: DataFile) -> tuple[DataFile, pa.Table | None, pa.BooleanArray]:
        location = f"{table.location}/{f.path}"
        matched = reader.matching_rows(location, expected_rows=f.record_count, data_file=f)
        rows = read_all_rows(table, f) if mode == "copy-on-write" and pc.any(matched).as_py() else None
        return f, rows, _plain(matched)

    for f, rows, matched in thread_map(matches, to_read, READ_THREADS):
        add_file_deletes(table, plan, f, matched, rows)
    return plan


def read_all_rows(table: Table, f: DataFile, field_ids: list[int] | None = None) -> pa.Table:
    """Every row of a data file, deleted ones included, in file order: row ``i`` is position ``i``.

    ``field_ids`` limits the columns (by default all of the current schema).
    """
    schema = table.metadata.schema
    projected = schema if field_ids is None else schema.select(
        [schema.field_by_id(i).name for i in field_ids if schema.field_by_id(i) is not None])
    return read_data_file(table.io, f"{table.location}/{f.path}", schema, projected, bind(ALWAYS_TRUE, schema),
                          expected_rows=f.record_count)


def add_file_deletes(table: Table, plan: DeletePlan, f: DataFile, matched: pa.BooleanArray,
                     rows: pa.Table | None = None) -> None:
    """Delete the rows of ``f`` where ``matched`` is True (positions in the file) as ``plan.mode`` says.

    Rows the file's vector already deletes are not counted again. Copy-on-write needs
    ``rows``: every row of the file with every column (:func:`read_all_rows`).
    """
    old = dv.read_deleted(table.io, table.location, f)
    new = matched if old is None else _plain(pc.and_(matched, pc.invert(old)))
    count = dv.cardinality(new)
    if count == 0:
        return  # nothing left to delete in this file: it is kept as it is (COMMIT-12)
    plan.rows_deleted += count
    deleted = dv.union(old, new)
    if dv.cardinality(deleted) >= f.record_count:
        plan.removed.append(f)  # no live row left (DV-7)
    elif plan.mode == "copy-on-write":
        if rows is None or rows.num_columns != len(table.metadata.schema.fields):
            rows = read_all_rows(table, f)
        plan.removed.append(f)
        plan.survivors.append(rows.filter(pc.invert(deleted)))
    else:
        plan.deletes.append(RowDeletes(f, deleted))


def _plain(mask: pa.ChunkedArray | pa.Array) -> pa.BooleanArray:
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks() if mask.num_chunks != 1 else mask.chunk(0)
    return pc.fill_null(mask, False) if mask.null_count else mask


# -- committing deletes and overwrites (Table.delete, Table.overwrite) --------------------------------
def delete_rows(table: Table, filter: str | Expression, *, summary: dict[str, str] | None = None
                ) -> Snapshot | None:
    """Delete the rows matching ``filter`` as one snapshot; None if nothing matched (ROWDEL-2, COMMIT-12)."""
    if filter is None:
        raise ValidationError("delete needs a filter; use overwrite(empty_table) to remove every row")
    bound = bind(to_expression(filter), table.metadata.schema)

    def attempt() -> Planned | None:
        plan = plan_deletes(table, bound)
        if plan.is_empty:
            return None
        survivors = table.write_survivors(plan.survivors)
        return FileChange("delete", added=survivors, removed=plan.removed, deletes=plan.deletes,
                          planned_snapshot_id=table.metadata.current_snapshot_id, conflict_filter=bound,
                          summary=dict(summary or {})), survivors

    return table.commit_replanned(attempt)


def overwrite_rows(table: Table, data: Any, filter: str | Expression | None) -> tuple[BoundExpression, pa.Table]:
    """The overwrite's bound filter and its new rows, conformed to the table schema (WRITE-3).

    Raises:
        ValidationError: a new row does not match the filter (nothing was written).
    """
    schema = table.metadata.schema
    bound = bind(to_expression(filter), schema)
    rows = conform(data, schema)
    if not isinstance(bound, AlwaysTrue) and rows.num_rows:
        def name_of(field_id: int) -> str | None:
            found = schema.field_by_id(field_id)
            return found.name if found else None

        matching = rows.filter(to_arrow_expression(bound, name_of)).num_rows
        if matching != rows.num_rows:
            raise ValidationError(f"{rows.num_rows - matching} of {rows.num_rows} new rows do not match "
                                  f"the overwrite filter {filter!r}")
    return bound, rows


def replace_rows(table: Table, bound: BoundExpression, added: Sequence[DataFile], *,
                 summary: dict[str, str] | None = None, writer_batch: WriterBatch | None = None) -> Snapshot:
    """Commit ``added`` (written already) in place of the rows matching ``bound``, as one ``overwrite``
    snapshot; the written files are deleted if it fails."""
    def attempt() -> Planned:
        plan = plan_deletes(table, bound)
        survivors = table.write_survivors(plan.survivors)
        return FileChange("overwrite", added=[*added, *survivors], removed=plan.removed, deletes=plan.deletes,
                          planned_snapshot_id=table.metadata.current_snapshot_id, conflict_filter=bound,
                          summary=dict(summary or {}), writer_batch=writer_batch), survivors

    try:
        snapshot = table.commit_replanned(attempt)
    except BaseException:
        table.discard(added)
        raise
    assert snapshot is not None
    return snapshot


def commit_replanned(table: Table, plan: Callable[[], Planned | None]) -> Snapshot | None:
    """See :meth:`lakefmt.table.Table.commit_replanned`: replan only a conflict over the change's own files."""
    retries = int_property(table.metadata.properties, COMMIT_RETRIES)
    for attempt in range(retries + 1):
        planned = plan()
        if planned is None:
            return None
        change, own_files = planned
        try:
            return table.commit_change(change, cleanup_on_failure=own_files)
        except CommitConflictError as exc:
            if attempt == retries or not exc.missing_files:
                raise
            table.refresh()
    raise AssertionError("unreachable")
