"""The catalog file's tables and the work done on them inside one session (spec/catalog.md CAT-3 … CAT-5, CAT-14).

:class:`CatalogSession` is what :meth:`lakefmt.catalog.Catalog.session` hands out: the
attached catalog file, locked for one short unit of work (CAT-6), with the pointer's
compare-and-swap (CAT-4) and its commit-log row (CAT-5). Every statement lakefmt runs on
the catalog's own tables is a method here, so :class:`lakefmt.catalog.Catalog` and the
catalog server (:mod:`lakefmt.service.catalog_api`) do the same work in the same SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import duckdb

from lakefmt.errors import (
    CorruptCatalogError,
    NamespaceExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableExistsError,
    ValidationError,
)
from lakefmt.idempotency import WriterBatch, last_committed_batch, record_batch

ATTACHED = "lakefmt_file"  # the catalog file's name inside a session (CAT-6)
DAMAGED = ("Could not read", "not a valid DuckDB database", "Corrupt", "checksum")  # DuckDB errors of a bad file
_HEADER_BYTES = 3 * 4096  # DuckDB's file header; then blocks of block_size bytes

SCHEMA_SQL = [
    "CREATE TABLE IF NOT EXISTS lakefmt_catalog (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE IF NOT EXISTS namespaces (
        namespace VARCHAR PRIMARY KEY, properties VARCHAR, created_at TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS tables (
        namespace VARCHAR NOT NULL, name VARCHAR NOT NULL, table_uuid VARCHAR NOT NULL,
        metadata_location VARCHAR NOT NULL, version BIGINT NOT NULL,
        created_at TIMESTAMP, updated_at TIMESTAMP, PRIMARY KEY (namespace, name))""",
    """CREATE TABLE IF NOT EXISTS commit_log (
        table_uuid VARCHAR NOT NULL, namespace VARCHAR NOT NULL, name VARCHAR NOT NULL,
        version BIGINT NOT NULL, old_metadata_location VARCHAR, new_metadata_location VARCHAR NOT NULL,
        committed_at TIMESTAMP NOT NULL, operation VARCHAR NOT NULL, snapshot_id BIGINT,
        summary VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS leases (
        table_uuid VARCHAR NOT NULL, kind VARCHAR NOT NULL, lease_key VARCHAR NOT NULL,
        owner VARCHAR NOT NULL, expires_at DOUBLE NOT NULL, created_at DOUBLE NOT NULL,
        PRIMARY KEY (table_uuid, kind, lease_key))""",
    """CREATE TABLE IF NOT EXISTS writer_progress (
        table_uuid VARCHAR NOT NULL, writer_id VARCHAR NOT NULL, batch_id BIGINT NOT NULL,
        snapshot_id BIGINT, committed_at TIMESTAMP NOT NULL, PRIMARY KEY (table_uuid, writer_id))""",  # PROGRESS-1
]

def check_catalog_file(con: duckdb.DuckDBPyConnection, catalog_path: str, *, read_only: bool, why: str | None,
                       recover_hint: str) -> None:
    """Refuse a file that is not a lakefmt catalog of format 1; create missing tables unless read-only (CAT-14).

    ``con`` has the file attached as :data:`ATTACHED` and in use.
    """
    names = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = ?", [ATTACHED]).fetchall()}
    if names and "lakefmt_catalog" not in names:
        raise CorruptCatalogError(
            f"{catalog_path} is a DuckDB database but not a lakefmt catalog (it has tables "
            f"{', '.join(sorted(names)[:5])} and no lakefmt_catalog); pass the right catalog_path")
    if not read_only:
        for sql in SCHEMA_SQL:
            con.execute(sql)
        con.execute("INSERT OR IGNORE INTO lakefmt_catalog VALUES ('format-version', '1')")
    elif not names:
        raise CorruptCatalogError(f"{catalog_path} holds no lakefmt catalog tables and is opened "
                                  f"read-only ({why}), so they cannot be created")
    # Every used block lies in the file (free blocks at the end are cut off): a sound lower bound.
    size = con.execute("SELECT block_size, used_blocks FROM pragma_database_size() WHERE database_name = ?",
                       [ATTACHED]).fetchone()
    expected = _HEADER_BYTES + int(size[0]) * int(size[1]) if size else 0
    actual = os.path.getsize(catalog_path)
    if actual < expected:
        raise CorruptCatalogError(f"the catalog file {catalog_path} is truncated: {actual} bytes, its used blocks "
                                  f"need at least {expected}. Restore it from a backup, or move it aside and "
                                  + recover_hint)
    row = con.execute("SELECT value FROM lakefmt_catalog WHERE key = 'format-version'").fetchone()
    if row is None or row[0] != "1":
        raise ValidationError(f"catalog {catalog_path} has format-version {row and row[0]!r}; "
                              "this lakefmt implements 1 (CAT-14)")


def utcnow() -> datetime:
    """Catalog times are stored as naive UTC TIMESTAMPs (CAT-5)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class CommitRecord:
    """One row of the commit log (CAT-5)."""

    identifier: str
    version: int
    old_metadata_location: str | None
    new_metadata_location: str
    committed_at: datetime
    operation: str
    snapshot_id: int | None
    summary: dict[str, Any]


class CatalogSession:
    """The attached, locked catalog file; valid only inside :meth:`Catalog.session`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, where: str = "") -> None:
        self.con = con
        self.where = where  # "in catalog <path> (warehouse <w>)", for messages

    def no_such_table(self, namespace: str, name: str) -> NoSuchTableError:
        return NoSuchTableError(f"table {namespace}.{name} does not exist {self.where}".rstrip())

    def current_location(self, namespace: str, name: str) -> str:
        row = self.con.execute(
            "SELECT metadata_location FROM tables WHERE namespace = ? AND name = ?",
            [namespace, name]).fetchone()
        if row is None:
            raise self.no_such_table(namespace, name)
        return str(row[0])

    # -- names (CAT-1, CAT-7, CAT-8, CAT-12, CAT-13, CAT-20): used by the local catalog and the
    # catalog server only; a remote catalog sends these operations as whole requests.
    def namespace_exists(self, namespace: str) -> bool:
        return self.con.execute("SELECT 1 FROM namespaces WHERE namespace = ?", [namespace]).fetchone() is not None

    def namespaces(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT namespace FROM namespaces ORDER BY 1").fetchall()]

    def create_namespace(self, namespace: str, properties: dict[str, str]) -> None:
        """CAT-13: an existing namespace is refused."""
        if self.namespace_exists(namespace):
            raise NamespaceExistsError(f"namespace {namespace} already exists")
        self.con.execute("INSERT INTO namespaces VALUES (?, ?, ?)", [namespace, json.dumps(properties), utcnow()])

    def drop_namespace(self, namespace: str) -> None:
        """CAT-13: a missing namespace, or one that still holds tables, is refused and nothing changes."""
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"namespace {namespace} does not exist")
        count = self.con.execute("SELECT count(*) FROM tables WHERE namespace = ?", [namespace]).fetchone()
        if count and count[0]:
            raise ValidationError(f"namespace {namespace} is not empty ({count[0]} tables)")
        self.con.execute("DELETE FROM namespaces WHERE namespace = ?", [namespace])

    def table_exists(self, namespace: str, name: str) -> bool:
        return self.con.execute("SELECT 1 FROM tables WHERE namespace = ? AND name = ?",
                                [namespace, name]).fetchone() is not None

    def table_names(self, namespace: str | None = None) -> list[str]:
        """``namespace.name`` of every table (of ``namespace``), sorted."""
        if namespace is None:
            rows = self.con.execute("SELECT namespace, name FROM tables ORDER BY 1, 2").fetchall()
        else:
            rows = self.con.execute("SELECT namespace, name FROM tables WHERE namespace = ? ORDER BY 2",
                                    [namespace]).fetchall()
        return [f"{ns}.{n}" for ns, n in rows]

    def table_identities(self) -> list[tuple[str, str, str]]:
        """``(table_uuid, namespace, name)`` of every table (recovery matches folders to them, CAT-21)."""
        return [(str(u), str(ns), str(n)) for u, ns, n in
                self.con.execute("SELECT table_uuid, namespace, name FROM tables ORDER BY 2, 3").fetchall()]

    def table_row(self, namespace: str, name: str) -> tuple[str, str, int]:
        """``(table_uuid, metadata_location, version)`` of a table, read together (CAT-3, CAT-15, CAT-17)."""
        row = self.con.execute("SELECT table_uuid, metadata_location, version FROM tables "
                               "WHERE namespace = ? AND name = ?", [namespace, name]).fetchone()
        if row is None:
            raise self.no_such_table(namespace, name)
        return str(row[0]), str(row[1]), int(row[2])

    def insert_table(self, namespace: str, name: str, table_uuid: str, metadata_location: str, *,
                     version: int = 1, operation: str = "create", snapshot_id: int | None = None,
                     batches: Sequence[tuple[WriterBatch, int]] = ()) -> None:
        """Add a table whose metadata file exists, in one transaction: the namespace if missing, the
        ``tables`` row and its ``commit_log`` row (CAT-5), with ``operation`` ``create`` (CAT-12) or
        ``register`` (CAT-20) and, for a registration, each writer's newest batch found in the
        table's history as ``(batch, snapshot_id)`` (PROGRESS-1).

        Raises:
            TableExistsError: the name is taken, or ``table_uuid`` is registered under another name
                (LAYOUT-11). Nothing was written.
        """
        if self.table_exists(namespace, name):
            raise TableExistsError(f"table {namespace}.{name} already exists {self.where}".rstrip())
        other = self.con.execute("SELECT namespace, name FROM tables WHERE table_uuid = ?", [table_uuid]).fetchone()
        if other is not None:
            raise TableExistsError(f"table-uuid {table_uuid} of {metadata_location} is already registered as "
                                   f"{other[0]}.{other[1]}; two names must not share one table (LAYOUT-11)")
        now = utcnow()
        self._transaction(lambda: self._insert_table(namespace, name, table_uuid, metadata_location, version,
                                                     operation, snapshot_id, batches, now))

    def _insert_table(self, namespace: str, name: str, table_uuid: str, location: str, version: int,
                      operation: str, snapshot_id: int | None, batches: Sequence[tuple[WriterBatch, int]],
                      now: datetime) -> None:
        self.con.execute("INSERT OR IGNORE INTO namespaces VALUES (?, '{}', ?)", [namespace, now])
        self.con.execute("INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [namespace, name, table_uuid, location, version, now, now])
        self.con.execute("INSERT INTO commit_log VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?, '{}')",
                         [table_uuid, namespace, name, version, location, now, operation, snapshot_id])
        for batch, batch_snapshot_id in batches:
            record_batch(self.con, table_uuid, batch, batch_snapshot_id, now)

    def rename_table(self, old: tuple[str, str], new: tuple[str, str]) -> None:
        """Give the table's row another name, creating the target namespace if needed, atomically (CAT-7)."""
        if not self.table_exists(*old):
            raise self.no_such_table(*old)
        if self.table_exists(*new):
            raise TableExistsError(f"table {new[0]}.{new[1]} already exists")
        now = utcnow()

        def rename() -> None:
            self.con.execute("INSERT OR IGNORE INTO namespaces VALUES (?, '{}', ?)", [new[0], now])
            row = self.con.execute("SELECT table_uuid, metadata_location, version, created_at FROM tables "
                                   "WHERE namespace = ? AND name = ?", list(old)).fetchone()
            self.con.execute("DELETE FROM tables WHERE namespace = ? AND name = ?", list(old))
            self.con.execute("INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?, ?)", [*new, *row, now])

        self._transaction(rename)

    def drop_table(self, namespace: str, name: str) -> str:
        """Delete the table's row and the leases of tables no longer in the catalog (CAT-8, CAT-9), in one
        transaction; returns the metadata location the row held."""
        location = self.current_location(namespace, name)

        def drop() -> None:
            self.con.execute("DELETE FROM tables WHERE namespace = ? AND name = ?", [namespace, name])
            self.con.execute("DELETE FROM leases WHERE table_uuid NOT IN (SELECT table_uuid FROM tables)")

        self._transaction(drop)
        return location

    def commit_records(self, *, table_uuid: str | None = None, namespace: str | None = None,
                       name: str | None = None, new: str | None = None, limit: int | None = None
                       ) -> list[CommitRecord]:
        """Rows of the commit log, newest first, optionally of one table or one new metadata location
        (CAT-5; COMMIT-11 and CATHTTP-9 look a commit up by ``new``)."""
        filters = (("table_uuid", table_uuid), ("namespace", namespace), ("name", name),
                   ("new_metadata_location", new))
        where = [f"{column} = ?" for column, value in filters if value is not None]
        params: list[Any] = [value for _, value in filters if value is not None]
        sql = ("SELECT namespace, name, version, old_metadata_location, new_metadata_location, committed_at, "
               "operation, snapshot_id, summary FROM commit_log")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY committed_at DESC, version DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [CommitRecord(f"{r[0]}.{r[1]}", r[2], r[3], r[4], r[5].replace(tzinfo=timezone.utc), r[6], r[7],
                             json.loads(r[8] or "{}"))
                for r in self.con.execute(sql, params).fetchall()]

    def _transaction(self, work: Callable[[], None]) -> None:
        """Run ``work()`` in one transaction: all of it, or (on any error) none of it."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            work()
            self.con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
            raise

    def compare_and_swap(self, namespace: str, name: str, expected: str, new: str, *,
                         operation: str, snapshot_id: int | None, summary: dict[str, Any],
                         writer_batch: WriterBatch | None = None, lease_token: str | None = None) -> bool:
        """Whether :meth:`swap` swapped the pointer."""
        return self.swap(namespace, name, expected, new, operation=operation, snapshot_id=snapshot_id,
                         summary=summary, writer_batch=writer_batch, lease_token=lease_token) is not None

    def swap(self, namespace: str, name: str, expected: str, new: str, *,
             operation: str, snapshot_id: int | None, summary: dict[str, Any],
             writer_batch: WriterBatch | None = None, lease_token: str | None = None) -> int | None:
        """Swap the pointer if it still equals ``expected`` (CAT-4); log the commit (CAT-5), and record
        an idempotent commit's batch as its writer's progress (PROGRESS-3). Returns the table's new
        version, or None when nothing was swapped.

        With ``lease_token``, the write lease protecting the commit's files (COMMIT-19) must
        also be live and its own: the transaction reads it after the ``UPDATE`` and rolls the
        swap back if it is not (sessions are exclusive, CAT-6, so nothing changes between the two
        statements). None then means that the pointer moved or that the lease was lost; the caller
        tells which from :meth:`table_row`. The lease is read in a statement of its own because an
        ``EXISTS`` in the ``UPDATE`` cost more than both (DuckDB 2.0.1, a 10-row append's swap:
        4.9 ms against 2.5 + 1.0 ms).
        """
        now = utcnow()
        self.con.execute("BEGIN TRANSACTION")
        try:
            changed = self.con.execute(
                "UPDATE tables SET metadata_location = ?, version = version + 1, updated_at = ? "
                "WHERE namespace = ? AND name = ? AND metadata_location = ? RETURNING table_uuid, version",
                [new, now, namespace, name, expected]).fetchall()
            if len(changed) == 1 and lease_token is not None and not self.con.execute(
                    "SELECT 1 FROM leases WHERE table_uuid = ? AND kind = 'write' AND lease_key = ? AND owner = ? "
                    "AND expires_at > ?", [changed[0][0], lease_token, lease_token, time.time()]).fetchall():
                changed = []  # the write lease lapsed or was taken: nothing is swapped (COMMIT-19)
            if len(changed) != 1:
                self.con.execute("ROLLBACK")
                return None
            table_uuid, version = changed[0]
            self.con.execute(
                "INSERT INTO commit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [table_uuid, namespace, name, version, expected, new, now, operation, snapshot_id,
                 json.dumps(summary)])
            if writer_batch is not None:
                record_batch(self.con, table_uuid, writer_batch, snapshot_id, now)
            self.con.execute("COMMIT")
            return int(version)
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
            raise

    # -- leases (CAT-9 .. CAT-11) and writer progress (PROGRESS-1): every other statement a writer
    # runs on the catalog. Callers use these methods, never ``con``, so a catalog served over HTTP
    # offers the same session.
    def acquire_leases(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str, ttl: float) -> bool:
        """Take (or renew, for the same owner) every lease of ``keys``, or none: False if another owner holds
        one live. Three statements whatever the number of keys (a statement costs about 0.3 ms of CPU)."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return True
        now = time.time()
        marks = ", ".join("?" * len(keys))
        self.con.execute("BEGIN TRANSACTION")
        try:
            rows = self.con.execute(
                f"SELECT owner, expires_at FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key IN ({marks})",
                [table_uuid, kind, *keys]).fetchall()
            if any(row[0] != owner and row[1] > now for row in rows):
                self.con.execute("ROLLBACK")
                return False
            if rows:
                self.con.execute(f"DELETE FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key IN ({marks})",
                                 [table_uuid, kind, *keys])
            self.con.execute("INSERT INTO leases VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(keys)),
                             [v for key in keys for v in (table_uuid, kind, key, owner, now + ttl, now)])
            self.con.execute("COMMIT")
            return True
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
            raise

    def release_leases(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str) -> None:
        """Drop ``owner``'s leases on ``keys`` (others' leases are untouched), in one statement."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        marks = ", ".join("?" * len(keys))
        self.con.execute(f"DELETE FROM leases WHERE table_uuid = ? AND kind = ? AND owner = ? AND lease_key IN ({marks})",
                         [table_uuid, kind, owner, *keys])

    def renew_lease(self, table_uuid: str, kind: str, key: str, *, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease to now + ``ttl`` if it is still live and still theirs (CAT-10)."""
        now = time.time()
        changed = self.con.execute(
            "UPDATE leases SET expires_at = ? WHERE table_uuid = ? AND kind = ? AND lease_key = ? AND owner = ? "
            "AND expires_at > ?", [now + ttl, table_uuid, kind, key, owner, now]).fetchone()
        return changed is not None and changed[0] == 1

    def lease_holder(self, table_uuid: str, kind: str, key: str) -> tuple[str, float] | None:
        """The owner of a lease and when it expires, or None."""
        row = self.con.execute("SELECT owner, expires_at FROM leases WHERE table_uuid = ? AND kind = ? "
                               "AND lease_key = ?", [table_uuid, kind, key]).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def live_leases(self, table_uuid: str, kind: str | None = None) -> list[tuple[str, str, str, str, float]]:
        """``(table_uuid, kind, key, owner, expires_at)`` of the leases not yet expired, by key."""
        sql = "SELECT table_uuid, kind, lease_key, owner, expires_at FROM leases WHERE table_uuid = ? AND expires_at > ?"
        params: list[object] = [table_uuid, time.time()]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        return [tuple(row) for row in self.con.execute(sql + " ORDER BY lease_key", params).fetchall()]

    def last_committed_batch(self, table_uuid: str, writer_id: str, *, migrate: bool) -> int | None:
        """The writer's last committed batch on the table (PROGRESS-1; see idempotency.last_committed_batch)."""
        return last_committed_batch(self.con, table_uuid, writer_id, migrate=migrate)
