"""Schemas: named, typed columns identified by field ids (spec/metadata.md §Schemas).

Columns are tracked by their field id, never by name or position (SCHEMA-1), so a
rename or a drop followed by an add can never make old data files read as the
wrong column. Data files carry the field id of each column in the Parquet schema
(``PARQUET:field_id``), which is how readers project old files (READ-6).

Example:
    >>> s = Schema.from_arrow(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    >>> [(f.id, f.name, str(f.type)) for f in s.fields]
    [(1, 'id', 'long'), (2, 'name', 'string')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pyarrow as pa

from lakefmt.errors import SchemaError, UnknownColumnError
from lakefmt.types import LakeType, can_promote, from_arrow, parse_type

FIELD_ID_KEY = b"PARQUET:field_id"
_COLUMN_NAME = re.compile(r"^[^\x00-\x1f.]{1,255}$")


@dataclass(frozen=True)
class Field:
    """One column: its permanent id, current name, type and nullability."""

    id: int
    name: str
    type: LakeType
    required: bool = False
    doc: str | None = None

    def to_arrow(self) -> pa.Field:
        return pa.field(self.name, self.type.to_arrow(), nullable=not self.required,
                        metadata={FIELD_ID_KEY: str(self.id).encode()})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "type": str(self.type),
                               "required": self.required}
        if self.doc:
            out["doc"] = self.doc
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Field:
        return Field(int(obj["id"]), str(obj["name"]), parse_type(obj["type"]),
                     bool(obj.get("required", False)), obj.get("doc"))


@dataclass(frozen=True)
class Schema:
    """An ordered list of fields with a schema id (SCHEMA-2)."""

    fields: tuple[Field, ...]
    schema_id: int = 0
    _by_name: dict[str, Field] = field(default_factory=dict, init=False, repr=False, compare=False)
    _by_id: dict[int, Field] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in self.fields:
            if f.name in self._by_name:
                raise SchemaError(f"duplicate column name {f.name!r}")
            if f.id in self._by_id:
                raise SchemaError(f"duplicate field id {f.id}")
            if not _COLUMN_NAME.match(f.name):
                raise SchemaError(f"invalid column name {f.name!r}: 1-255 characters, no '.' "
                                  "and no control characters")
            self._by_name[f.name] = f
            self._by_id[f.id] = f

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def highest_field_id(self) -> int:
        return max((f.id for f in self.fields), default=0)

    def find(self, name: str) -> Field:
        """The field named ``name``; :class:`UnknownColumnError` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownColumnError(
                f"unknown column {name!r}; the table has: {', '.join(self.names)}") from None

    def field_by_id(self, field_id: int) -> Field | None:
        return self._by_id.get(field_id)

    def select(self, names: list[str]) -> Schema:
        """A schema with only ``names``, in the given order."""
        return Schema(tuple(self.find(n) for n in names), self.schema_id)

    def to_arrow(self) -> pa.Schema:
        return self._arrow

    @cached_property
    def _arrow(self) -> pa.Schema:  # built once: readers and writers ask for it per file and per batch
        return pa.schema([f.to_arrow() for f in self.fields])

    def to_json(self) -> dict[str, Any]:
        return {"schema-id": self.schema_id, "fields": [f.to_json() for f in self.fields]}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Schema:
        return Schema(tuple(Field.from_json(f) for f in obj["fields"]), int(obj["schema-id"]))

    @staticmethod
    def from_arrow(arrow_schema: pa.Schema, *, first_id: int = 1) -> Schema:
        """A new schema for an Arrow schema, numbering fields from ``first_id``.

        Nested Arrow types are refused: lakefmt v1 has only primitive columns (TYPE-1).
        """
        fields = []
        for i, af in enumerate(arrow_schema):
            fields.append(Field(first_id + i, af.name, from_arrow(af.type), required=not af.nullable))
        return Schema(tuple(fields))

    def evolve(self) -> SchemaEvolution:
        return SchemaEvolution(self)


class SchemaEvolution:
    """Builds the next schema from this one by field id (SCHEMA-5, SCHEMA-6).

    Allowed changes: add an optional column (new id), rename, drop, make a required
    column optional, and widen int->long, float->double, decimal(P,S)->decimal(P',S)
    with P' >= P. Anything else is refused with :class:`SchemaError`.
    """

    def __init__(self, base: Schema, *, last_column_id: int | None = None) -> None:
        self._base = base
        self._fields: list[Field] = list(base.fields)
        self._last_id = last_column_id if last_column_id is not None else base.highest_field_id
        self._protected: dict[int, str] = {}

    def protect(self, field_id: int, reason: str) -> SchemaEvolution:
        """Refuse to drop ``field_id`` (used for partition and sort source columns)."""
        self._protected[field_id] = reason
        return self

    def _index(self, name: str) -> int:
        for i, f in enumerate(self._fields):
            if f.name == name:
                return i
        raise UnknownColumnError(f"unknown column {name!r}; the table has: "
                                 f"{', '.join(f.name for f in self._fields)}")

    def add_column(self, name: str, dtype: pa.DataType | LakeType | str, *, doc: str | None = None
                   ) -> SchemaEvolution:
        if any(f.name == name for f in self._fields):
            raise SchemaError(f"column {name!r} already exists")
        ltype = _to_lake_type(dtype)
        self._last_id += 1
        self._fields.append(Field(self._last_id, name, ltype, required=False, doc=doc))
        return self

    def rename_column(self, old: str, new: str) -> SchemaEvolution:
        i = self._index(old)
        if any(f.name == new for f in self._fields):
            raise SchemaError(f"cannot rename {old!r} to {new!r}: a column of that name exists")
        self._fields[i] = replace(self._fields[i], name=new)
        return self

    def drop_column(self, name: str) -> SchemaEvolution:
        i = self._index(name)
        fid = self._fields[i].id
        if fid in self._protected:
            raise SchemaError(f"cannot drop column {name!r}: {self._protected[fid]}")
        if len(self._fields) == 1:
            raise SchemaError("cannot drop the last column of a table")
        del self._fields[i]
        return self

    def widen_column(self, name: str, dtype: pa.DataType | LakeType | str) -> SchemaEvolution:
        i = self._index(name)
        old = self._fields[i]
        new_type = _to_lake_type(dtype)
        if not can_promote(old.type, new_type):
            raise SchemaError(f"cannot change column {name!r} from {old.type} to {new_type}: "
                              "allowed widenings are int->long, float->double and "
                              "decimal(P,S)->decimal(P2,S) with P2 >= P")
        self._fields[i] = replace(old, type=new_type)
        return self

    def make_optional(self, name: str) -> SchemaEvolution:
        i = self._index(name)
        self._fields[i] = replace(self._fields[i], required=False)
        return self

    @property
    def last_column_id(self) -> int:
        return self._last_id

    def result(self, schema_id: int) -> Schema:
        return Schema(tuple(self._fields), schema_id)


def _to_lake_type(dtype: pa.DataType | LakeType | str) -> LakeType:
    if isinstance(dtype, LakeType):
        return dtype
    if isinstance(dtype, str):
        return parse_type(dtype)
    return from_arrow(dtype)


def arrow_field_id(af: pa.Field) -> int | None:
    """The lakefmt field id carried in an Arrow/Parquet field's metadata, if any."""
    if af.metadata and FIELD_ID_KEY in af.metadata:
        return int(af.metadata[FIELD_ID_KEY])
    return None
