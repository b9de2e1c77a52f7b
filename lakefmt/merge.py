"""Upsert and MERGE: update, delete and insert rows by key, in one snapshot (spec/deletes.md
ROWDEL-6..ROWDEL-9; conflicts ROWDEL-3..ROWDEL-5, COMMIT-10).

:class:`MergeBuilder` has the MERGE semantics of delta-rs: a source row matches a target
row (a live row of the current snapshot) when every key column is equal. For each
matched target row the ``when_matched_*`` clauses are tried in the order they were added
and the first whose predicate is TRUE acts on it (none: the row stays as it is); likewise
``when_not_matched_*`` for each source row that matches no target row, and
``when_not_matched_by_source_delete`` for each target row no source row matches.
:func:`upsert` is the merge "when matched update every column the source has, when not
matched insert" (ROWDEL-6).

Predicates are lakefmt filters (EXPR-1, EXPR-2) whose columns are qualified
``source.col`` or ``target.col``: ``"target.value > 5 AND source.kind = 'fix'"``. A
``when_not_matched`` predicate sees only source columns and a ``by_source`` one only
target columns (unqualified names mean that side). A filter compares a column with
literals; comparing two columns is not supported.

Everything is checked before anything is written (ROWDEL-8): the key columns, the
source against the table schema (WRITE-3, WRITE-8; a column the table lacks is refused),
duplicate or NULL source keys (:class:`DuplicateKeyError`, :class:`ValidationError`),
the predicates and the ``set``/``values`` mappings. The change is committed by
:func:`lakefmt.row_changes.commit_rows` and planned again when it conflicts (ROWDEL-5).

Example:
    >>> upsert(t, batch, on=["payload_id", "ts"])
    >>> (MergeBuilder(t, batch, on=["id"]).when_matched_update_all(predicate="source.deleted = false")
    ...     .when_matched_delete().when_not_matched_insert_all().execute())
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import deletion_vectors as dv
from lakefmt.arrow_values import empty_table
from lakefmt.errors import FilterError, ValidationError
from lakefmt.evaluators import row_mask
from lakefmt.expressions import (
    ALWAYS_TRUE,
    And,
    Expression,
    Not,
    Or,
    Predicate,
    bind,
    or_,
    parse_filter,
    referenced_field_ids,
    to_expression,
)
from lakefmt.metadata import Snapshot
from lakefmt.row_changes import (
    SOURCE_ROW,
    Matches,
    commit_rows,
    find_matches,
    key_columns,
    read_rows,
    refuse_duplicates,
    source_keys,
    with_replans,
)
from lakefmt.scan import IO_THREADS, DataScan, read_data_file
from lakefmt.schema import Field, Schema
from lakefmt.threads import thread_map
from lakefmt.types import can_write
from lakefmt.write import conform, to_arrow_table

if TYPE_CHECKING:
    from lakefmt.table import Table

# `source.col` / `target.col` (the name bare or double-quoted), outside string literals and quoted names.
_QUALIFIED = re.compile(r"""('(?:[^']|'')*')|("(?:[^"]|"")*")"""
                        r"""|\b(source|target)\s*\.\s*([^\W\d]\w*|"(?:[^"]|"")*")""", re.IGNORECASE)


def upsert(table: Table, data: Any, on: str | Sequence[str], *, summary: dict[str, str] | None = None
           ) -> Snapshot | None:
    """Replace each live row whose ``on`` key equals a row of ``data`` by that row (columns ``data``
    lacks keep their values) and insert the other rows, as one snapshot (ROWDEL-6); None if
    ``data`` is empty.

    Raises:
        DuplicateKeyError: a key occurs in two rows of ``data``.
        ValidationError: a NULL key, ``on`` names a column the table or ``data`` lacks, or
            ``data`` does not fit the table schema (WRITE-3, WRITE-8). Nothing was written.
    """
    builder = MergeBuilder(table, data, on, _operation="upsert", _summary=summary)
    return builder.when_matched_update_all().when_not_matched_insert_all().execute().snapshot


@dataclass(frozen=True)
class MergeResult:
    """What :meth:`MergeBuilder.execute` did; ``snapshot`` is None when nothing changed."""

    rows_updated: int
    rows_deleted: int
    rows_inserted: int
    snapshot: Snapshot | None


@dataclass(frozen=True)
class _Clause:
    kind: str  # "update", "delete" or "insert"
    where: str  # the clause's name, for messages
    predicate: Expression | None  # columns named "source:col" / "target:col"
    text: str
    assignments: dict[str, str] | None = None  # target column -> source column; None: the source's columns
    by_source: bool = False


class MergeBuilder:
    """A MERGE of ``source`` into ``table`` on the ``on`` columns; add clauses, then :meth:`execute`.

    Example:
        >>> result = (t.merge(updates, on=["id"])
        ...           .when_matched_update(set={"value": "source.value"}, predicate="target.value < 0")
        ...           .when_not_matched_insert_all().execute())
        >>> result.rows_updated, result.rows_inserted
    """

    def __init__(self, table: Table, source: Any, on: str | Sequence[str], *, _operation: str = "merge",
                 _summary: dict[str, str] | None = None) -> None:
        self._table = table
        self._source = source
        self._on = on
        self._operation = _operation
        self._summary = dict(_summary or {})
        self._matched: list[_Clause] = []
        self._not_matched: list[_Clause] = []
        self._by_source: list[_Clause] = []

    def when_matched_update_all(self, predicate: str | Expression | None = None) -> MergeBuilder:
        """Set every column the source has from the matched source row; other columns keep their values."""
        return self._add(self._matched, "update", "when_matched_update_all", predicate, None, None)

    def when_matched_update(self, set: dict[str, str], predicate: str | Expression | None = None) -> MergeBuilder:
        """Set target columns of a matched row from source columns: ``set={"value": "source.value"}``."""
        return self._add(self._matched, "update", "when_matched_update", predicate, None, set)

    def when_matched_delete(self, predicate: str | Expression | None = None) -> MergeBuilder:
        """Delete a matched target row."""
        return self._add(self._matched, "delete", "when_matched_delete", predicate, None, None)

    def when_not_matched_insert_all(self, predicate: str | Expression | None = None) -> MergeBuilder:
        """Insert a source row no target row matches (missing optional columns are NULL, WRITE-8)."""
        return self._add(self._not_matched, "insert", "when_not_matched_insert_all", predicate, "source", None)

    def when_not_matched_insert(self, values: dict[str, str], predicate: str | Expression | None = None
                                ) -> MergeBuilder:
        """Insert a row built from source columns, ``values={"id": "source.id", ...}``; other columns NULL."""
        return self._add(self._not_matched, "insert", "when_not_matched_insert", predicate, "source", values)

    def when_not_matched_by_source_delete(self, predicate: str | Expression | None = None) -> MergeBuilder:
        """Delete a target row that no source row matches (its predicate sees target columns)."""
        return self._add(self._by_source, "delete", "when_not_matched_by_source_delete", predicate, "target",
                         None)

    def _add(self, clauses: list[_Clause], kind: str, where: str, predicate: str | Expression | None,
             default_side: str | None, assignments: dict[str, str] | None) -> MergeBuilder:
        if assignments is not None and (not isinstance(assignments, dict) or not assignments):
            raise ValidationError(f"{where} needs a non-empty dict of target column -> source column")
        expr = None if predicate is None else _qualify(predicate, default_side, where)
        clauses.append(_Clause(kind, where, expr, str(predicate), dict(assignments) if assignments else None,
                               by_source=clauses is self._by_source))
        return self

    def execute(self) -> MergeResult:
        """Run the merge as one snapshot, planned again on a conflicting concurrent commit (ROWDEL-5).

        Raises:
            DuplicateKeyError: two source rows have the same key.
            ValidationError: no clause, a NULL key, a missing or unknown column, a bad predicate
                or a type that does not fit (ROWDEL-8). Nothing was written.
        """
        if not (self._matched or self._not_matched or self._by_source):
            raise ValidationError(f"{self._operation} needs at least one when_matched_* / when_not_matched_* "
                                  "clause")
        raw = to_arrow_table(self._source)
        table = self._table
        keys = key_columns(self._on, table.metadata.schema, raw.column_names, what=self._operation,
                           table=table.name)
        checked = _Source(raw, table.metadata.schema, self)
        refuse_duplicates(source_keys(checked.rows, keys, what=self._operation), keys, what=self._operation,
                          why=f"{self._operation} takes one source row per key: deduplicate the source first.")
        if not raw.num_rows and not self._by_source:
            return MergeResult(0, 0, 0, None)
        return with_replans(table, lambda: self._attempt(raw, keys, checked))

    # -- one attempt -----------------------------------------------------------------------
    def _attempt(self, raw: pa.Table, keys: list[str], checked: _Source) -> MergeResult:
        table = self._table
        schema = table.metadata.schema
        src = checked if checked.schema == schema else _Source(raw, schema, self)  # the schema may have changed
        matches = find_matches(table, source_keys(src.rows, keys, what=self._operation), keys)
        pairs = matches.pairs  # each target row at most once: source keys are unique
        new_parts: list[pa.Table] = []
        deleted = pa.array([], pa.int64())  # indices into pairs
        updated_pairs = pa.array([], pa.int64())
        if self._matched and pairs.num_rows:
            view = src.source_columns.take(pairs.column(SOURCE_ROW))
            if src.needs_target:
                view = _with_target(view, table, matches)
            undecided = pa.chunked_array([pa.repeat(pa.scalar(True), pairs.num_rows)])
            for clause in self._matched:
                mask = src.mask(clause, view)
                chosen = pc.indices_nonzero(pc.and_(undecided, mask)).cast(pa.int64())
                undecided = pc.and_(undecided, pc.invert(mask))
                if clause.kind == "update":
                    new_parts.append(src.updated(clause, view.take(chosen)))
                    updated_pairs = pa.concat_arrays([updated_pairs, chosen])
                deleted = pa.concat_arrays([deleted, chosen])
        inserted = 0
        if self._not_matched:
            rest = pc.indices_nonzero(pc.invert(pc.is_in(pa.array(range(raw.num_rows), pa.int64()),
                                                         value_set=matches.matched_source_rows())))
            view = src.source_columns.take(rest)
            undecided = pa.chunked_array([pa.repeat(pa.scalar(True), len(rest))])
            for clause in self._not_matched:
                mask = src.mask(clause, view)
                chosen = pc.indices_nonzero(pc.and_(undecided, mask))
                undecided = pc.and_(undecided, pc.invert(mask))
                new_parts.append(src.inserted(clause, view.take(chosen)))
                inserted += len(chosen)
        deletes = matches.positions(pairs.take(deleted))
        conflict_filter = matches.conflict_filter
        by_source = 0
        if self._by_source:
            by_source, conflict_filter = self._by_source_deletes(src, matches, deletes)
        updated = len(updated_pairs)
        counts = {"lakefmt.row-operation": self._operation, "lakefmt.rows-updated": str(updated),
                  "lakefmt.rows-deleted": str(len(deleted) - updated + by_source),
                  "lakefmt.rows-inserted": str(inserted)}
        if self._operation == "upsert":
            del counts["lakefmt.rows-deleted"]
        new_rows = pa.concat_tables(new_parts) if new_parts else empty_table(schema.to_arrow())
        snapshot = commit_rows(table, deletes, new_rows, operation="overwrite", summary={**self._summary, **counts},
                               planned_snapshot_id=matches.snapshot_id, conflict_filter=conflict_filter,
                               updated=matches.positions(pairs.take(updated_pairs)))
        return MergeResult(updated, len(deleted) - updated + by_source, inserted, snapshot)

    def _by_source_deletes(self, src: _Source, matches: Matches, deletes: dict[str, Any]
                           ) -> tuple[int, Expression]:
        """Add to ``deletes`` the live target rows no source row matches that a clause deletes."""
        table = self._table
        meta = table.metadata
        schema = meta.schema
        if any(c.predicate is None for c in self._by_source):
            plan_filter = ALWAYS_TRUE
        else:
            plan_filter = bind(or_(*(_unqualified(c.predicate) for c in self._by_source)), schema)
        tasks = DataScan(table.io, meta, meta.current_snapshot, schema, plan_filter).plan().tasks
        matched = matches.positions()
        ids = set().union(*(referenced_field_ids(src.bound(c)) for c in self._by_source))
        projected = schema.select([src.names[i].split(":", 1)[1] for i in sorted(ids)])

        def positions(task: Any) -> pa.Array:
            f = task.data_file
            if projected.fields:
                rows = read_data_file(table.io, task.location, schema, projected, ALWAYS_TRUE,
                                      expected_rows=f.record_count)
                view = rows.rename_columns([f"target:{n}" for n in rows.column_names])
            else:  # no predicate reads a column
                view = pa.table({"rows": pa.nulls(f.record_count)})
            mask = pa.chunked_array([pa.repeat(pa.scalar(False), f.record_count)])
            for clause in self._by_source:
                mask = pc.or_(mask, src.mask(clause, view))
            gone = dv.union(dv.mask_of(matched[f.path][1], f.record_count) if f.path in matched else None,
                            dv.read_deleted(table.io, meta.location, f))
            if gone is not None:
                mask = pc.and_(mask, pc.invert(gone))
            return pc.indices_nonzero(mask).cast(pa.int64())

        count = 0
        for task, found in zip(tasks, thread_map(positions, tasks, IO_THREADS)):
            if len(found):
                count += len(found)
                path = task.data_file.path
                if path in deletes:
                    found = pc.unique(pa.concat_arrays([deletes[path][1].cast(pa.int64()), found]))
                deletes[path] = (task, found)
        return count, or_(matches.conflict_filter, plan_filter)


class _Source:
    """The merge source checked against the table schema (ROWDEL-8), and the clauses bound to it."""

    def __init__(self, raw: pa.Table, schema: Schema, merge: MergeBuilder) -> None:
        self.schema = schema
        self.rows = conform(raw, schema)  # refuses extra columns, bad types, missing required (WRITE-3, WRITE-8)
        self.present = [n for n in schema.names if n in raw.column_names]
        fields = [Field(i + 1, f"source:{n}", schema.find(n).type) for i, n in enumerate(self.present)]
        fields += [Field(len(fields) + i + 1, f"target:{f.name}", f.type) for i, f in enumerate(schema.fields)]
        self.source_columns = self.rows.select(self.present).rename_columns([f"source:{n}" for n in self.present])
        self.combined = Schema(tuple(fields))
        self.names = {f.id: f.name for f in fields}
        self._bound: dict[int, Expression] = {}
        self.needs_target = False
        for clause in (*merge._matched, *merge._not_matched, *merge._by_source):
            reads_target = any(self.names[i].startswith("target:") for i in referenced_field_ids(self.bound(clause)))
            if clause.assignments is not None:
                self._check_assignments(clause)
            if clause.kind == "update":
                covered = self.present if clause.assignments is None else clause.assignments
                reads_target |= len(set(covered)) < len(schema.fields)
            self.needs_target |= reads_target and not clause.by_source

    def bound(self, clause: _Clause) -> Expression:
        """The clause's predicate bound to the columns its side may see."""
        if clause.predicate is None:
            return ALWAYS_TRUE
        found = self._bound.get(id(clause))
        if found is None:
            sides = ("source:",) if clause.kind == "insert" else ("target:",) if clause.by_source \
                else ("source:", "target:")
            visible = Schema(tuple(f for f in self.combined.fields if f.name.startswith(sides)))
            try:
                found = bind(clause.predicate, visible)
            except FilterError as exc:
                message = str(exc).replace("source:", "source.").replace("target:", "target.")
                raise type(exc)(f"{clause.where} predicate {clause.text!r}: {message}") from None
            self._bound[id(clause)] = found
        return found

    def mask(self, clause: _Clause, view: pa.Table) -> pa.ChunkedArray:
        """True for the rows of ``view`` where the clause's predicate is TRUE (ROWDEL-7)."""
        return row_mask(self.bound(clause), view, self.names.get)

    def updated(self, clause: _Clause, view: pa.Table) -> pa.Table:
        """New versions of matched rows; ``view`` has the source and, if needed, the target columns."""
        assign = clause.assignments if clause.assignments is not None else {n: n for n in self.present}
        return conform(pa.table({n: view.column(f"source:{_bare(assign[n])}" if n in assign else f"target:{n}")
                                 for n in self.schema.names}), self.schema)

    def inserted(self, clause: _Clause, view: pa.Table) -> pa.Table:
        assign = clause.assignments if clause.assignments is not None else {n: n for n in self.present}
        return conform(pa.table({n: view.column(f"source:{_bare(s)}") for n, s in assign.items()}), self.schema)

    def _check_assignments(self, clause: _Clause) -> None:
        assert clause.assignments is not None
        for target, source in clause.assignments.items():
            if target not in self.schema.names:
                raise ValidationError(f"{clause.where}: {target!r} is not a column of the table "
                                      f"(columns: {', '.join(self.schema.names)})")
            if not isinstance(source, str) or _bare(source) not in self.present:
                raise ValidationError(f"{clause.where}: {source!r} (for column {target!r}) is not a column of "
                                      f"the source (columns: {', '.join(self.present)})")
            stored, wanted = self.schema.find(_bare(source)).type, self.schema.find(target).type
            if not can_write(stored, wanted):
                raise ValidationError(f"{clause.where}: source column {_bare(source)!r} is {stored}; "
                                      f"column {target!r} stores {wanted}")
        lacking = [f.name for f in self.schema.fields if f.required and f.name not in clause.assignments]
        if clause.kind == "insert" and lacking:
            raise ValidationError(f"{clause.where}: required column(s) {lacking} get no value (WRITE-8)")


def _with_target(view: pa.Table, table: Table, matches: Matches) -> pa.Table:
    """``view`` (one row per pair, in pair order) with the matched target rows as ``target:col``."""
    by_file = list(matches.positions().values())  # in file order, positions ascending, as the pairs are sorted
    target = pa.concat_tables(thread_map(lambda item: read_rows(table, *item), by_file, IO_THREADS))
    for name in target.column_names:
        view = view.append_column(f"target:{name}", target.column(name))
    return view


def _qualify(predicate: str | Expression, default_side: str | None, where: str) -> Expression:
    """The predicate with every column named ``source:col`` or ``target:col``."""
    if isinstance(predicate, str):
        def quote(m: re.Match[str]) -> str:
            if m.group(3) is None:
                return m.group(0)
            name = m.group(4)
            name = name[1:-1].replace('""', '"') if name.startswith('"') else name
            return '"' + f"{m.group(3).lower()}:{name}".replace('"', '""') + '"'

        try:
            expr = parse_filter(_QUALIFIED.sub(quote, predicate))
        except FilterError as exc:
            raise FilterError(f"{where} predicate {predicate!r}: {exc}".replace('"source:', '"source.')
                              .replace('"target:', '"target.')) from None
    else:
        expr = to_expression(predicate)

    def walk(e: Expression) -> Expression:
        if isinstance(e, (And, Or)):
            return type(e)(walk(e.left), walk(e.right))
        if isinstance(e, Not):
            return Not(walk(e.child))
        if isinstance(e, Predicate):
            for sep in (":", "."):
                side, found, name = e.column.partition(sep)
                if found and name and side.lower() in ("source", "target"):
                    return replace(e, column=f"{side.lower()}:{name}")
            if default_side is None:
                raise FilterError(f"{where} predicate {predicate!s}: qualify column {e.column!r} as "
                                  f"source.{e.column} or target.{e.column}")
            return replace(e, column=f"{default_side}:{e.column}")
        return e

    return walk(expr)


def _unqualified(expr: Expression) -> Expression:
    """A target-side predicate with table column names (for planning)."""
    if isinstance(expr, (And, Or)):
        return type(expr)(_unqualified(expr.left), _unqualified(expr.right))
    if isinstance(expr, Not):
        return Not(_unqualified(expr.child))
    if isinstance(expr, Predicate):
        return replace(expr, column=expr.column.split(":", 1)[1])
    return expr


def _bare(name: str) -> str:
    """A source column name without its ``source.`` qualifier."""
    return name.split(".", 1)[1] if name.lower().startswith("source.") else name
