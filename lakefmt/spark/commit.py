"""Driver-side commit and abort of Spark writes (spec/spark.md, SPARK-10..SPARK-17).

A Spark job or micro-batch becomes exactly one snapshot, tagged in its summary
(SNAP-5) with what wrote it:

* ``lakefmt.spark.job-id``: the job's id; a job commits at most once, and ``abort``
  deletes files only of a job that did not commit (SPARK-12).
* ``lakefmt.writer-id`` and ``lakefmt.batch-id``: a streaming writer's stable id and the
  micro-batch the snapshot holds. A micro-batch is an idempotent commit of the core
  (:class:`~lakefmt.idempotency.WriterBatch`, PROGRESS-1..4): a batch whose id is not
  above the writer's last committed batch commits nothing (SPARK-15). The core checks the
  catalog's writer progress, which snapshot expiry never removes, under the catalog lock
  in the session that swaps the pointer, and records the batch in the swap's transaction:
  two attempts of one batch can never both commit.

The job check is a requirement of the commit (:class:`~lakefmt.commit.FileChange`), so the
commit protocol re-checks it against every base it rebuilds on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakefmt.commit import FileChange
from lakefmt.errors import AlreadyCommittedError
from lakefmt.expressions import ALWAYS_TRUE, bind
from lakefmt.idempotency import BATCH_ID, WRITER_ID, WriterBatch
from lakefmt.leases import Leases
from lakefmt.manifest import DataFile
from lakefmt.spark.job_leases import end_job_leases

if TYPE_CHECKING:
    from lakefmt.metadata import Snapshot, TableMetadata
    from lakefmt.table import Table

log = logging.getLogger(__name__)

__all__ = ["BATCH_ID", "JOB_ID", "WRITER_ID", "AlreadyCommittedError", "AssertJobNotCommitted", "commit_files",
           "delete_files", "files_of", "job_committed", "release_tokens", "tokens_of"]

JOB_ID = "lakefmt.spark.job-id"


@dataclass(frozen=True)
class AssertJobNotCommitted:
    """No snapshot in the base's history carries this job id (SPARK-12)."""

    job_id: str

    def check(self, base: TableMetadata) -> None:
        for snap in base.ancestors(base.current_snapshot_id):
            if self.job_id in snap.summary.get(JOB_ID, "").split(","):
                raise AlreadyCommittedError(f"job {self.job_id} is already committed (snapshot {snap.snapshot_id})")


def commit_files(table: Table, files: Sequence[DataFile], *, overwrite: bool, summary: dict[str, str],
                 requirement: AssertJobNotCommitted | None = None,
                 writer_batch: WriterBatch | None = None) -> Snapshot | None:
    """One snapshot adding ``files`` (and, to overwrite, removing every live file) (SPARK-10, SPARK-11).

    Returns None when there is nothing to commit (COMMIT-18). Appends are rebased by the
    commit protocol when another writer wins the race; an overwrite fails with
    :class:`CommitConflictError` if a file was added concurrently (COMMIT-10). Raises
    :class:`AlreadyCommittedError` for a job (``requirement``) or a streaming writer's
    batch (``writer_batch``, SPARK-15) that is already committed.

    ``files`` are never deleted here, even when the commit fails: a second commit of a job
    names the very files its first commit made live. The caller (``abort``) deletes them
    once it knows the job did not commit (SPARK-12).
    """
    table.refresh()
    removed = table.plan_files() if overwrite else []
    if not files and not removed:
        if requirement is not None:
            requirement.check(table.metadata)  # a replay of an empty job is still a replay
        return None
    change = FileChange(
        "overwrite" if overwrite else "append", added=list(files), removed=removed,
        planned_snapshot_id=table.metadata.current_snapshot_id if overwrite else None,
        conflict_filter=bind(ALWAYS_TRUE, table.schema()) if overwrite else None,
        summary=dict(summary), requirements=[requirement] if requirement is not None else [],  # type: ignore[list-item]
        writer_batch=writer_batch)
    return table.commit_change(change)


def job_committed(table: Table, job_id: str) -> bool:
    """Whether a commit of ``job_id`` reached the catalog: its commit log outlives snapshot expiry (CAT-5)."""
    return any(job_id in str(r.summary.get(JOB_ID, "")).split(",") for r in table.catalog.commit_log(table.identifier))


def delete_files(table: Table, files: Sequence[DataFile]) -> None:
    """Best-effort delete of uncommitted data files (COMMIT-14)."""
    try:
        table.io.delete_many([f"{table.location}/{f.path}" for f in files])
    except Exception as exc:  # noqa: BLE001 - cleanup never hides the outcome
        log.warning("could not delete %d uncommitted files of %s: %s", len(files), table.name, exc)


def release_tokens(table: Table, tokens: Sequence[str]) -> None:
    """End write-intent leases (CAT-10); never raises, since it runs after commits (COMMIT-15)."""
    try:
        end_job_leases(tokens)
        leases = Leases(table.catalog)
        for token in sorted(set(tokens)):
            leases.release(table.metadata.table_uuid, "write", [token], owner=token)
        table.release_write_token()
    except Exception as exc:  # noqa: BLE001
        log.warning("could not release write leases %s of %s: %s", sorted(set(tokens)), table.name, exc)


def files_of(messages: Sequence[object | None]) -> list[DataFile]:
    return [f for m in messages if m is not None for f in getattr(m, "files", ())]


def tokens_of(messages: Sequence[object | None]) -> list[str]:
    return [t for m in messages if m is not None for t in [getattr(m, "token", None)] if t]

