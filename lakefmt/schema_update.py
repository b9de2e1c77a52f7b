"""Schema changes of a table as one commit (spec/metadata.md SCHEMA-5, SCHEMA-6; COMMIT-16).

Example:
    >>> with t.update_schema() as u:
    ...     u.add_column("quality", pa.float32()).rename_column("value", "reading")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakefmt.schema import Schema, SchemaEvolution
from lakefmt.updates import AddSchema, AssertCurrentSchema, SetCurrentSchema

if TYPE_CHECKING:
    from lakefmt.table import Table


class SchemaUpdate:
    """Pending schema changes of a table (SCHEMA-5, SCHEMA-6).

    Example:
        >>> with t.update_schema() as u:
        ...     u.add_column("quality", pa.float32()).rename_column("value", "reading")
    """

    def __init__(self, table: Table) -> None:
        self._table = table
        meta = table.metadata
        self._base_id = meta.current_schema_id
        self._evolution = SchemaEvolution(meta.schema, last_column_id=meta.last_column_id)
        for spec in meta.partition_specs:
            for pf in spec.fields:
                self._evolution.protect(pf.source_id, f"partition field {pf.name!r} is derived from it")
        for order in meta.sort_orders:
            for sf in order.fields:
                self._evolution.protect(sf.source_id, "the table's sort order uses it")

    def add_column(self, name: str, dtype: Any, *, doc: str | None = None) -> SchemaUpdate:
        self._evolution.add_column(name, dtype, doc=doc)
        return self

    def rename_column(self, old: str, new: str) -> SchemaUpdate:
        self._evolution.rename_column(old, new)
        return self

    def drop_column(self, name: str) -> SchemaUpdate:
        self._evolution.drop_column(name)
        return self

    def widen_column(self, name: str, dtype: Any) -> SchemaUpdate:
        self._evolution.widen_column(name, dtype)
        return self

    def make_optional(self, name: str) -> SchemaUpdate:
        self._evolution.make_optional(name)
        return self

    def commit(self) -> Schema:
        meta = self._table.metadata
        new_id = max(s.schema_id for s in meta.schemas) + 1
        schema = self._evolution.result(new_id)
        self._table.commit_updates(
            [AddSchema(schema, self._evolution.last_column_id), SetCurrentSchema(new_id)],
            requirements=[AssertCurrentSchema(self._base_id)], operation="update-schema")
        return schema

    def __enter__(self) -> SchemaUpdate:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()

