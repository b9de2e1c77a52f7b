"""lakefmt: a small, readable, spec-first table format for Python and Spark.

A table is a chain of immutable snapshots; each snapshot names a manifest list,
which names manifests, which name Parquet data files with their partition values
and column statistics. The only mutable thing is the catalog pointer from a table
name to its current metadata file, swapped by compare-and-swap (spec/README.md).

Example:
    >>> import lakefmt, pyarrow as pa
    >>> cat = lakefmt.Catalog("warehouse", create=True)
    >>> t = cat.create_table("demo.events", schema=pa.schema([("id", pa.int64())]))
    >>> t.append(pa.table({"id": [1, 2, 3]}))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lakefmt.errors import (
    LakefmtError, ValidationError, InvalidNameError, SchemaError, SchemaMismatchError, FilterError,
    UnknownColumnError, NoSuchNamespaceError, NamespaceExistsError, NoSuchTableError, TableExistsError,
    NoSuchSnapshotError, CorruptMetadataError, MissingFileError, CommitError, CommitConflictError,
    AlreadyCommittedError, CommitStateUnknownError, CatalogLockTimeoutError, CompactionError,
    ChecksumMismatchError, MaintenanceError, IncompleteListingError, ValueOutOfRangeError,
    CorruptDataFileError, MissingDependencyError, NoSuchWarehouseError, CatalogMissingError,
    CorruptCatalogError, InvalidCatalogPathError, ReadOnlyCatalogError, WriteLeaseLostError,
    CommitFileMissingError, StorageError, StorageFullError, ReadOnlyStorageError, DuplicateKeyError,
    ErasureRefusedError, ErasureVerificationError,
)

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog, CommitRecord
    from lakefmt.expressions import col, parse_filter
    from lakefmt.manifest import DataFile
    from lakefmt.metadata import Snapshot, TableMetadata
    from lakefmt.scan import DataScan
    from lakefmt.idempotency import WriterBatch
    from lakefmt.schema import Field, Schema
    from lakefmt.table import HistoryEntry, Table

# The public classes are imported on first use (PEP 562), so that `import lakefmt` and the
# `lakefmt` command start without loading pyarrow and DuckDB until a command needs them.
_LAZY = {
    "Catalog": "lakefmt.catalog", "CommitRecord": "lakefmt.catalog", "col": "lakefmt.expressions",
    "parse_filter": "lakefmt.expressions", "DataFile": "lakefmt.manifest", "Snapshot": "lakefmt.metadata",
    "TableMetadata": "lakefmt.metadata", "DataScan": "lakefmt.scan", "Field": "lakefmt.schema",
    "Schema": "lakefmt.schema", "HistoryEntry": "lakefmt.table", "Table": "lakefmt.table",
    "WriterBatch": "lakefmt.idempotency",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lakefmt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "Catalog", "CommitRecord", "Table", "DataScan", "HistoryEntry", "Snapshot", "TableMetadata",
    "DataFile", "Schema", "Field", "WriterBatch", "col", "parse_filter",
    "LakefmtError", "ValidationError", "InvalidNameError", "SchemaError", "SchemaMismatchError",
    "FilterError", "UnknownColumnError", "NoSuchNamespaceError", "NamespaceExistsError", "NoSuchTableError",
    "TableExistsError", "NoSuchSnapshotError", "CorruptMetadataError", "MissingFileError", "CommitError",
    "CommitConflictError", "AlreadyCommittedError", "CommitStateUnknownError", "CatalogLockTimeoutError",
    "CompactionError", "ChecksumMismatchError", "MaintenanceError", "IncompleteListingError",
    "ValueOutOfRangeError", "CorruptDataFileError", "MissingDependencyError", "NoSuchWarehouseError",
    "CatalogMissingError", "CorruptCatalogError", "InvalidCatalogPathError", "ReadOnlyCatalogError",
    "WriteLeaseLostError", "CommitFileMissingError", "StorageError", "StorageFullError",
    "ReadOnlyStorageError", "DuplicateKeyError", "ErasureRefusedError", "ErasureVerificationError",
    "__version__",
]
