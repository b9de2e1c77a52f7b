"""The streaming sink: one snapshot per micro-batch, exactly once (spec/spark.md, SPARK-14..SPARK-17).

Spark calls ``streamWriter()`` on the driver twice per micro-batch: once for the writer
its tasks use, once for the writer that commits. Each call takes its own leased writer
token; tasks write with the first, the commit releases both.

Exactly-once: Spark's checkpoint records a batch as done only after the sink's
commit returned. A crash in between makes Spark replay the batch after a restart, with
the same batch id and the same rows. Every snapshot of the sink carries the writer's
stable id (the ``writer-id`` option, or else the streaming query's id, which survives
restarts from the checkpoint) and the batch id: it is an idempotent commit of the core
(PROGRESS-1..4). A batch whose id is not above the writer's last committed one, as the
catalog records it (snapshot expiry does not remove that record), is a replay: it
commits nothing and its files are deleted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from lakefmt.errors import AlreadyCommittedError, ValidationError, WriteLeaseLostError
from lakefmt.idempotency import WriterBatch
from lakefmt.spark.commit import (
    JOB_ID,
    commit_files,
    delete_files,
    files_of,
    release_tokens,
    tokens_of,
)
from lakefmt.spark.job_leases import check_job_lease
from lakefmt.spark.options import lowered
from lakefmt.spark.types import spark_arrow_schema
from lakefmt.spark.writer import LakefmtCommitMessage, WriteJob, abort_job, job_committed, write_task

try:  # pyspark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    ARROW_STREAM_WRITES = True
except ImportError:  # pragma: no cover - pyspark 4.0 hands stream writers rows
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase  # type: ignore[assignment]

    ARROW_STREAM_WRITES = False

log = logging.getLogger(__name__)


def writer_id_option(options: dict[str, str]) -> tuple[str | None, str | None]:
    """The ``writer-id`` option, and a fallback id derived from the ``checkpointLocation`` option."""
    opts = lowered(options)
    checkpoint = opts.get("checkpointlocation")
    fallback = "checkpoint-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:16] if checkpoint else None
    return opts.get("writer-id") or None, fallback


class LakefmtStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """``stream.writeStream.format("lakefmt")``: append (or, in complete mode, overwrite) per micro-batch."""

    def __init__(self, job: WriteJob, spark_schema: StructType, *, overwrite: bool, writer_id: str | None,
                 fallback_writer_id: str | None = None) -> None:
        self.job = job
        self.spark_schema = spark_schema
        self.overwrite = overwrite
        self.writer_id = writer_id
        self.fallback_writer_id = fallback_writer_id

    def write(self, iterator: Iterator[Any]) -> LakefmtCommitMessage:
        batches = iterator if ARROW_STREAM_WRITES else _rows_to_batches(iterator, self.spark_schema)
        return write_task(self.job, batches)

    def _writer_id(self, messages: Sequence[WriterCommitMessage | None]) -> str | None:
        """The option; else the streaming query id the tasks saw (stable across restarts); else the checkpoint's."""
        query_ids = sorted({m.query_id for m in messages if isinstance(m, LakefmtCommitMessage) and m.query_id})
        return self.writer_id or (query_ids[0] if query_ids else None) or self.fallback_writer_id

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit micro-batch ``batchId`` as one snapshot, unless it is a replay (SPARK-14, SPARK-15)."""
        table = self.job.ref.load()
        files = files_of(messages)
        try:
            writer_id = self._writer_id(messages)
            if writer_id is None:
                if files:
                    raise ValidationError("the streaming sink needs a stable writer id: set "
                                          ".option('writer-id', ...) or a checkpointLocation option")
                return
            job_ids = sorted({m.job_id for m in messages if isinstance(m, LakefmtCommitMessage)})
            summary = {JOB_ID: ",".join(job_ids)}
            try:
                try:
                    check_job_lease(self.job.token)
                except WriteLeaseLostError:
                    delete_files(table, files)
                    raise
                snapshot = commit_files(table, files, overwrite=self.overwrite, summary=summary,
                                        writer_batch=WriterBatch(writer_id, batchId))
            except AlreadyCommittedError as exc:
                if not any(job_committed(table, j) for j in job_ids):  # a replay wrote new files: garbage
                    delete_files(table, files)
                log.info("%s: nothing committed", exc)
                return
            if snapshot is not None:
                log.info("batch %s of writer %s: snapshot %s", batchId, writer_id, snapshot.snapshot_id)
        finally:
            release_tokens(table, [self.job.token, *tokens_of(messages)])
        _test_crash_after_commit(self.job.hooks, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delete the batch's files, unless this attempt of the batch committed them (SPARK-16)."""
        job_ids = {m.job_id for m in messages if isinstance(m, LakefmtCommitMessage)}
        table = self.job.ref.load()
        abort_job(self.job, messages, committed=any(job_committed(table, j) for j in sorted(job_ids)))


def _test_crash_after_commit(hooks: dict[str, str], batch_id: int) -> None:
    """Test seam: fail once after batch N committed, before Spark records it in the checkpoint."""
    target = hooks.get("crash-after-commit-batch")
    marker = hooks.get("marker")
    if target is None or int(target) != batch_id or not marker or os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write(f"crashed after committing batch {batch_id}\n")
    raise RuntimeError(f"lakefmt.test.crash-after-commit-batch: batch {batch_id} committed, "
                       "failing before Spark records it")


def _rows_to_batches(rows: Iterator[Any], spark_schema: StructType, chunk: int = 65_536) -> Iterator[pa.RecordBatch]:
    """Rows (pyspark 4.0 stream writers) as Arrow batches of the DataFrame's schema."""
    schema = spark_arrow_schema(spark_schema)
    buffer: list[dict[str, Any]] = []
    for row in rows:
        buffer.append(row.asDict())
        if len(buffer) >= chunk:
            yield pa.RecordBatch.from_pylist(buffer, schema=schema)
            buffer = []
    if buffer:
        yield pa.RecordBatch.from_pylist(buffer, schema=schema)
