"""lakefmt: a small, readable, spec-first table format for Python and Spark.

A table is a chain of immutable snapshots; each snapshot names a manifest list,
which names manifests, which name Parquet data files with their partition values
and column statistics. The only mutable thing is the catalog pointer from a table
name to its current metadata file, swapped by compare-and-swap (spec/README.md).

Example:
    >>> import lakefmt, pyarrow as pa
    >>> cat = lakefmt.Catalog("warehouse")
    >>> t = cat.create_table("demo.events", schema=pa.schema([("id", pa.int64())]))
    >>> t.append(pa.table({"id": [1, 2, 3]}))
"""

from lakefmt.catalog import Catalog, CommitRecord
from lakefmt.errors import (
    CatalogLockTimeoutError, ChecksumMismatchError, CommitConflictError, CompactionError, CommitError, CommitStateUnknownError,
    CorruptMetadataError, FilterError, IncompleteListingError, InvalidNameError, LakefmtError,
    MaintenanceError, NamespaceExistsError,
    NoSuchNamespaceError, NoSuchSnapshotError, NoSuchTableError, SchemaError, SchemaMismatchError,
    TableExistsError, UnknownColumnError, ValidationError,
)
from lakefmt.expressions import col, parse_filter
from lakefmt.manifest import DataFile
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.scan import DataScan
from lakefmt.schema import Field, Schema
from lakefmt.table import HistoryEntry, Table

__version__ = "0.1.0"

__all__ = [
    "Catalog", "CommitRecord", "Table", "DataScan", "HistoryEntry", "Snapshot", "TableMetadata",
    "DataFile", "Schema", "Field", "col", "parse_filter",
    "LakefmtError", "ValidationError", "InvalidNameError", "SchemaError", "SchemaMismatchError",
    "FilterError", "UnknownColumnError", "NoSuchNamespaceError", "NamespaceExistsError",
    "NoSuchTableError", "TableExistsError", "NoSuchSnapshotError", "CorruptMetadataError",
    "CommitError", "CommitConflictError", "CompactionError", "ChecksumMismatchError", "CommitStateUnknownError", "CatalogLockTimeoutError",
    "MaintenanceError", "IncompleteListingError",
    "__version__",
]
