"""The lakefmt error hierarchy.

Every error lakefmt raises on purpose is a :class:`LakefmtError`, so callers can
catch one base class. Subclasses name what went wrong, not where.
"""

from __future__ import annotations


class LakefmtError(Exception):
    """Base class of every error lakefmt raises deliberately."""


class ValidationError(LakefmtError, ValueError):
    """An argument, option or name is invalid. Nothing was written."""


class InvalidNameError(ValidationError):
    """A namespace or table name breaks spec/catalog.md CAT-2."""


class SchemaError(ValidationError):
    """A schema is malformed, or data does not fit a table's schema."""


class SchemaMismatchError(SchemaError):
    """Data to be written does not match the table schema (spec WRITE-3)."""


class FilterError(ValidationError):
    """A filter cannot be parsed or bound: syntax, unknown column or type mismatch."""


class UnknownColumnError(FilterError, SchemaError):
    """A name refers to no column of the schema."""


class NoSuchNamespaceError(LakefmtError, KeyError):
    """The namespace does not exist."""


class NamespaceExistsError(LakefmtError):
    """The namespace already exists."""


class NoSuchTableError(LakefmtError, KeyError):
    """The table does not exist in the catalog."""


class TableExistsError(LakefmtError):
    """A table of that name already exists."""


class NoSuchSnapshotError(LakefmtError, KeyError):
    """No snapshot matches the requested id or time."""


class CorruptMetadataError(LakefmtError):
    """A metadata file, manifest list or manifest is missing, truncated or malformed."""


class CommitError(LakefmtError):
    """A commit could not be completed."""


class CommitConflictError(CommitError):
    """A concurrent commit made this one invalid (spec COMMIT-7). Nothing was committed.

    ``missing_files`` names the files this commit meant to remove that a concurrent
    commit already removed (empty when the conflict is of another kind).
    """

    def __init__(self, message: str, *, missing_files: set[str] | frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.missing_files = frozenset(missing_files)


class CommitStateUnknownError(CommitError):
    """The catalog swap may or may not have happened; files are kept for safety."""


class CatalogLockTimeoutError(CommitError):
    """The catalog file stayed locked by other processes beyond the timeout."""


class CompactionError(LakefmtError):
    """A compaction could not be planned or a group could not be rewritten (spec/compaction.md)."""


class ChecksumMismatchError(CompactionError):
    """A group's outputs do not hold exactly its input rows (COMPACT-17); the outputs were deleted."""


class MaintenanceError(LakefmtError):
    """Snapshot expiry or orphan removal refused to run; nothing was deleted (spec/maintenance.md)."""


class IncompleteListingError(MaintenanceError):
    """The table location could not be listed completely, so no file can be proven an orphan (MAINT-11)."""
