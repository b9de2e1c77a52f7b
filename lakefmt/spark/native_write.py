"""Writes at native speed: Spark's own Parquet writer writes, the driver commits one snapshot (spec/spark.md).

:func:`write_native` keeps the rows in the JVM. On the driver it checks the DataFrame
schema (SPARK-9), takes the job's write lease (SPARK-13) and builds one Spark plan:

* the rows conformed to the table schema with Spark expressions (WRITE-3): casts that
  widen, nulls for missing optional columns, a task error for a null in a required
  column or a date or timestamp outside TYPE-10's range, each column carrying its field
  id as ``parquet.field.id`` metadata (WRITE-1);
* one column per partition field holding the transform's value exactly (PART-2 ...
  PART-5; :mod:`lakefmt.spark.native_columns`): Spark expressions where Spark has an exact equivalent (identity,
  year/month/day/hour, truncate of integers, strings and binary), and otherwise an Arrow
  UDF that runs lakefmt's own transform (``bucket[N]``, Iceberg's murmur3 that Spark's
  ``hash`` is not; truncate of decimals; identity of floats);
* clustered by those columns (AQE ``rebalance``) and sorted by them and the table's sort
  order, then written by ``df.write.partitionBy(...).parquet`` (ZSTD) into a staging
  folder ``data/_staging-{token}-{r}`` under the table location (SPARK-27).

The driver then lists the written files, reads their footers for the manifest entries
(WRITE-6), moves each to its LAYOUT-6 name in its PART-7 folder, makes them durable
(COMMIT-20) and commits them as one snapshot tagged with the job id, exactly as
:class:`~lakefmt.spark.writer.LakefmtBatchWriter` does (SPARK-10 ... SPARK-12). If
anything fails before the commit, every written file is deleted.

Example:
    >>> import lakefmt.spark
    >>> lakefmt.spark.write_native(df, "artemis.downlinks", catalog="warehouse")
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
from pyspark.sql import functions as F

from lakefmt.errors import CommitStateUnknownError, ValidationError
from lakefmt.footer import data_file_from_footer
from lakefmt.manifest import DataFile
from lakefmt.properties import COMPRESSION_LEVEL, TARGET_FILE_SIZE, WRITE_LEASE_SECONDS, int_property
from lakefmt.spark.commit import (
    JOB_ID,
    AlreadyCommittedError,
    AssertJobNotCommitted,
    commit_files,
    job_committed,
    release_tokens,
)
from lakefmt.spark.job_leases import check_job_lease, lease_job
from lakefmt.spark.native_columns import (
    conformed_columns,
    decode_partition_value,
    partition_column,
    quoted,
    refusal,
    sort_keys,
)
from lakefmt.spark.types import check_writable, is_carried
from lakefmt.threads import thread_map

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog
    from lakefmt.metadata import Snapshot
    from lakefmt.partitioning import PartitionField, PartitionSpec
    from lakefmt.schema import Schema
    from lakefmt.table import Table

log = logging.getLogger(__name__)

__all__ = ["write_native"]

_SESSION_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96 (TYPE-9)
                 "spark.sql.parquet.fieldId.write.enabled": "true"}           # WRITE-1


def write_native(df: Any, table: Table | str, *, catalog: Catalog | str | None = None, mode: str = "append",
                 distribution: str = "hash", lease_seconds: int | None = None,
                 max_records_per_file: int | None = None) -> Snapshot | None:
    """Write ``df`` into ``table`` with Spark's own Parquet writer, as one snapshot (SPARK-27 ... SPARK-30).

    ``table`` is a :class:`~lakefmt.Table` or ``"namespace.table"`` in ``catalog`` (a
    :class:`~lakefmt.Catalog` or a warehouse location). ``mode`` is ``"append"`` or
    ``"overwrite"`` (every row of the table is replaced, SPARK-11). ``distribution="hash"``
    clusters rows by partition first (one file per partition value and Spark task of the
    shuffle); ``"none"`` writes the DataFrame's partitions as they are.
    ``max_records_per_file`` caps files (default: ``write.target-file-size-bytes`` over the
    table's current bytes per row; no cap for an empty table).

    Returns the committed snapshot, or None if nothing was written. Tables with a ``time``
    column or a decimal wider than 38 digits (types Spark's writer cannot store, SPARK-27)
    are written through ``format("lakefmt")`` instead, and None is returned.

    Raises:
        SchemaMismatchError: the DataFrame's schema cannot be stored (before anything is
            written), or a task found a null in a required column (nothing committed).
        ValueOutOfRangeError: a date or timestamp outside the years 0001-9999 (TYPE-10).
    """
    if mode not in ("append", "overwrite"):
        raise ValidationError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    if distribution not in ("hash", "none"):
        raise ValidationError(f"distribution must be 'hash' or 'none', got {distribution!r}")
    catalog_, identifier = _resolve(table, catalog)
    own = catalog_.load_table(identifier)  # release_tokens ends this handle's lease, never the caller's
    meta = own.metadata
    check_writable(df.schema, meta.schema)  # SPARK-9: before any lease or file
    if any(is_carried(f.type) for f in meta.schema.fields):
        log.info("%s has a time or wide decimal column: writing through format('lakefmt')", own.name)
        _write_through_source(df, own, mode)
        snapshot = None
    else:
        ttl = lease_seconds if lease_seconds is not None else int_property(meta.properties, WRITE_LEASE_SECONDS)
        token = lease_job(own, ttl)  # held and renewed on the driver until the commit or abort (SPARK-13)
        try:
            files = _write_files(df, own, token, distribution, max_records_per_file)
            snapshot = _commit(own, files, uuid.uuid4().hex, token, overwrite=mode == "overwrite")
        finally:
            release_tokens(own, [token])
    if not isinstance(table, str):
        table.refresh()
    return snapshot


def _resolve(table: Table | str, catalog: Catalog | str | None) -> tuple[Catalog, str | tuple[str, str]]:
    if not isinstance(table, str):
        return table.catalog, table.identifier
    if catalog is None:
        raise ValidationError("say which catalog: write_native(df, 'namespace.table', catalog=...)")
    if isinstance(catalog, str):
        from lakefmt.catalog import Catalog

        catalog = Catalog(catalog)
    return catalog, table


def _write_files(df: Any, table: Table, token: str, distribution: str, max_records: int | None) -> list[DataFile]:
    """Spark writes into the staging folder; the files get their LAYOUT-6 names; every one is deleted on failure."""
    meta = table.metadata
    schema, spec = meta.schema, meta.spec
    staging = f"{table.location}/data/_staging-{token}-{uuid.uuid4().hex[:16]}"
    moved: list[str] = []
    started = time.perf_counter()
    try:
        out = df.select(*conformed_columns(df, schema))
        parts = [f"__lakefmt_p{i}" for i in range(len(spec.fields))]
        if parts:
            out = _partitioned(out, spec, schema, parts, clustered=distribution == "hash")
        keys, sorted_fully = sort_keys(meta.sort_order, schema)
        if parts or keys:
            out = out.sortWithinPartitions(*parts, *keys)
        _spark_write(out, table, staging, parts, max_records)
        wrote = time.perf_counter()
        files = _finish_files(table, staging, len(parts), token, sorted_fully, moved)
        log.info("native write of %s: Spark %.2f s, footers, moves and fsync %.2f s, %d files", table.name,
                 wrote - started, time.perf_counter() - wrote, len(files))
        return files
    except BaseException as exc:  # noqa: BLE001 - re-raised, as the lakefmt error a task refused with if any
        table.io.delete_many(moved)
        raise refusal(exc) or exc
    finally:
        _remove_tree(table, staging)


def _partitioned(out: Any, spec: PartitionSpec, schema: Schema, parts: list[str], *, clustered: bool) -> Any:
    """``out`` with one column per partition field, clustered by them first if asked (SPARK-28).

    An identity field clusters by its source column, and its partition column is added after
    the shuffle, which then moves no extra bytes for it.
    """
    fields = list(zip(spec.fields, parts))
    before = [(pf, p) for pf, p in fields if not clustered or pf.transform.name != "identity"]
    out = out.select("*", *[partition_column(pf, schema).alias(p) for pf, p in before])
    if clustered:
        keys = [p if (pf, p) in before else F.col(quoted(_source_name(schema, pf))) for pf, p in fields]
        out = out.hint("rebalance", *keys)
        out = out.select("*", *[partition_column(pf, schema).alias(p) for pf, p in fields if (pf, p) not in before])
    return out


def _source_name(schema: Schema, pf: PartitionField) -> str:
    field = schema.field_by_id(pf.source_id)
    assert field is not None
    return field.name


def _commit(table: Table, files: list[DataFile], job_id: str, token: str, *, overwrite: bool) -> Snapshot | None:
    """One snapshot tagged with the job id (SPARK-10); an uncommitted job's files are deleted (SPARK-12, SPARK-30)."""
    location, table_uuid = table.location, table.metadata.table_uuid

    def discard() -> None:  # COMMIT-14, best effort: never hides the error being raised
        try:
            table.io.delete_many([f"{location}/{f.path}" for f in files])
        except Exception as exc:  # noqa: BLE001
            log.warning("could not delete %d uncommitted files of %s: %s", len(files), table.name, exc)

    try:
        table.refresh()
        if table.metadata.table_uuid != table_uuid:
            raise ValidationError(f"table {table.name} was dropped and re-created during the write; "
                                  "nothing was committed")
        check_job_lease(token)  # COMMIT-19: a lost lease means orphan removal may have taken files
    except BaseException:
        discard()
        raise
    try:
        return commit_files(table, files, overwrite=overwrite, requirement=AssertJobNotCommitted(job_id),
                            summary={JOB_ID: job_id})
    except AlreadyCommittedError:
        return None
    except CommitStateUnknownError:
        raise  # the swap may have happened: the files stay (COMMIT-11)
    except BaseException:
        if not _maybe_committed(table, job_id):
            discard()
        raise


def _maybe_committed(table: Table, job_id: str) -> bool:
    """Whether the commit log shows the job committed; True when that cannot be found out (SPARK-12)."""
    try:
        return job_committed(table, job_id)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not tell whether job %s committed to %s (%s): its files stay", job_id, table.name, exc)
        return True


@contextmanager
def _session_conf(spark: Any) -> Iterator[None]:
    """Set the write's session settings for the duration of the write, then restore them."""
    before = {key: spark.conf.get(key, None) for key in _SESSION_CONF}
    for key, value in _SESSION_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _spark_write(out: Any, table: Table, staging: str, parts: list[str], max_records: int | None) -> None:
    meta = table.metadata
    if max_records is None:
        snap = meta.current_snapshot
        size = int(snap.summary.get("total-files-size", 0)) if snap else 0
        records = int(snap.summary.get("total-records", 0)) if snap else 0
        if size and records:  # WRITE-5, from the bytes per row of the table's files so far
            max_records = max(1, int(int_property(meta.properties, TARGET_FILE_SIZE) * records / size))
    writer = (out.write.mode("errorifexists").format("parquet").option("compression", "zstd")
              .option("parquet.compression.codec.zstd.level", str(int_property(meta.properties, COMPRESSION_LEVEL)))
              .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"))
    if max_records:
        writer = writer.option("maxRecordsPerFile", str(max_records))
    if parts:
        writer = writer.partitionBy(*parts)
    with _session_conf(out.sparkSession):
        writer.save(_hadoop_path(staging))


def _hadoop_path(location: str) -> str:
    if "://" not in location:
        return "file://" + os.path.abspath(location)
    return "s3a://" + location.split("://", 1)[1] if location.startswith("s3://") else location


# -- after Spark: names, footers, durability ---------------------------------------------------

def _finish_files(table: Table, staging: str, n_parts: int, token: str, sorted_fully: bool,
                  moved: list[str]) -> list[DataFile]:
    """Describe each written file from its footer (WRITE-6) and move it to its LAYOUT-6 name."""
    meta, io = table.metadata, table.io
    schema, spec = meta.schema, meta.spec
    types = [t for _, t in spec.partition_type(schema)]
    by_partition: dict[tuple[Any, ...], list[tuple[str, int]]] = {}
    for info in io.list_files(staging):
        rel = info.path[len(staging) + 1:]
        *folders, name = rel.split("/")
        if not name.endswith(".parquet") or name[0] in "._" or any("=" not in f for f in folders):
            continue  # Spark's checksums, markers and leftovers of its own commit protocol
        if len(folders) != n_parts:
            raise ValidationError(f"unexpected file {info.path} in the staging folder of a native write")
        values = tuple(decode_partition_value(f.split("=", 1)[1], t) for f, t in zip(folders, types))
        by_partition.setdefault(values, []).append((info.path, info.size))
    unique = f"part-{token}-{uuid.uuid4().hex[:16]}"  # {kind}-{token}-{r} (LAYOUT-6, CAT-10)
    sort_order_id = meta.sort_order.order_id if sorted_fully and not meta.sort_order.is_unsorted else None
    jobs = []
    for index, values in enumerate(sorted(by_partition, key=repr)):
        folder = "/".join(p for p in ("data", spec.partition_path(values, schema) if n_parts else "") if p)
        for number, (src, size) in enumerate(sorted(by_partition[values])):
            jobs.append((src, size, values, f"{folder}/{unique}-{index:05d}-{number:05d}.parquet"))

    def finish(job: tuple[str, int, tuple[Any, ...], str]) -> DataFile | None:
        src, size, values, rel = job
        with io.open_input(src) as f:
            footer = pq.read_metadata(f)
        if footer.num_rows == 0:
            return None  # WRITE-5: no empty files
        dst = f"{table.location}/{rel}"
        _move(io, src, dst)
        moved.append(dst)
        return data_file_from_footer(rel, values, size, footer, schema, spec, sort_order_id)

    files = [f for f in thread_map(finish, jobs, 8) if f is not None]
    if io.scheme == "file":
        _fsync_all(moved, f"{table.location}/data")  # COMMIT-20
    return files


def _move(io: Any, src: str, dst: str) -> None:
    """A rename on a local disk; on an object store a copy and a delete (the price of Spark's names)."""
    if io.scheme == "file":
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(io.fs_path(src), io.fs_path(dst))
    else:
        io.fs.mv(io.fs_path(src), io.fs_path(dst))


def _fsync_all(paths: Sequence[str], root: str) -> None:
    """Flush the files and every folder between them and ``root`` to stable storage, concurrently."""
    folders: set[str] = set()
    for path in paths:
        folder = os.path.dirname(path)
        while folder.startswith(root) and folder not in folders:
            folders.add(folder)
            folder = os.path.dirname(folder)

    def sync(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    thread_map(sync, [*paths, *sorted(folders)], 8)


def _remove_tree(table: Table, folder: str) -> None:
    try:
        path = table.io.fs_path(folder)
        if table.io.fs.exists(path):
            table.io.fs.rm(path, recursive=True)
    except Exception as exc:  # noqa: BLE001 - cleanup never hides the outcome
        log.warning("could not remove the staging folder %s: %s", folder, exc)


def _write_through_source(df: Any, table: Table, mode: str) -> None:
    """The Python data source path, for the types Spark's Parquet writer cannot store (SPARK-3)."""
    catalog = table.catalog  # a catalog server's URL, or the warehouse of a catalog file
    writer = df.write.format("lakefmt").option("catalog", getattr(catalog, "url", None) or catalog.warehouse)
    writer = writer.mode(mode)
    if getattr(catalog, "token", None):  # the server's token the catalog was opened with (CATHTTP-2)
        writer = writer.option("token", catalog.token)
    if getattr(catalog, "catalog_path", None):
        writer = writer.option("catalog-path", catalog.catalog_path)
    if table.io.storage_options:
        writer = writer.option("storage-options", json.dumps(table.io.storage_options))
    writer.save(table.name)
