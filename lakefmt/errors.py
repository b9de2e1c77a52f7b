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


class DuplicateKeyError(ValidationError):
    """The source of an upsert holds a key more than once, or two source rows of a merge match
    one target row (spec/deletes.md). Nothing was written.

    ``keys`` holds a few of the repeated keys (tuples in ``on`` order), ``count`` how many keys repeat.
    """

    def __init__(self, message: str, *, keys: list[tuple[object, ...]] | None = None, count: int = 0) -> None:
        super().__init__(message)
        self.keys = list(keys or [])
        self.count = count


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


class MissingFileError(CorruptMetadataError):
    """A manifest list or manifest is not in storage: deleted while referenced, or by a concurrent
    snapshot expiry after the metadata naming it was read (spec/maintenance.md, MAINT-5)."""


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


class AlreadyCommittedError(CommitConflictError):
    """This writer's batch (or this Spark job) is already committed; committing it again would
    duplicate rows. Nothing was committed (spec/catalog.md PROGRESS-3, spec/spark.md SPARK-12).

    For an idempotent commit, ``writer_id`` and ``batch_id`` name the refused batch and
    ``last_committed`` the writer's last committed batch id; all three are None otherwise.
    """

    def __init__(self, message: str, *, writer_id: str | None = None, batch_id: int | None = None,
                 last_committed: int | None = None) -> None:
        super().__init__(message)
        self.writer_id = writer_id
        self.batch_id = batch_id
        self.last_committed = last_committed


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


class ErasureRefusedError(ValidationError):
    """A retention setting would keep rows the erasure must remove (ROWDEL-16). Nothing was done."""


class ErasureVerificationError(MaintenanceError):
    """After erasure, a live file or a file of a retained snapshot still holds a matching row (ROWDEL-17)."""


class IncompleteListingError(MaintenanceError):
    """The table location could not be listed completely, so no file can be proven an orphan (MAINT-11)."""


class ValueOutOfRangeError(SchemaMismatchError):
    """Data to be written holds a value outside the range its column may store (spec TYPE-10).

    Nothing was written. ``column`` names the column and ``value`` is the offending
    value (its physical form, TYPE-5).
    """

    def __init__(self, message: str, *, column: str, value: object) -> None:
        super().__init__(message)
        self.column = column
        self.value = value


class CorruptDataFileError(CorruptMetadataError):
    """A data file is missing, unreadable or not the file its manifest entry describes (READ-10, READ-12)."""


class MissingDependencyError(LakefmtError, ImportError):
    """An optional dependency needed by the call is not installed; the message says which extra to install."""


class NoSuchWarehouseError(LakefmtError):
    """No catalog file exists where one was asked for, and ``create=True`` was not given (CAT-14)."""


class CatalogMissingError(LakefmtError):
    """The catalog file is missing but the warehouse holds tables; it must be recovered, not recreated (CAT-19)."""


class CorruptCatalogError(LakefmtError):
    """The catalog file cannot be opened as a lakefmt catalog: empty, truncated, garbage or foreign (CAT-14)."""


class InvalidCatalogPathError(ValidationError):
    """``catalog_path`` cannot name a catalog file: a folder, or not a local path (CAT-16)."""


class ReadOnlyCatalogError(LakefmtError):
    """A write was asked of a catalog opened read-only (CAT-18). Nothing was written."""


class WriteLeaseLostError(CommitError):
    """The write-intent lease protecting a commit's files expired or was taken over before the swap (CAT-10).

    Orphan removal may have deleted the files, so nothing was committed; the files the
    write created were deleted (COMMIT-19).
    """


class CommitFileMissingError(CommitError):
    """A data file the commit adds is missing from storage or shorter than recorded (COMMIT-19).

    Nothing was committed; the files the write created were deleted.
    """


class StorageError(LakefmtError):
    """Storage refused a write for a reason the caller must fix; nothing was committed (spec/commits.md COMMIT-21)."""


class StorageFullError(StorageError):
    """The file system holding the table is full (``ENOSPC``, ``EDQUOT``); the write's files were deleted."""


class ReadOnlyStorageError(StorageError):
    """The file system holding the table is mounted read-only (``EROFS``); nothing was written."""
