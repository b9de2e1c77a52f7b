"""The first metadata of a new table, checked from what ``create_table`` is given (spec/metadata.md
META-1 … META-12; spec/catalog.md CAT-12).

Both catalogs create tables from it: :meth:`lakefmt.catalog.Catalog.create_table` and the
catalog server's client, which writes the first metadata file itself (CATHTTP-7). A schema,
partitioning, sort order or property that is not valid is refused here, before any file is
written.

Example:
    >>> metadata = new_table_metadata(pa.schema([("id", pa.int64())]), location=location,
    ...                               table_uuid=str(uuid.uuid4()), partition_by=(), sort_by=(), properties={})
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import pyarrow as pa

from lakefmt.errors import SchemaError, ValidationError
from lakefmt.metadata import TableMetadata
from lakefmt.partitioning import parse_partition_by
from lakefmt.properties import validate_properties
from lakefmt.schema import Schema
from lakefmt.sorting import UNSORTED, parse_sort_by


def new_table_metadata(schema: pa.Schema | Schema, *, location: str, table_uuid: str,
                       partition_by: Sequence[str], sort_by: Sequence[str],
                       properties: dict[str, str]) -> TableMetadata:
    """The first metadata of a new table (META-1..META-12)."""
    if isinstance(schema, pa.Schema):
        lake_schema = Schema.from_arrow(schema)
    elif isinstance(schema, Schema):
        lake_schema = schema
    else:
        raise SchemaError(f"schema must be a pyarrow.Schema or lakefmt.Schema, got {type(schema).__name__}")
    if not lake_schema.fields:
        raise SchemaError("a table needs at least one column")
    if isinstance(partition_by, str) or isinstance(sort_by, str):
        raise ValidationError("partition_by and sort_by take lists of strings, e.g. ['day(ts)']")
    props = {str(k): str(v) for k, v in properties.items()}
    validate_properties(props)
    spec = parse_partition_by(list(partition_by), lake_schema)
    order = parse_sort_by(list(sort_by), lake_schema)
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    return TableMetadata(
        table_uuid=table_uuid, location=location, last_sequence_number=0, last_updated_ms=now,
        last_column_id=lake_schema.highest_field_id, schemas=(lake_schema,),
        current_schema_id=lake_schema.schema_id, partition_specs=(spec,), default_spec_id=spec.spec_id,
        last_partition_id=max([999] + [f.field_id for f in spec.fields]),
        sort_orders=(UNSORTED,) if order.is_unsorted else (UNSORTED, order),
        default_sort_order_id=order.order_id, properties=props, current_snapshot_id=None,
        inline_snapshots=(), inline_snapshot_log=(), metadata_log=(),
    )
