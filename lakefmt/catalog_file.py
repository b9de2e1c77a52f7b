"""The catalog file's tables and the work done on them inside one session (spec/catalog.md CAT-3 … CAT-5, CAT-14).

:class:`CatalogSession` is what :meth:`lakefmt.catalog.Catalog.session` hands out: the
attached catalog file, locked for one short unit of work (CAT-6), with the pointer's
compare-and-swap (CAT-4) and its commit-log row (CAT-5).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import duckdb

from lakefmt.errors import CorruptCatalogError, NoSuchTableError, ValidationError
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

    def compare_and_swap(self, namespace: str, name: str, expected: str, new: str, *,
                         operation: str, snapshot_id: int | None, summary: dict[str, Any],
                         writer_batch: WriterBatch | None = None, lease_token: str | None = None) -> bool:
        """Swap the pointer if it still equals ``expected`` (CAT-4); log the commit (CAT-5), and record
        an idempotent commit's batch as its writer's progress (PROGRESS-3).

        ``lease_token`` names the write lease protecting the commit's files. This session checked
        it under the same lock before the swap (COMMIT-19); a catalog served over HTTP checks it
        in the swap's own transaction.
        """
        now = utcnow()
        self.con.execute("BEGIN TRANSACTION")
        try:
            changed = self.con.execute(
                "UPDATE tables SET metadata_location = ?, version = version + 1, updated_at = ? "
                "WHERE namespace = ? AND name = ? AND metadata_location = ? RETURNING table_uuid, version",
                [new, now, namespace, name, expected]).fetchall()
            if len(changed) != 1:
                self.con.execute("ROLLBACK")
                return False
            table_uuid, version = changed[0]
            self.con.execute(
                "INSERT INTO commit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [table_uuid, namespace, name, version, expected, new, now, operation, snapshot_id,
                 json.dumps(summary)])
            if writer_batch is not None:
                record_batch(self.con, table_uuid, writer_batch, snapshot_id, now)
            self.con.execute("COMMIT")
            return True
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
            raise

    # -- leases (CAT-9 .. CAT-11) and writer progress (PROGRESS-1): every other statement a writer
    # runs on the catalog. Callers use these methods, never ``con``, so a catalog served over HTTP
    # offers the same session.
    def acquire_leases(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str, ttl: float) -> bool:
        """Take (or renew, for the same owner) every lease of ``keys``, or none: False if another owner holds
        one live."""
        now = time.time()
        self.con.execute("BEGIN TRANSACTION")
        try:
            for key in keys:
                row = self.con.execute(
                    "SELECT owner, expires_at FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key = ?",
                    [table_uuid, kind, key]).fetchone()
                if row is not None and row[0] != owner and row[1] > now:
                    self.con.execute("ROLLBACK")
                    return False
                if row is not None:
                    self.con.execute("DELETE FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key = ?",
                                     [table_uuid, kind, key])
                self.con.execute("INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?)",
                                 [table_uuid, kind, key, owner, now + ttl, now])
            self.con.execute("COMMIT")
            return True
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
            raise

    def release_leases(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str) -> None:
        """Drop ``owner``'s leases on ``keys`` (others' leases are untouched)."""
        for key in keys:
            self.con.execute("DELETE FROM leases WHERE table_uuid = ? AND kind = ? AND lease_key = ? AND owner = ?",
                             [table_uuid, kind, key, owner])

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
