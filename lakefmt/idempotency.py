"""Idempotent commits: a writer's batch is committed to a table at most once (spec/catalog.md, PROGRESS-1..4).

A writer that may replay work after a crash (a streaming query restarted from its
checkpoint, an ingest job retried by a scheduler) names each commit with its stable
**writer id** and an increasing **batch id**. The catalog keeps, per table and writer,
the highest batch id committed, in its ``writer_progress`` table: the record is written
in the transaction that swaps the table's pointer, and checked under the same catalog
lock, so two attempts of one batch never both commit. Snapshot expiry, rollback and
renames never touch it.

Example:
    >>> t.append(batch, idempotency=("ingest-7", 42))   # commits batch 42 of writer ingest-7
    >>> t.append(batch, idempotency=("ingest-7", 42))   # raises AlreadyCommittedError
    >>> t.last_committed_batch("ingest-7")
    42
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lakefmt.errors import AlreadyCommittedError, ValidationError

if TYPE_CHECKING:
    import duckdb

    from lakefmt.metadata import TableMetadata

WRITER_ID = "lakefmt.writer-id"
"""Snapshot summary key (SNAP-5): the writer id of an idempotent commit (PROGRESS-2)."""
BATCH_ID = "lakefmt.batch-id"
"""Snapshot summary key (SNAP-5): the batch id of an idempotent commit, a decimal integer (PROGRESS-2)."""

MAX_WRITER_ID_LENGTH = 256
PROGRESS_COMPLETE_KEY = "writer-progress"
"""``lakefmt_catalog`` key whose row says ``writer_progress`` holds every idempotent commit (PROGRESS-1)."""


@dataclass(frozen=True)
class WriterBatch:
    """Batch ``batch_id`` of writer ``writer_id`` (PROGRESS-2).

    A writer's batch ids on one table must increase: a commit whose batch id is not
    above the writer's last committed one is a replay and commits nothing (PROGRESS-3).
    """

    writer_id: str
    batch_id: int

    def __post_init__(self) -> None:
        w, b = self.writer_id, self.batch_id
        if not isinstance(w, str) or not 0 < len(w) <= MAX_WRITER_ID_LENGTH or not w.isprintable():
            raise ValidationError(f"writer id {w!r} is invalid: use 1 to {MAX_WRITER_ID_LENGTH} printable "
                                  "characters that stay the same across restarts of the writer (PROGRESS-2)")
        if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < 2**63:
            raise ValidationError(f"batch id {b!r} of writer {w!r} is invalid: use an integer from 0 to "
                                  "2**63-1 that increases with every batch (PROGRESS-2)")

    @classmethod
    def of(cls, value: WriterBatch | tuple[str, int]) -> WriterBatch:
        """A :class:`WriterBatch`, or ``(writer_id, batch_id)``, validated."""
        if isinstance(value, WriterBatch):
            return value
        if not isinstance(value, tuple) or len(value) != 2:
            raise ValidationError(f"idempotency must be (writer_id, batch_id), got {value!r}")
        return cls(value[0], value[1])

    def summary(self) -> dict[str, str]:
        """The snapshot summary keys of this commit (PROGRESS-2)."""
        return {WRITER_ID: self.writer_id, BATCH_ID: str(self.batch_id)}

    def check(self, last_committed: int | None, *, where: str) -> None:
        """Raise :class:`AlreadyCommittedError` if ``last_committed`` (read from ``where``) is not below this batch."""
        if last_committed is not None and last_committed >= self.batch_id:
            raise AlreadyCommittedError(
                f"writer {self.writer_id!r} already committed batch {last_committed} to this table ({where}); "
                f"batch {self.batch_id} is a replay and was not committed again (PROGRESS-3)",
                writer_id=self.writer_id, batch_id=self.batch_id, last_committed=last_committed)

    def check_history(self, base: TableMetadata) -> None:
        """The snapshot-history form of the check, for commits made without ``writer_progress`` (PROGRESS-3)."""
        self.check(last_batch_in_history(base, self.writer_id), where="snapshot history")


def last_batch_in_history(base: TableMetadata, writer_id: str) -> int | None:
    """The batch id of the writer's newest snapshot among the current snapshot's ancestors, if any."""
    for snap in base.iter_ancestors(base.current_snapshot_id):  # history files only if the walk gets there
        if snap.summary.get(WRITER_ID) == writer_id and BATCH_ID in snap.summary:
            try:
                return int(snap.summary[BATCH_ID])
            except ValueError:
                continue  # not written by an idempotent commit (SNAP-5 keys are free-form)
    return None


# -- the catalog's writer_progress table (PROGRESS-1, PROGRESS-3) --------------------------------------
# Each function runs inside a catalog session (CAT-6): ``con`` is its connection.

_FROM_COMMIT_LOG = f"""
    SELECT table_uuid, writer_id, max(batch_id) AS batch_id, arg_max(snapshot_id, batch_id) AS snapshot_id,
           arg_max(committed_at, batch_id) AS committed_at
    FROM (SELECT table_uuid, json_extract_string(summary, '$."{WRITER_ID}"') AS writer_id,
                 TRY_CAST(json_extract_string(summary, '$."{BATCH_ID}"') AS BIGINT) AS batch_id,
                 snapshot_id, committed_at
          FROM commit_log WHERE summary LIKE '%"{BATCH_ID}"%' {{where}})
    WHERE writer_id IS NOT NULL AND batch_id IS NOT NULL
    GROUP BY table_uuid, writer_id"""


def last_committed_batch(con: duckdb.DuckDBPyConnection, table_uuid: str, writer_id: str, *,
                         migrate: bool) -> int | None:
    """The writer's last committed batch id on the table, from ``writer_progress`` (PROGRESS-1).

    In a catalog file whose ``writer_progress`` was not yet filled from the commit log
    (it predates the table), ``migrate=True`` fills it first (PROGRESS-1); a reader
    (``migrate=False``) reads the commit log instead and writes nothing.
    """
    if not _progress_complete(con):
        if not migrate:
            row = con.execute(f"SELECT batch_id FROM ({_FROM_COMMIT_LOG.format(where='AND table_uuid = ?')}) "
                              "WHERE writer_id = ?", [table_uuid, writer_id]).fetchone()
            return None if row is None else int(row[0])
        fill_from_commit_log(con)
    row = con.execute("SELECT batch_id FROM writer_progress WHERE table_uuid = ? AND writer_id = ?",
                      [table_uuid, writer_id]).fetchone()
    return None if row is None else int(row[0])


def record_batch(con: duckdb.DuckDBPyConnection, table_uuid: str, batch: WriterBatch, snapshot_id: int | None,
                 now: datetime) -> None:
    """Record ``batch`` as the writer's last committed one, inside the swap's transaction (PROGRESS-3)."""
    con.execute(
        "INSERT INTO writer_progress VALUES (?, ?, ?, ?, ?) ON CONFLICT (table_uuid, writer_id) DO UPDATE SET "
        "batch_id = excluded.batch_id, snapshot_id = excluded.snapshot_id, committed_at = excluded.committed_at",
        [table_uuid, batch.writer_id, batch.batch_id, snapshot_id, now])


def fill_from_commit_log(con: duckdb.DuckDBPyConnection) -> None:
    """One-time migration: ``writer_progress`` from the summaries of every commit logged so far (PROGRESS-1)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"INSERT OR IGNORE INTO writer_progress {_FROM_COMMIT_LOG.format(where='')}")
        con.execute("INSERT OR IGNORE INTO lakefmt_catalog VALUES (?, 'complete')", [PROGRESS_COMPLETE_KEY])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _progress_complete(con: duckdb.DuckDBPyConnection) -> bool:
    return con.execute("SELECT 1 FROM lakefmt_catalog WHERE key = ?", [PROGRESS_COMPLETE_KEY]).fetchone() is not None
