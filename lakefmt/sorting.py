"""Sort orders (spec/metadata.md §Sort orders, META-9).

A sort order lists source columns by field id with a direction and a null order.
Order id 0 is the unsorted order and is always present.

Example:
    >>> order = parse_sort_by(["payload_id", "ts DESC"], schema, order_id=1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.errors import ValidationError
from lakefmt.schema import Schema

Direction = Literal["asc", "desc"]
NullOrder = Literal["nulls-first", "nulls-last"]


@dataclass(frozen=True)
class SortField:
    source_id: int
    direction: Direction = "asc"
    null_order: NullOrder = "nulls-first"
    transform: str = "identity"

    def to_json(self) -> dict[str, Any]:
        return {"source-id": self.source_id, "transform": self.transform,
                "direction": self.direction, "null-order": self.null_order}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> SortField:
        return SortField(int(obj["source-id"]), obj.get("direction", "asc"),
                         obj.get("null-order", "nulls-first"), obj.get("transform", "identity"))


@dataclass(frozen=True)
class SortOrder:
    order_id: int
    fields: tuple[SortField, ...] = ()

    @property
    def is_unsorted(self) -> bool:
        return not self.fields

    def to_json(self) -> dict[str, Any]:
        return {"order-id": self.order_id, "fields": [f.to_json() for f in self.fields]}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> SortOrder:
        return SortOrder(int(obj["order-id"]), tuple(SortField.from_json(f) for f in obj["fields"]))

    def arrow_sort_keys(self, schema: Schema) -> list[tuple[str, str, str]]:
        """``(column, "ascending"|"descending", "at_start"|"at_end")`` keys for :func:`sort_indices`."""
        keys = []
        for f in self.fields:
            field = schema.field_by_id(f.source_id)
            if field is None:
                raise ValidationError(f"sort order {self.order_id} names missing field id {f.source_id}")
            keys.append((field.name, "ascending" if f.direction == "asc" else "descending",
                         "at_end" if f.null_order == "nulls-last" else "at_start"))
        return keys


UNSORTED = SortOrder(0)


def sort_indices(table: pa.Table, keys: list[tuple[str, str, str]]) -> pa.Array:
    """Row order for ``keys``; per-key null placement where pyarrow supports it (pyarrow >= 25)."""
    try:
        return pc.sort_indices(table, sort_keys=keys)
    except (TypeError, ValueError, pa.ArrowInvalid):
        placement = keys[0][2] if keys else "at_end"
        return pc.sort_indices(table, sort_keys=[k[:2] for k in keys], null_placement=placement)


def parse_sort_by(columns: list[str], schema: Schema, *, order_id: int = 1) -> SortOrder:
    """Build a sort order from ``["col", "col DESC", "col ASC NULLS LAST"]``."""
    if not columns:
        return UNSORTED
    fields = []
    seen = set()
    for text in columns:
        words = text.split()
        if not words:
            raise ValidationError("empty sort column")
        field = schema.find(words[0])
        rest = [w.lower() for w in words[1:]]
        direction: Direction = "asc"
        if rest and rest[0] in ("asc", "desc"):
            direction = rest.pop(0)  # type: ignore[assignment]
        null_order: NullOrder = "nulls-first" if direction == "asc" else "nulls-last"
        if rest == ["nulls", "first"]:
            null_order = "nulls-first"
        elif rest == ["nulls", "last"]:
            null_order = "nulls-last"
        elif rest:
            raise ValidationError(f"cannot parse sort column {text!r}: use 'col [ASC|DESC] [NULLS FIRST|LAST]'")
        if field.id in seen:
            raise ValidationError(f"column {field.name!r} appears twice in the sort order")
        seen.add(field.id)
        fields.append(SortField(field.id, direction, null_order))
    return SortOrder(order_id, tuple(fields))
