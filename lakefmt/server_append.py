"""Appends a catalog server applies: the client's half (spec/catalog-http.md, CATHTTP-17..CATHTTP-20).

Through ``lakefmt serve`` a writer holds no catalog lock. When its compare-and-swap loses
(CATHTTP-10 ``moved``), rebuilding on the new pointer outside any lock and sending the
swap again races the other writers once more: with four writers appending to one table,
such attempts lost again often, and each loss cost a rebuild and a back-off sleep
(COMMIT-13). A local writer instead rebuilds under the catalog lock and then surely
wins (COMMIT-7). An append never conflicts (ROWDEL-10), so the client hands it to the
server, which holds that lock: it names the manifests it already wrote for its new
files, its snapshot id and summary keys, its writer batch and write lease, and the
server commits the append on its current base as a local writer would (CATHTTP-17).

The client does this when opened with ``server_appends=True`` (off by default: the
server then does every contended append's build, in one process). Only a plain append
qualifies: one that adds files and removes none, gives no deletion
vector, and has no precondition on its base (no conflict filter, no requirement such as
a Spark job's, SPARK-12). Everything else (deletes, overwrites, compaction, metadata
changes) keeps rebuilding on the client, which validates it against the commits it
lost to (COMMIT-9, COMMIT-10).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakefmt.commit import SnapshotProducer
from lakefmt.errors import CommitStateUnknownError, LakefmtError
from lakefmt.manifest import ManifestFile
from lakefmt.manifest_cache import read_list
from lakefmt.metadata import TableMetadata, read_metadata

if TYPE_CHECKING:
    from lakefmt.catalog_client import RemoteCatalog
    from lakefmt.commit import Build, _Attempt
    from lakefmt.idempotency import WriterBatch
    from lakefmt.leases import WriteLease

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlindAppend:
    """What a refused attempt of a plain append added: the server needs nothing else (CATHTTP-17)."""

    location: str  # the table's location; manifest paths are relative to it (LAYOUT-2)
    manifests: list[ManifestFile]  # the manifests of the new files, ADDED entries only (COMMIT-3)
    snapshot_id: int
    summary: dict[str, str]  # the operation's own summary keys (SNAP-5), beyond the computed ones

    def body(self, table_uuid: str, expected: str, writer_batch: WriterBatch | None,
             lease_token: str | None) -> dict[str, Any]:
        """The request of CATHTTP-17."""
        return {"table_uuid": table_uuid, "expected": expected,
                "manifests": [{"path": m.path, "spec_id": m.spec_id} for m in self.manifests],
                "snapshot_id": self.snapshot_id, "summary": self.summary,
                "writer_batch": None if writer_batch is None else {"writer_id": writer_batch.writer_id,
                                                                   "batch_id": writer_batch.batch_id},
                "lease_token": lease_token}


def blind_append(build: Build, attempt: _Attempt) -> BlindAppend | None:
    """The plain append ``attempt`` holds, or None if the commit is anything else.

    ``build`` is :meth:`SnapshotProducer.build` for every snapshot-adding commit of a table
    (:meth:`Table.commit_change`); its change says whether the append has preconditions.
    """
    producer = getattr(build, "__self__", None)
    if not isinstance(producer, SnapshotProducer):
        return None
    change = producer.change
    if (change.operation != "append" or not change.added or change.removed or change.deletes
            or change.requirements or change.conflict_filter is not None or change.forget_removed_values):
        return None
    snapshot = attempt.metadata.current_snapshot
    if snapshot is None or snapshot.snapshot_id != producer.snapshot_id:
        return None
    # Its own manifests: written for this snapshot, holding only added files (a merged one holds EXISTING entries).
    own = [m for m in read_list(producer.io, f"{producer.location}/{snapshot.manifest_list}")
           if m.added_snapshot_id == snapshot.snapshot_id and m.added_files_count
           and not m.existing_files_count and not m.deleted_files_count]
    if sum(m.added_files_count for m in own) != len(change.added):
        return None
    return BlindAppend(producer.location, own, snapshot.snapshot_id, dict(change.summary))


def append_on_server(catalog: RemoteCatalog, namespace: str, name: str, build: Build, attempt: _Attempt, *,
                     expected: str, writer_batch: WriterBatch | None,
                     lease: WriteLease | None) -> tuple[TableMetadata, str] | None:
    """Have the server commit the refused append ``attempt`` (CATHTTP-17); None if it cannot be.

    On success the files of the refused attempt and its manifests are deleted, as the
    server committed its own (COMMIT-14, CATHTTP-20). A refusal deletes the attempt's files
    and raises its error (the caller deletes the operation's other files); without an
    answer every file is kept and :class:`CommitStateUnknownError` is raised (CATHTTP-14).
    """
    append = blind_append(build, attempt)
    if append is None:
        return None
    body = append.body(attempt.base.table_uuid, expected, writer_batch, None if lease is None else lease.token)
    try:
        answer = catalog._server_append(namespace, name, body)
    except CommitStateUnknownError:
        raise  # every file is kept (CATHTTP-14, COMMIT-11)
    except LakefmtError:
        catalog.io.delete_many(attempt.files)  # refused: nothing of the attempt was committed (COMMIT-14)
        raise
    if answer is None:  # a server without the endpoint: the client rebuilds as before
        return None
    location = str(answer["metadata_location"])
    try:  # committed: nothing after this may fail the append (COMMIT-15)
        catalog.io.delete_many(attempt.files + [f"{append.location}/{m.path}" for m in append.manifests])
    except Exception as exc:  # noqa: BLE001
        log.warning("could not delete the superseded files of an append to %s.%s: %s", namespace, name, exc)
    try:
        return read_metadata(catalog.io, location), location
    except Exception as exc:  # noqa: BLE001
        log.warning("append to %s.%s committed at %s, but its metadata could not be read back (%s); the table "
                    "handle keeps its previous state until it is refreshed", namespace, name, location, exc)
        return attempt.base, attempt.expected
