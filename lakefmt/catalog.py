"""The DuckDB catalog: names, the current-metadata pointer, and its compare-and-swap (spec/catalog.md).

The catalog is one DuckDB database file. DuckDB lets a single process at a time
open a file for writing, so every catalog operation runs inside
:meth:`Catalog.session`: an exclusive ``flock`` on ``<catalog>.lock`` (a bounded
wait, see :mod:`lakefmt.catalog_lock`), then the file attached to this process's
in-memory DuckDB instance, one transaction, and a detach (CAT-6). The critical
section is a few milliseconds, and several processes on one machine all get their
turn.

The pointer swap is a real compare-and-swap (CAT-4): a conditional ``UPDATE ...
WHERE metadata_location = ?`` whose changed-row count must be exactly 1, in the
same transaction as its commit-log row (CAT-5).

A catalog that this process cannot write (a read-only mount, no write permission, or
``read_only=True``) is opened read-only (CAT-18). A missing catalog file is created
only when asked (CAT-14), and never over a warehouse that still holds tables (CAT-19):
:meth:`Catalog.recover` registers them again.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from lakefmt.catalog_access import MAX_HOLD_SECONDS, CatalogFileAccess
from lakefmt.catalog_file import DAMAGED, CatalogSession, CommitRecord, check_catalog_file
from lakefmt.catalog_lock import why_not_writable
from lakefmt.errors import (
    CatalogMissingError,
    CorruptCatalogError,
    InvalidCatalogPathError,
    LakefmtError,
    NoSuchWarehouseError,
    ReadOnlyCatalogError,
    TableExistsError,
    ValidationError,
)
from lakefmt.idempotency import BATCH_ID, WRITER_ID, WriterBatch
from lakefmt.io import FileIO, join, normalize_location, scheme_of
from lakefmt.metadata import FORMAT_VERSION, FORMAT_VERSIONS, read_metadata
from lakefmt.names import NAME_PATTERN, parse_identifier, validate_name
from lakefmt.table_creation import new_table_metadata
from lakefmt.warehouse_layout import find_metadata_files, metadata_version

if TYPE_CHECKING:
    from lakefmt.metadata import TableMetadata
    from lakefmt.recovery import RecoveryReport
    from lakefmt.table import Table

__all__ = ["CATALOG_FILE", "NAME_PATTERN", "Catalog", "CatalogSession", "CommitRecord", "parse_identifier",
           "validate_name"]
CATALOG_FILE = "catalog.duckdb"
def _batches_in_history(metadata: TableMetadata) -> list[tuple[WriterBatch, int]]:
    """Each idempotent writer's newest batch among the current snapshot's retained ancestors (CAT-20)."""
    newest: dict[str, tuple[WriterBatch, int]] = {}
    for snap in metadata.ancestors(metadata.current_snapshot_id):
        writer, batch = snap.summary.get(WRITER_ID), snap.summary.get(BATCH_ID)
        if writer and batch and writer not in newest:
            try:
                newest[writer] = (WriterBatch(writer, int(batch)), snap.snapshot_id)
            except (ValueError, LakefmtError):
                continue  # not written by an idempotent commit (SNAP-5 keys are free-form)
    return list(newest.values())


_RECOVER_HINT = ("run `lakefmt recover --warehouse {warehouse}` (or lakefmt.Catalog.recover(...)) to register "
                 "its tables again from their newest metadata files")


class Catalog:
    """Tables of one warehouse, named ``namespace.table``.

    Args:
        warehouse: where table data lives: a local folder (default ``"warehouse"``),
            ``s3://bucket/prefix`` or ``memory://name``; or the URL of a catalog server
            (``http://host:8765``, ``lakefmt serve``), which names the warehouse itself.
        catalog_path: the DuckDB catalog file. Defaults to ``<warehouse>/catalog.duckdb``
            for a local warehouse; required for any other store.
        storage_options: passed to fsspec (for S3: ``endpoint_url``, ``key``, ``secret``...).
        lock_timeout: seconds one catalog session waits for its turn before
            :class:`CatalogLockTimeoutError`: for ``<catalog>.lock`` held by another process
            or thread, and for DuckDB's own lock on the file held by a program outside
            lakefmt (CAT-6). Default 30.
        create: create the catalog file (and a local warehouse folder) if it does not
            exist. Without it a missing catalog raises :class:`NoSuchWarehouseError`
            (CAT-14). Never creates a catalog over a warehouse that holds tables
            (:class:`CatalogMissingError`, CAT-19).
        read_only: never write. A catalog this process cannot write (read-only mount, no
            write permission) is opened read-only anyway; ``read_only`` then says so and
            :attr:`read_only_reason` says why (CAT-18). Writes raise
            :class:`ReadOnlyCatalogError`.
        session_linger: seconds to keep the catalog file locked and attached after a session, so
            that this process's next session starts at once (CAT-23; at most 0.5). For a process
            that commits many times in a row, such as the catalog server (``lakefmt serve`` uses
            0.05); other processes then wait up to half a second longer for the lock. Default 0:
            every session lets go of the file at its end.
        token: the bearer token of a catalog server; only with an ``http(s)://`` URL as
            ``warehouse``, which opens a :class:`lakefmt.catalog_client.RemoteCatalog`
            (spec/catalog-http.md; default token ``$LAKEFMT_CATALOG_TOKEN``).

    Example:
        >>> cat = Catalog("warehouse", create=True)
        >>> t = cat.create_table("artemis.downlinks", schema=pa.schema([("id", pa.int64())]))
        >>> Catalog("warehouse").load_table("artemis.downlinks")  # later: open the existing one
    """

    def __new__(cls, warehouse: str = "warehouse", *args: Any, **kwargs: Any) -> Catalog:  # noqa: PYI034
        """A catalog server's URL (``http://host:8765``) opens a :class:`lakefmt.catalog_client.RemoteCatalog`."""
        if cls is Catalog and isinstance(warehouse, str) and warehouse.lower().startswith(("http://", "https://")):
            from lakefmt.catalog_client import RemoteCatalog  # HTTP client: loaded only for a server URL

            return super().__new__(RemoteCatalog)
        return super().__new__(cls)

    def __init__(self, warehouse: str = "warehouse", *, catalog_path: str | None = None,
                 storage_options: dict[str, Any] | None = None, lock_timeout: float = 30.0,
                 create: bool = False, read_only: bool = False, token: str | None = None,
                 session_linger: float = 0.0) -> None:
        if token is not None:
            raise ValidationError(f"token=... is for a catalog server URL (http://host:port); the warehouse "
                                  f"{warehouse!r} is opened through its catalog file directly")
        self._configure(warehouse, catalog_path, storage_options, lock_timeout, read_only, session_linger)
        self._open(create=create, over_tables=False)

    def _configure(self, warehouse: str, catalog_path: str | None, storage_options: dict[str, Any] | None,
                   lock_timeout: float, read_only: bool, session_linger: float = 0.0) -> None:
        self.warehouse = normalize_location(warehouse)
        self.io = FileIO(self.warehouse, storage_options)
        if catalog_path is None:
            if self.io.scheme != "file":
                raise InvalidCatalogPathError(f"a {self.io.scheme}:// warehouse needs catalog_path=... "
                                              "(a DuckDB file on a local or shared disk)")
            catalog_path = os.path.join(self.warehouse, CATALOG_FILE)
        if not isinstance(catalog_path, str) or scheme_of(catalog_path) != "file":
            raise InvalidCatalogPathError(f"catalog_path must be a local file path, got {catalog_path!r} (CAT-16)")
        self.catalog_path = normalize_location(catalog_path)
        if os.path.isdir(self.catalog_path):
            raise InvalidCatalogPathError(
                f"catalog_path {self.catalog_path} is a folder; pass the path of the catalog file inside it, "
                f"for example {os.path.join(self.catalog_path, CATALOG_FILE)}")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) or not lock_timeout > 0:
            raise ValidationError(f"lock_timeout must be a positive number of seconds, got {lock_timeout!r}")
        self.lock_timeout = float(lock_timeout)
        if isinstance(session_linger, bool) or not isinstance(session_linger, (int, float)) \
                or not 0 <= session_linger <= MAX_HOLD_SECONDS:
            raise ValidationError(f"session_linger must be a number of seconds from 0 to {MAX_HOLD_SECONDS:g}, "
                                  f"got {session_linger!r}")
        self.read_only = bool(read_only)
        self.read_only_reason: str | None = "opened with read_only=True" if read_only else None
        self.session_linger = float(session_linger)

    def _open(self, *, create: bool, over_tables: bool) -> None:
        """Check that the catalog file exists (or create it, CAT-14, CAT-19), then its format."""
        where = f"{self.catalog_path} (warehouse {self.warehouse})"
        if not os.path.exists(self.catalog_path):
            tables = {} if over_tables else self._tables_in_storage()
            if tables:
                raise CatalogMissingError(
                    f"the catalog file {self.catalog_path} is missing, but the warehouse {self.warehouse} holds "
                    f"{len(tables)} table(s) (for example {min(tables)}). Refusing to create an empty "
                    f"catalog over them. If the file was moved, pass its catalog_path; otherwise "
                    + _RECOVER_HINT.format(warehouse=self.warehouse))
            if not create:
                raise NoSuchWarehouseError(
                    f"no lakefmt catalog at {where}: check the path, or pass create=True to make a new "
                    "warehouse (on the command line: `lakefmt demo`, or `lakefmt create` a table)")
            if self.read_only:
                raise ReadOnlyCatalogError(f"cannot create the catalog {where}: it is opened read-only")
            if self.io.scheme == "file":
                os.makedirs(self.warehouse, exist_ok=True)
            os.makedirs(os.path.dirname(self.catalog_path), exist_ok=True)
        if not self.read_only:
            reason = why_not_writable(self.catalog_path)
            if reason is not None:
                self.read_only, self.read_only_reason = True, reason
        self._access = CatalogFileAccess(self.catalog_path, read_only=self.read_only, lock_timeout=self.lock_timeout,
                                         unreadable=self._corrupt, linger=self.session_linger)
        with self.session(checkpoint=True) as s:
            try:
                check_catalog_file(s.con, self.catalog_path, read_only=self.read_only, why=self.read_only_reason,
                                   recover_hint=_RECOVER_HINT.format(warehouse=self.warehouse))
            except duckdb.Error as exc:
                raise self._corrupt(exc) from exc

    def _tables_in_storage(self) -> dict[str, list[str]]:
        """Table locations under the warehouse that hold metadata files (LAYOUT-10); {} if none."""
        try:
            return find_metadata_files(self.io, self.warehouse)
        except FileNotFoundError:
            return {}

    def _corrupt(self, exc: BaseException) -> CorruptCatalogError:
        return CorruptCatalogError(
            f"the catalog file {self.catalog_path} cannot be read as a lakefmt catalog ({exc}). If it is "
            "damaged (empty, truncated or overwritten), restore it from a backup, or move it aside and "
            + _RECOVER_HINT.format(warehouse=self.warehouse))

    def _check_writable(self, what: str) -> None:
        if self.read_only:
            raise self._read_only_error(what)

    def _read_only_error(self, what: str) -> ReadOnlyCatalogError:
        return ReadOnlyCatalogError(f"cannot {what}: the catalog {self.catalog_path} is open read-only "
                                    f"({self.read_only_reason}). Nothing was written; open it from a "
                                    "process that can write the catalog file and its folder")

    def __repr__(self) -> str:
        return f"Catalog({self.warehouse!r}, catalog_path={self.catalog_path!r})"

    # -- locking ---------------------------------------------------------------
    @contextlib.contextmanager
    def session(self, *, checkpoint: bool = False) -> Iterator[CatalogSession]:
        """Exclusive access to the catalog file for one short unit of work (CAT-6).

        Waits at most ``lock_timeout`` seconds in all for the other threads of this
        process, ``<catalog>.lock`` and DuckDB's own file lock, then raises
        :class:`CatalogLockTimeoutError` (:mod:`lakefmt.catalog_access`). A read-only
        catalog attaches the file ``READ_ONLY`` under a shared lock (CAT-18). With
        ``checkpoint`` the session folds the write-ahead log into the file at its end;
        otherwise that happens once the log has grown (CAT-22).
        """
        with self._access.attached(checkpoint=checkpoint) as con:
            try:
                yield CatalogSession(con, f"in catalog {self.catalog_path} (warehouse {self.warehouse})")
            except BaseException as exc:
                if self.read_only and isinstance(exc, duckdb.Error) and "read-only" in str(exc):
                    raise self._read_only_error("write to it") from exc
                if isinstance(exc, duckdb.IOException) and any(m in str(exc) for m in DAMAGED):
                    raise self._corrupt(exc) from exc
                raise

    def release(self) -> None:
        """Let go of the catalog file now, if this process keeps it between sessions (``session_linger``, CAT-23)."""
        self._access.release()

    def take_commit_turn(self, namespace: str, name: str, *, before: Callable[[], None] | None = None) -> bool:
        """Whether the next commit is built only in its session, in a turn taken now (CATHTTP-25; ``before``
        runs first). A local writer builds first and rebuilds under the lock (COMMIT-7): never."""
        return False

    def holds_commit_turn(self, namespace: str, name: str) -> bool:
        """Whether a refused commit is retried at once, without COMMIT-13's wait: only in a served catalog's
        turn (CATHTTP-22); a local writer rebuilds within its locked session (COMMIT-7)."""
        return False

    # -- namespaces ------------------------------------------------------------
    def create_namespace(self, namespace: str, properties: dict[str, str] | None = None) -> None:
        validate_name(namespace, "namespace")
        self._check_writable(f"create namespace {namespace}")
        with self.session(checkpoint=True) as s:
            s.create_namespace(namespace, properties or {})

    def list_namespaces(self) -> list[str]:
        with self.session() as s:
            return s.namespaces()

    def drop_namespace(self, namespace: str) -> None:
        validate_name(namespace, "namespace")
        self._check_writable(f"drop namespace {namespace}")
        with self.session(checkpoint=True) as s:
            s.drop_namespace(namespace)

    # -- tables ----------------------------------------------------------------
    def create_table(self, identifier: str | Sequence[str], schema: pa.Schema | Any, *,
                     partition_by: Sequence[str] = (), sort_by: Sequence[str] = (),
                     properties: dict[str, str] | None = None, format_version: int = FORMAT_VERSION) -> Table:
        """Create an empty table (no snapshot yet) and return it.

        The namespace is created if it does not exist. ``schema`` is an Arrow schema
        (nullable fields become optional columns) or a :class:`lakefmt.Schema`.
        ``format_version`` 2 (the default) allows deletion vectors and history files (FMT-4,
        META-13); 1 keeps the table readable by version 1 readers until its first deletion
        vector upgrades it.
        """
        from lakefmt.table import Table  # table sits above the catalog

        namespace, name = parse_identifier(identifier)
        self._check_writable(f"create table {namespace}.{name}")
        table_uuid = str(uuid.uuid4())
        location = join(self.warehouse, namespace, f"{name}-{table_uuid.replace('-', '')[:12]}")
        metadata = new_table_metadata(schema, location=location, table_uuid=table_uuid,
                                      partition_by=partition_by, sort_by=sort_by,
                                      properties=properties or {})
        if format_version != metadata.format_version:
            if format_version not in FORMAT_VERSIONS:
                raise ValidationError(f"format_version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
            metadata = metadata.evolve(format_version=format_version)
        metadata_location = join(location, "metadata", f"v{1:06d}-{uuid.uuid4()}.metadata.json")
        with self.session(checkpoint=True) as s:
            if s.table_exists(namespace, name):
                raise TableExistsError(f"table {namespace}.{name} already exists")
            self.io.write_bytes(metadata_location, metadata.dump_bytes())
            self.io.sync()  # durable before the row names it (COMMIT-20)
            s.insert_table(namespace, name, table_uuid, metadata_location)  # CAT-12
        return Table(self, (namespace, name), metadata, metadata_location)

    def register_table(self, identifier: str | Sequence[str], metadata_location: str) -> Table:
        """Add an existing table to the catalog under ``identifier``, at ``metadata_location`` (CAT-20).

        The metadata file is read and validated first; its version comes from its name
        (LAYOUT-9). Nothing is written to the table's files. The catalog records the
        registration in the commit log with operation ``register``, and the newest batch
        of each idempotent writer found in the retained snapshot history (PROGRESS-1).

        Raises:
            CorruptMetadataError: the metadata file is missing or invalid.
            ValidationError: ``metadata_location`` is not a metadata file name of LAYOUT-9, or
                is on another store than the warehouse.
            TableExistsError: the name is taken, or the table (its ``table-uuid``) is already
                registered under another name.
        """
        from lakefmt.table import Table  # table sits above the catalog

        namespace, name = parse_identifier(identifier)
        self._check_writable(f"register table {namespace}.{name}")
        if not isinstance(metadata_location, str):
            raise ValidationError(f"metadata_location must be a string, got {metadata_location!r}")
        location = normalize_location(metadata_location)
        if scheme_of(location) != self.io.scheme:
            raise ValidationError(f"{location} is not on the warehouse's store ({self.io.scheme}://); copy the "
                                  "table under the warehouse first")
        version = metadata_version(location)
        metadata = read_metadata(self.io, location)
        with self.session(checkpoint=True) as s:
            s.insert_table(namespace, name, metadata.table_uuid, location, version=version, operation="register",
                           snapshot_id=metadata.current_snapshot_id, batches=_batches_in_history(metadata))
        return Table(self, (namespace, name), metadata, location)

    @classmethod
    def recover(cls, warehouse: str = "warehouse", *, catalog_path: str | None = None,
                storage_options: dict[str, Any] | None = None, lock_timeout: float = 30.0
                ) -> tuple[Catalog, RecoveryReport]:
        """Register every table found in ``warehouse`` from its newest usable metadata file (CAT-21).

        Creates the catalog file if it is missing; tables already in the catalog (by
        ``table-uuid``) are left alone, so running it twice is safe. Returns the catalog
        and a report of what was registered, under which name, and what was skipped.

        Example:
            >>> cat, report = Catalog.recover("warehouse")
            >>> [t.identifier for t in report.registered]
            ['artemis.downlinks']
        """
        from lakefmt.recovery import register_found_tables  # recovery reads tables, above the catalog

        if isinstance(warehouse, str) and warehouse.lower().startswith(("http://", "https://")):
            raise ValidationError("recover rebuilds a catalog file: run it on the catalog server's machine, "
                                  "against its catalog file")
        catalog = cls.__new__(cls)
        catalog._configure(warehouse, catalog_path, storage_options, lock_timeout, read_only=False)
        catalog._open(create=True, over_tables=True)
        return catalog, register_found_tables(catalog)

    def load_table(self, identifier: str | Sequence[str]) -> Table:
        from lakefmt.table import Table  # table sits above the catalog

        namespace, name = parse_identifier(identifier)
        location = self.current_metadata_location((namespace, name))
        return Table(self, (namespace, name), read_metadata(self.io, location), location)

    def current_metadata_location(self, identifier: str | Sequence[str]) -> str:
        namespace, name = parse_identifier(identifier)
        with self.session() as s:
            return s.current_location(namespace, name)

    def table_exists(self, identifier: str | Sequence[str]) -> bool:
        namespace, name = parse_identifier(identifier)
        with self.session() as s:
            return s.table_exists(namespace, name)

    def list_tables(self, namespace: str | None = None) -> list[str]:
        if namespace is not None:
            validate_name(namespace, "namespace")
        with self.session() as s:
            return s.table_names(namespace)

    def rename_table(self, old: str | Sequence[str], new: str | Sequence[str]) -> None:
        """Rename a table; its files stay where they are (CAT-7)."""
        old_ns, old_name = parse_identifier(old)
        new_ns, new_name = parse_identifier(new)
        self._check_writable(f"rename table {old_ns}.{old_name}")
        with self.session(checkpoint=True) as s:
            s.rename_table((old_ns, old_name), (new_ns, new_name))

    def drop_table(self, identifier: str | Sequence[str], *, purge: bool = False) -> None:
        """Remove a table from the catalog; with ``purge=True`` also delete its files (CAT-8)."""
        namespace, name = parse_identifier(identifier)
        self._check_writable(f"drop table {namespace}.{name}")
        with self.session(checkpoint=True) as s:
            location = s.drop_table(namespace, name).rsplit("/metadata/", 1)[0]  # LAYOUT-3
        if purge and location:
            for info in list(self.io.list_files(location)):
                self.io.delete(info.path)

    def checkpoint(self) -> None:
        """Fold the write-ahead log ``<catalog>.wal`` into the catalog file (CAT-22).

        Recent commits live in the log until a session checkpoints; run this before
        copying the catalog file alone (a backup that copies both files needs nothing).
        """
        self._check_writable("checkpoint the catalog")
        with self.session(checkpoint=True):
            pass

    def commit_log(self, identifier: str | Sequence[str] | None = None, *, limit: int | None = None
                   ) -> list[CommitRecord]:
        """Commits recorded by the catalog, newest first (CAT-5)."""
        namespace, name = (None, None) if identifier is None else parse_identifier(identifier)
        with self.session() as s:
            return s.commit_records(namespace=namespace, name=name, limit=limit)
