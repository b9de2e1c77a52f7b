"""How a data file's columns hold a table's fields, worked out once per file schema (READ-6, READ-7, READ-12).

Files written with one schema store the table's fields the same way: which column holds
each field id, which type each has, whether the file passes READ-12's field-id checks. A
scan works this out once per distinct file schema (:class:`Layout`), and once per set of
fields read (:class:`ReadPlan`), instead of once per file: on a scan of many small files
this per-file work cost as much as decoding them. :func:`read_fields` reads fields by
field id with a layout; :func:`matching_row_groups` skips row groups (READ-11).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt import parquet_pages
from lakefmt.errors import CorruptDataFileError, LakefmtError
from lakefmt.evaluators import MetricsEvaluator
from lakefmt.expressions import AlwaysTrue, BoundExpression, referenced_field_ids
from lakefmt.footer import row_group_metrics
from lakefmt.identity_memo import IdentityMemo
from lakefmt.schema import Field, Schema, arrow_field_id
from lakefmt.types import can_promote, from_arrow

if TYPE_CHECKING:
    from lakefmt.io import FileIO

_SAME, _NULLS, _CAST, _BAD = range(4)


@dataclass(frozen=True)
class ReadPlan:
    """How to read some fields from files of one layout: the file columns, and per field what to do."""

    columns: list[str]
    steps: list[tuple[int, Any, Any]]  # (_SAME, name, None) | (_NULLS, None, type) | (_CAST, name, type) | _BAD
    names: list[str]
    schema: pa.Schema | None  # the result's schema, when every field comes out with its plain type

    @property
    def as_stored(self) -> bool:
        """Every field is a column of the file with the field's type: none added since, none widened."""
        return self.schema is not None and all(kind == _SAME for kind, _, _ in self.steps)


_PLANS = 256  # read plans a layout keeps


class Layout:
    """What is the same for every file written with one schema (READ-6, READ-12): worked out once per scan.

    Which column holds each field id, whether the file fails READ-12's field-id checks, which
    leaf columns are flat and nullable (READ-15), and, per set of fields read, a
    :class:`ReadPlan`.
    """

    def __init__(self, arrow_schema: pa.Schema, footer: pq.FileMetaData) -> None:
        self.arrow_schema = arrow_schema
        self.names: dict[int, str] = {}
        self.problem: str | None = None
        for af in arrow_schema:
            fid = arrow_field_id(af)
            if fid is not None and fid in self.names and self.problem is None:
                self.problem = (f"has two columns with field id {fid} ({self.names[fid]!r}, {af.name!r}) "
                                "(READ-12); restore the file the table wrote")
            if fid is not None and fid not in self.names:
                self.names[fid] = af.name
        if not self.names and arrow_schema.names and self.problem is None:
            self.problem = (f"has no column with a field id (columns {arrow_schema.names}), so it was not "
                            "written for this table (WRITE-1, READ-12); restore the file the table wrote")
        schema = footer.schema
        # The Parquet schema, field ids included: a file whose Arrow schema (without metadata) and Parquet
        # schema equal these has this layout (READ-17), checked without Arrow's metadata fingerprints.
        self.parquet_schema = schema
        # With the Parquet schema, what Arrow derives the file's Arrow schema from (READ-17): None when empty.
        self.key_value_metadata = footer.metadata
        paths = [schema.column(i).path for i in range(footer.num_columns)]
        # Leaf index of each top-level column stored as one flat leaf; the flat nullable ones may have
        # pages replaced by pages of nulls (READ-15).
        self.leaf = {p: i for i, p in enumerate(paths) if "." not in p}
        self.flat = len(self.leaf) == len(paths)
        self.nullable_leaves = parquet_pages.skippable_columns(footer)
        self._plans: dict[tuple[int, bool, bool], tuple[Sequence[Field], ReadPlan]] = {}

    def plan(self, fields: Sequence[Field], keep_dictionary: bool, output: pa.Schema | None) -> ReadPlan:
        key = (id(fields), keep_dictionary, output is not None)
        found = self._plans.get(key)
        if found is not None and found[0] is fields:
            return found[1]
        plan = self._make_plan(fields, keep_dictionary, output)
        if len(self._plans) >= _PLANS:  # a layout shared by the scans of a filter (READ-19) meets many
            self._plans.clear()
        self._plans[key] = (fields, plan)  # ``fields`` kept alive, so its id names it
        return plan

    def _make_plan(self, fields: Sequence[Field], keep_dictionary: bool, output: pa.Schema | None) -> ReadPlan:
        columns: list[str] = []
        steps: list[tuple[int, Any, Any]] = []
        plain = True
        for field in fields:
            target = field.type.to_arrow()
            name = self.names.get(field.id)
            if name is None:
                steps.append((_NULLS, None, target))  # added after the file was written
                continue
            stored = self.arrow_schema.field(name).type
            columns.append(name)
            if stored == target:
                steps.append((_SAME, name, None))
            elif keep_dictionary and pa.types.is_dictionary(stored) and stored.value_type == target:
                steps.append((_SAME, name, None))
                plain = False
            else:
                value_type = stored.value_type if pa.types.is_dictionary(stored) else stored
                try:
                    lake_type = from_arrow(value_type)
                except LakefmtError:
                    lake_type = None
                if lake_type is None or not can_promote(lake_type, field.type):
                    steps.append((_BAD, (f"stores column {field.name!r} (field id {field.id}) as {value_type}, "
                                         f"which does not widen to {field.type} (READ-6); the file was replaced or "
                                         "written by another writer: restore the file the table wrote"), None))
                else:
                    steps.append((_CAST, name, target))  # widened type (SCHEMA-6), or a dictionary decoded
        names = [f.name for f in fields]
        if output is None:
            output = pa.schema([pa.field(f.name, f.type.to_arrow()) for f in fields])
        return ReadPlan(columns, steps, names, output if plain else None)


def read_fields(parquet: pq.ParquetFile, layout: Layout, groups: Sequence[int] | None, fields: Sequence[Field],
                location: str, output: pa.Schema | None = None, *, keep_dictionary: bool = False,
                use_threads: bool = False) -> pa.Table:
    """``fields`` from ``groups`` of the file (all when None), by field id (READ-6).

    A field the file does not hold reads as nulls (added after the file was written); a
    narrower stored type is widened (SCHEMA-6). With ``output`` (the plain Arrow schema of
    ``fields``) the result has that schema (READ-7); with ``keep_dictionary``, a column read
    as a dictionary of the field's type stays one.
    """
    plan = layout.plan(fields, keep_dictionary, output)
    for kind, problem, _ in plan.steps:
        if kind == _BAD:
            raise CorruptDataFileError(f"data file {location} {problem}")
    raw = None
    if plan.columns:
        raw = (parquet.read(columns=plan.columns, use_threads=use_threads) if groups is None
               else parquet.read_row_groups(groups, columns=plan.columns, use_threads=use_threads))
        rows = raw.num_rows
    else:
        footer = parquet.metadata
        rows = footer.num_rows if groups is None else sum(footer.row_group(g).num_rows for g in groups)
    arrays = []
    for kind, name, target in plan.steps:
        if kind == _SAME:
            arrays.append(raw.column(name))  # type: ignore[union-attr]
        elif kind == _NULLS:
            arrays.append(pa.chunked_array([pa.nulls(rows, target)]))
        else:
            column = raw.column(name)  # type: ignore[union-attr]
            if pa.types.is_dictionary(column.type):
                column = column.cast(column.type.value_type)
            arrays.append(column.cast(target))
    if not arrays:
        return pa.table({"rows": pa.nulls(rows)}).drop_columns(["rows"])  # no column, ``rows`` rows
    if plan.schema is not None:
        return pa.Table.from_arrays(arrays, schema=plan.schema)
    return pa.Table.from_arrays(arrays, names=plan.names)


def data_file_field_ids(parquet: pq.ParquetFile, location: str, expected_rows: int | None) -> dict[int, str]:
    """``{field id: column name}`` of a data file, after checking it is the table's file (READ-12).

    Raises:
        CorruptDataFileError: no column carries a field id (WRITE-1), two columns carry the
            same one, or the footer's row count differs from ``expected_rows`` (the
            manifest's ``record_count``, WRITE-6).
    """
    return checked(Layout(parquet.schema_arrow, parquet.metadata), parquet, location, expected_rows).names


def checked(layout: Layout, parquet: pq.ParquetFile | pq.FileMetaData, location: str, expected_rows: int | None
            ) -> Layout:
    """``layout`` of the file at ``location`` after the checks of READ-12 and WRITE-1 (see
    :func:`data_file_field_ids`); raises :class:`CorruptDataFileError` naming the file.
    ``parquet`` is the open file or its footer."""
    if layout.problem is not None:
        raise CorruptDataFileError(f"data file {location} {layout.problem}")
    rows = (parquet if isinstance(parquet, pq.FileMetaData) else parquet.metadata).num_rows
    if expected_rows is not None and rows != expected_rows:
        raise CorruptDataFileError(f"data file {location} holds {rows} rows but its manifest entry records "
                                   f"{expected_rows} (READ-12); the file was replaced or truncated, restore "
                                   "the file the table wrote")
    return layout


def matching_row_groups(parquet: pq.ParquetFile, table_schema: Schema, row_filter: BoundExpression,
                        metrics: MetricsEvaluator | None, *, cached_as: tuple[FileIO, str] | None = None
                        ) -> list[int] | None:
    """The row groups that might hold matching rows, or None for all of them (READ-11).

    Only top-level columns stored with the table's type take part; any other column
    referenced by the filter counts as unknown, so pruning stays conservative (READ-4).
    ``cached_as`` (the file's store and location) keeps the decoded statistics for the next
    scan of the file (:data:`lakefmt.footer.ROW_GROUP_STATS`).
    """
    footer = parquet.metadata
    if isinstance(row_filter, AlwaysTrue) or footer.num_row_groups < 2:
        return None
    if metrics is None or cached_as is None:
        return _matching_row_groups(parquet, footer, table_schema, row_filter, metrics, cached_as)
    # A shared evaluator keeps the answer for the file (READ-19): its footer's shape is in the key, as in
    # ROW_GROUP_STATS's, and the schema and filter objects are checked. Measured on the telemetry selective
    # query after a sort (one file of 21 row groups): 60 us of a 1.3 ms scan, 3 us kept.
    io, location = cached_as
    key = ("row-groups", location, footer.serialized_size, footer.num_rows, footer.num_row_groups)
    kept = metrics.derived.get(key)
    if kept is not None and kept[0] is table_schema and kept[1] is row_filter and kept[2] is io:
        return None if kept[3] is None else list(kept[3])
    groups = _matching_row_groups(parquet, footer, table_schema, row_filter, metrics, cached_as)
    if len(metrics.derived) >= _KEPT_FILES:
        metrics.derived.clear()
    metrics.derived[key] = (table_schema, row_filter, io, None if groups is None else tuple(groups))
    return groups


_KEPT_FILES = 4096  # files whose row groups a shared evaluator keeps (READ-19)


def _matching_row_groups(parquet: pq.ParquetFile, footer: pq.FileMetaData, table_schema: Schema,
                         row_filter: BoundExpression, metrics: MetricsEvaluator | None,
                         cached_as: tuple[FileIO, str] | None) -> list[int] | None:
    wanted = referenced_field_ids(row_filter)
    arrow_schema = parquet.schema_arrow
    columns = {}
    for col_index in range(footer.num_columns):
        path = footer.schema.column(col_index).path
        index = arrow_schema.get_field_index(path)
        if index < 0:
            continue  # a nested leaf: its statistics are not used
        fid = arrow_field_id(arrow_schema.field(index))
        field = table_schema.field_by_id(fid) if fid in wanted else None
        if field is not None and _stored_as(arrow_schema.field(index).type) == field.type:
            columns[col_index] = field
    if not columns:
        return None
    evaluator = metrics or MetricsEvaluator(row_filter, table_schema)
    return [i for i, stats in enumerate(row_group_metrics(footer, columns, cached_as=cached_as))
            if evaluator.might_match(stats)]


def _stored_as(arrow_type: pa.DataType) -> Any:
    try:
        return from_arrow(arrow_type)
    except LakefmtError:
        return None


def plain_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of a read: each field's plain Arrow type (READ-7). Kept per schema object
    (schemas are immutable): a scan asks twice, ~15 us each for six fields."""
    found = _PLAIN.get(schema)
    if found is None:
        found = _PLAIN.put(schema, pa.schema([pa.field(f.name, f.type.to_arrow(), nullable=not f.required)
                                              for f in schema.fields]))
    return found


_PLAIN = IdentityMemo(256)
