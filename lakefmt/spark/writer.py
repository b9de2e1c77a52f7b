"""Batch writes through Spark: executors write data files, the driver commits one snapshot (spec/spark.md, SPARK-8..SPARK-13).

``writer()`` runs on the driver: it resolves the table, refuses an incompatible
DataFrame schema before any file is written (SPARK-9), takes a write-intent lease
for a fresh per-job writer token (CAT-10), and returns a writer holding a
:class:`WriteJob` — plain data, no catalog, no Table. Spark pickles that writer to the
executors, whose ``write()`` turns Arrow batches into data files named with the token
(WRITE-1..WRITE-7, LAYOUT-6) and returns their descriptions in a commit message;
the same writer, back on the driver, commits every message as one snapshot tagged
with the job id, or aborts (:mod:`lakefmt.spark.commit`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from lakefmt.errors import ValidationError, WriteLeaseLostError
from lakefmt.manifest import DataFile
from lakefmt.partitioning import PartitionSpec
from lakefmt.properties import (
    COMPRESSION_LEVEL,
    MIN_COMPRESSION_SAVING,
    PAGE_SIZE_BYTES,
    ROW_GROUP_ROWS,
    TARGET_FILE_SIZE,
    WRITE_LEASE_SECONDS,
    int_property,
    number_property,
)
from lakefmt.schema import Schema
from lakefmt.sorting import SortOrder
from lakefmt.spark.commit import (
    JOB_ID,
    AlreadyCommittedError,
    AssertJobNotCommitted,
    commit_files,
    delete_files,
    files_of,
    job_committed,
    release_tokens,
    tokens_of,
)
from lakefmt.spark.job_leases import check_job_lease, lease_job
from lakefmt.spark.options import DEFAULT_BUFFER_SIZE, TableRef, int_option, test_hooks
from lakefmt.spark.types import check_writable, from_spark_arrow
from lakefmt.write import WriteOptions, conform, write_data_files

if TYPE_CHECKING:
    from lakefmt.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriteJob:
    """What a write task needs, as plain data: where, what schema and layout, which token (SPARK-8)."""

    ref: TableRef
    location: str
    table_uuid: str
    schema_json: str
    spec_json: str
    sort_order_json: str
    options: WriteOptions
    job_id: str
    buffer_size: int = DEFAULT_BUFFER_SIZE
    hooks: dict[str, str] = field(default_factory=dict)

    @property
    def token(self) -> str:
        assert self.options.token is not None
        return self.options.token


@dataclass
class LakefmtCommitMessage(WriterCommitMessage):
    """What one write task wrote: data file descriptions, ready for a manifest (SPARK-8)."""

    job_id: str
    token: str
    files: tuple[DataFile, ...]
    partition_id: int = 0
    attempt: int = 0
    query_id: str | None = None  # streaming: the query's stable id, from the task's local properties


def new_job(table: Table, ref: TableRef, spark_schema: StructType, options: dict[str, str]) -> WriteJob:
    """On the driver: check the DataFrame schema, lease a fresh writer token, describe the job (SPARK-9, CAT-10)."""
    meta = table.metadata
    check_writable(spark_schema, meta.schema)
    props = meta.properties
    ttl = int_option(options, "lease-seconds", int_property(props, WRITE_LEASE_SECONDS))
    token = lease_job(table, ttl)  # held and renewed on the driver until the commit or abort (SPARK-13)
    write_options = WriteOptions(
        target_file_size=int_option(options, "target-file-size", int_property(props, TARGET_FILE_SIZE)),
        compression_level=int_property(props, COMPRESSION_LEVEL), row_group_rows=int_property(props, ROW_GROUP_ROWS),
        min_compression_saving=number_property(props, MIN_COMPRESSION_SAVING),
        page_size_bytes=int_property(props, PAGE_SIZE_BYTES), kind="part", token=token)
    return WriteJob(
        ref=ref, location=meta.location, table_uuid=meta.table_uuid, schema_json=json.dumps(meta.schema.to_json()),
        spec_json=json.dumps(meta.spec.to_json()), sort_order_json=json.dumps(meta.sort_order.to_json()),
        options=write_options, job_id=uuid.uuid4().hex,
        buffer_size=int_option(options, "buffer-size", DEFAULT_BUFFER_SIZE), hooks=test_hooks(options))


def write_task(job: WriteJob, batches: Iterator[pa.RecordBatch]) -> LakefmtCommitMessage:
    """On an executor: Arrow batches -> data files of the table (SPARK-8; WRITE-1..WRITE-7).

    Rows are buffered up to ``job.buffer_size`` bytes, then conformed to the table
    schema (WRITE-3), split by partition (WRITE-4), sorted by the table's sort order and
    written in files that roll at the target size (WRITE-5), with the encodings every
    writer chooses (WRITE-7, :mod:`lakefmt.encoding`). If the task fails, the
    files it wrote are deleted (best effort); a killed task's files carry the job's
    leased token and are left to orphan removal (CAT-10, MAINT-8).
    """
    from pyspark import TaskContext  # only meaningful inside a Spark task

    context = TaskContext.get()
    io = job.ref.io()
    schema = Schema.from_json(json.loads(job.schema_json))
    spec = PartitionSpec.from_json(json.loads(job.spec_json))
    order = SortOrder.from_json(json.loads(job.sort_order_json))
    written: list[DataFile] = []
    buffer: list[pa.RecordBatch] = []
    buffered = 0

    def flush() -> None:
        nonlocal buffer, buffered
        if buffer:
            table = conform(from_spark_arrow(pa.Table.from_batches(buffer), schema), schema)
            buffer, buffered = [], 0
            written.extend(write_data_files(io, job.location, table, schema, spec, order, job.options))

    try:
        for batch in batches:
            if batch.num_rows:
                buffer.append(batch)
                buffered += batch.nbytes
                if buffered >= job.buffer_size:
                    flush()
        flush()
        _test_failure(job.hooks, context)
    except BaseException:
        io.delete_many([f"{job.location}/{f.path}" for f in written])
        raise
    return LakefmtCommitMessage(
        job_id=job.job_id, token=job.token, files=tuple(written),
        partition_id=context.partitionId() if context else 0, attempt=context.attemptNumber() if context else 0,
        query_id=context.getLocalProperty("sql.streaming.queryId") if context else None)


def _test_failure(hooks: dict[str, str], context: Any) -> None:
    """Test seams (``lakefmt.test.*`` options): fail a task after it wrote its files."""
    if not hooks or context is None:
        return
    first = hooks.get("fail-first-attempt")
    if first and context.attemptNumber() == 0 and context.partitionId() == 0:
        if first == "crash":
            os._exit(17)  # a killed task: no cleanup, no message
        raise RuntimeError("lakefmt.test.fail-first-attempt: failing attempt 0 of partition 0")
    if hooks.get("fail-always") and context.partitionId() == 0:
        raise RuntimeError("lakefmt.test.fail-always: failing partition 0")


class LakefmtBatchWriter(DataSourceArrowWriter):
    """``df.write.format("lakefmt")``: append, or overwrite the whole table (SPARK-10, SPARK-11)."""

    def __init__(self, job: WriteJob, *, overwrite: bool) -> None:
        self.job = job
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LakefmtCommitMessage:
        return write_task(self.job, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """One snapshot for the whole job, tagged with its id; never raises after the swap (COMMIT-15)."""
        table = self.job.ref.load()
        files = files_of(messages)
        if table.metadata.table_uuid != self.job.table_uuid:
            delete_files(table, files)
            raise ValidationError(f"table {table.name} was dropped and re-created during the write; "
                                  "nothing was committed")
        try:
            try:
                check_job_lease(self.job.token)
            except WriteLeaseLostError:
                delete_files(table, files)
                raise
            snapshot = commit_files(table, files, overwrite=self.overwrite, requirement=AssertJobNotCommitted(
                self.job.job_id), summary={JOB_ID: self.job.job_id})
        except AlreadyCommittedError:
            log.info("job %s was already committed to %s", self.job.job_id, table.name)
            snapshot = None
        finally:
            release_tokens(table, [self.job.token, *tokens_of(messages)])
        if snapshot is not None:
            log.info("job %s committed snapshot %s to %s", self.job.job_id, snapshot.snapshot_id, table.name)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the job's files, unless the job did commit (SPARK-12)."""
        abort_job(self.job, messages)


def abort_job(job: WriteJob, messages: Sequence[WriterCommitMessage | None], *, committed: bool | None = None
              ) -> None:
    """Delete the files named in ``messages`` unless ``job`` committed; release its leases."""
    table = job.ref.load()
    try:
        if committed is None:
            committed = job_committed(table, job.job_id)
        if committed:
            log.info("abort of job %s after it committed: its files stay", job.job_id)
        else:
            delete_files(table, files_of(messages))
    finally:
        release_tokens(table, [job.token, *tokens_of(messages)])
