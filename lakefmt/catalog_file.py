"""The catalog file's tables and the work done on them inside one session (spec/catalog.md CAT-3 … CAT-5, CAT-14).

:class:`CatalogSession` is what :meth:`lakefmt.catalog.Catalog.session` hands out: the
attached catalog file, locked for one short unit of work (CAT-6), with the pointer's
compare-and-swap (CAT-4) and its commit-log row (CAT-5).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import duckdb

from lakefmt.errors import CorruptCatalogError, NoSuchTableError, ValidationError
from lakefmt.idempotency import WriterBatch, record_batch

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
                         writer_batch: WriterBatch | None = None) -> bool:
        """Swap the pointer if it still equals ``expected`` (CAT-4); log the commit (CAT-5), and record
        an idempotent commit's batch as its writer's progress (PROGRESS-3)."""
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
