"""Appends the catalog server applies itself: ``POST .../append`` (spec/catalog-http.md, CATHTTP-17..CATHTTP-19).

A writer served over HTTP holds no catalog lock. When its compare-and-swap loses
(CATHTTP-10 ``moved``), rebuilding on the new pointer and sending the swap again races
the other writers once more, and with several of them it often loses again. A local
writer rebuilds under the catalog lock and then surely wins (COMMIT-7). An append never
conflicts (ROWDEL-10), so the server can do the same for it: the client names the
manifests it already wrote for its new files, its snapshot id and summary keys, and
the server commits that append on its current base with the core's own commit protocol
(:func:`~lakefmt.commit.commit_table` with a :class:`~lakefmt.commit.SnapshotProducer`,
exactly what :meth:`Table.append <lakefmt.table.Table.append>` runs against a local
catalog), rebuilding under its catalog lock if another request moved the pointer.

The snapshot id names the request (CATHTTP-19): a resent request whose first delivery
was applied is answered from the commit log, never applied twice. What the client names
is checked before anything is written (CATHTTP-18): manifests and data files under the
table's location, manifests that parse and hold only added files, data files present
in storage, the table the client built on.
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations at runtime.
import posixpath
import threading
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import Field

from lakefmt.catalog import Catalog
from lakefmt.commit import FileChange, SnapshotProducer, commit_table
from lakefmt.errors import (
    AlreadyCommittedError,
    CommitConflictError,
    CommitFileMissingError,
    CorruptMetadataError,
    LakefmtError,
    MissingFileError,
    ReadOnlyCatalogError,
    ValidationError,
    WriteLeaseLostError,
)
from lakefmt.idempotency import WriterBatch
from lakefmt.leases import WriteLease
from lakefmt.manifest import DataFile, EntryStatus
from lakefmt.manifest_io import read_manifest_contents
from lakefmt.metadata import TableMetadata, read_metadata
from lakefmt.names import parse_identifier
from lakefmt.properties import WRITE_LEASE_SECONDS, int_property
from lakefmt.service.catalog_api import STATUS, error, not_committed
from lakefmt.service.catalog_models import NAME, Body, CommitAnswer, WriterBatchBody, responses
from lakefmt.warehouse_layout import metadata_version

Name = Annotated[str, Path(pattern=NAME, description="a namespace or table name (CAT-2)")]


class AddedManifest(Body):
    path: str = Field(pattern=r"^metadata/[^\x00-\x1f\\]+$",
                      description="relative to the table location, under metadata/ (LAYOUT-2)")
    spec_id: int = Field(ge=0)


class AppendBody(Body):
    """A blind append the server commits on its current base (CATHTTP-17)."""

    table_uuid: str = Field(min_length=1, max_length=64)
    expected: str = Field(min_length=1, description="the pointer the client last saw (the refusal's current)")
    manifests: list[AddedManifest] = Field(min_length=1, max_length=1000)
    snapshot_id: int = Field(gt=0, lt=2**63, json_schema_extra={"format": "int64"})
    summary: dict[str, str] = Field(default_factory=dict, description="keys beyond the computed ones (SNAP-5)")
    writer_batch: WriterBatchBody | None = None
    lease_token: str | None = Field(None, pattern=r"^[0-9a-f]{16}$",
                                    description="a writer token (CAT-10); the server's files carry it in their names")


class AppendAnswer(CommitAnswer):
    metadata_location: str | None = Field(None, description="committed: the metadata file of the commit")
    snapshot_id: int | None = Field(None, json_schema_extra={"format": "int64"})


class _Replayed(Exception):
    """The request was applied before (CATHTTP-19); ``answer`` says so."""

    def __init__(self, answer: AppendAnswer) -> None:
        super().__init__("applied before")
        self.answer = answer


class _Taken(Exception):
    """The base holds the request's snapshot id already: applied before, or another commit's id."""


class _SwapChecks:
    """The server's checks in the catalog session of the swap, before it (CATHTTP-17, CATHTTP-19, COMMIT-19).

    :func:`commit_table` runs ``verify_in_session`` in each attempt's session, after reading the
    pointer and before the swap: here the request is looked up in the commit log when the
    pointer is no longer ``expected``, then the client's write lease is checked. Under the
    lock nothing can commit between these checks and the swap, so a request is applied at
    most once, without a session of its own.
    """

    def __init__(self, catalog: Catalog, identifier: tuple[str, str], body: "AppendBody", ttl: float) -> None:
        self.identifier, self.body = identifier, body
        self.token = body.lease_token
        self.lease = None if body.lease_token is None else WriteLease(
            catalog, body.table_uuid, ttl, token=body.lease_token, label=".".join(identifier))

    def verify_in_session(self, s: Any) -> None:
        table_uuid, current, version = s.table_row(*self.identifier)
        if current != self.body.expected:
            applied = _applied(s, table_uuid, self.body, version)
            if applied is not None:
                raise _Replayed(applied)
        if self.lease is not None:
            self.lease.verify_in_session(s)


def add_append_route(router: APIRouter, catalog: Catalog) -> None:
    """Mount ``POST /namespaces/{ns}/tables/{name}/append`` on the catalog router."""
    # (namespace, name) -> (metadata location, metadata) this server last committed or read: the base of
    # the next append's first attempt, built before the lock is taken (COMMIT-7 rebuilds it if stale).
    latest: dict[tuple[str, str], tuple[str, TableMetadata]] = {}
    latest_lock = threading.Lock()

    @router.post("/namespaces/{namespace}/tables/{name}/append", response_model=AppendAnswer,
                 responses={**responses(404), 409: {"model": AppendAnswer, "description": "Not committed"}})
    def append(namespace: Name, name: Name, body: AppendBody) -> Any:
        """CATHTTP-17: commit the client's added files on the current base, under the catalog lock."""
        try:
            return append_once(parse_identifier((namespace, name)), body)
        except _Replayed as replayed:
            return replayed.answer
        except LakefmtError as exc:  # a refusal because of what the catalog or storage holds: not committed
            if next((code for cls, code in STATUS if isinstance(exc, cls)), None) != 409:
                raise
            return error(409, exc, committed=False)

    def base_of(identifier: tuple[str, str], expected: str, *, fresh: bool = False) -> tuple[TableMetadata, str]:
        """The metadata to build the first attempt on: the newest of what this server knows and ``expected``
        (with ``fresh``, the current metadata, read in a session)."""
        with latest_lock:
            known = None if fresh else latest.get(identifier)
        if known is None:
            with catalog.session() as s:
                current = s.current_location(*identifier)
            known = (current, read_metadata(catalog.io, current))
        elif expected != known[0] and expected.startswith(f"{known[1].location}/metadata/") and \
                _version_or_zero(expected) > _version_or_zero(known[0]):
            known = (expected, read_metadata(catalog.io, expected))  # the table's: the client saw it current
        with latest_lock:
            latest[identifier] = known
        return known[1], known[0]

    def append_once(identifier: tuple[str, str], body: AppendBody) -> Any:
        namespace, name = identifier
        if catalog.read_only:
            raise ReadOnlyCatalogError(f"cannot commit to {namespace}.{name}: the served catalog "
                                       f"{catalog.catalog_path} is read-only ({catalog.read_only_reason}); "
                                       "nothing was written")
        base, base_location = base_of(identifier, body.expected)  # an unknown table is 404 before anything else
        if base.table_uuid != body.table_uuid:  # maybe this server's memory of a table dropped since
            base, base_location = base_of(identifier, body.expected, fresh=True)
        batch = None if body.writer_batch is None else WriterBatch(**body.writer_batch.model_dump())
        paths = [_relative_file(m.path, "metadata/", "manifest") for m in body.manifests]
        if base.table_uuid != body.table_uuid:
            raise CommitConflictError(
                f"table {namespace}.{name} is table-uuid {base.table_uuid}, not {body.table_uuid}: it was dropped "
                "and re-created since this append was planned (COMMIT-7); nothing was committed")
        try:
            added = _added_files(catalog, base, body, paths)
        except LakefmtError as exc:  # missing or broken manifests, missing data files: refused, nothing written
            return error(409, exc, committed=False)
        change = FileChange("append", added=added, summary=dict(body.summary), writer_batch=batch)
        producer = SnapshotProducer(catalog.io, base.location, change, token=body.lease_token)
        producer.snapshot_id = body.snapshot_id  # the request's name (CATHTTP-19)
        checks = _SwapChecks(catalog, identifier, body, int_property(base.properties, WRITE_LEASE_SECONDS))

        def build(b: TableMetadata) -> Any:
            if b.is_inline(body.snapshot_id):  # applied already, or the id is another commit's (SNAP-2)
                raise _Taken
            return producer.build(b)

        def applied_before() -> AppendAnswer | None:
            with catalog.session() as s:
                table_uuid, _, version = s.table_row(namespace, name)
                return _applied(s, table_uuid, body, version)

        try:
            metadata, location = commit_table(
                catalog, identifier, (base, base_location), build, operation="append",
                snapshot_id=body.snapshot_id, summary={"operation": "append"}, token=body.lease_token,
                writer_batch=batch, lease=checks)  # type: ignore[arg-type]
        except _Taken:
            producer.cleanup()
            applied = applied_before()
            if applied is not None:
                return applied
            return error(409, ValidationError(f"snapshot id {body.snapshot_id} is taken in {namespace}.{name} by "
                                              "another commit (SNAP-2); nothing was committed"), committed=False)
        except AlreadyCommittedError as exc:
            producer.cleanup()
            applied = applied_before()  # a resend of an applied idempotent request meets its own batch first
            if applied is not None:
                return applied
            return not_committed("already-committed", exc, batch_id=exc.last_committed,
                                 last_committed=exc.last_committed)
        except WriteLeaseLostError as exc:
            producer.cleanup()
            return not_committed("write-lease-lost", exc)
        except BaseException:
            producer.cleanup()
            raise
        with latest_lock:
            latest[identifier] = (location, metadata)
        snapshot = metadata.current_snapshot
        return AppendAnswer(committed=True, version=metadata_version(location), replayed=False,
                            metadata_location=location, snapshot_id=None if snapshot is None else snapshot.snapshot_id)


def _applied(s: Any, table_uuid: str, body: AppendBody, version: int) -> AppendAnswer | None:
    """The answer to a request that was applied before (CATHTTP-19), from the commit log, else None.

    Only the commits after ``expected`` can hold it: the request was sent once the client
    knew that pointer, and pointers never come back (LAYOUT-9).
    """
    since = version - _version_or_zero(body.expected) if _version_or_zero(body.expected) else None
    if since is not None and since <= 0:
        return None
    for record in s.commit_records(table_uuid=table_uuid, limit=since):
        if record.snapshot_id == body.snapshot_id:
            return AppendAnswer(committed=True, version=record.version, replayed=True,
                                metadata_location=record.new_metadata_location, snapshot_id=record.snapshot_id)
    return None


def _version_or_zero(location: str) -> int:
    try:
        return metadata_version(location)
    except ValidationError:
        return 0


def _relative_file(path: str, folder: str, what: str) -> str:
    """``path`` if it names a file under ``folder`` of the table location (LAYOUT-2), else ValidationError."""
    normal = posixpath.normpath(path)
    if (normal != path or "\\" in path or "://" in path or path.startswith("/") or not path.startswith(folder)
            or any(part in ("", ".", "..") for part in path.split("/"))):
        raise ValidationError(f"{what} {path!r} is not a file under {folder} of the table's location: an append "
                              "the server applies names only files of the table (CATHTTP-18); nothing was written")
    return path


def _added_files(catalog: Catalog, base: TableMetadata, body: AppendBody, paths: list[str]) -> list[DataFile]:
    """The data files the request's manifests add, checked as CATHTTP-18 says."""
    added: list[DataFile] = []
    for manifest, path in zip(body.manifests, paths):
        spec = next((p for p in base.partition_specs if p.spec_id == manifest.spec_id), None)
        if spec is None:
            raise CorruptMetadataError(f"manifest {path} names partition spec {manifest.spec_id}, which the table "
                                       "does not have (CATHTTP-18); nothing was written")
        location = f"{base.location}/{path}"
        try:
            contents = read_manifest_contents(catalog.io, location, spec, base.schema)
        except MissingFileError as exc:  # reported as its base class, as CATHTTP-18 names it
            raise CorruptMetadataError(f"manifest {location} is missing (CATHTTP-18); nothing was written") from exc
        except OSError as exc:
            raise CorruptMetadataError(f"cannot read manifest {location}: {exc}") from exc
        added_status = int(EntryStatus.ADDED)
        if (any(s != added_status for s in contents.statuses) or any(i is not None for i in contents.snapshot_ids)
                or any(n is not None for n in contents.sequence_numbers)):
            raise CorruptMetadataError(f"manifest {location} holds entries other than added files with inherited "
                                       "snapshot ids and sequence numbers (MAN-5, CATHTTP-18); nothing was written")
        for f in contents.data_files:
            _relative_file(f.path, "data/", "data file")
            if f.deletion_vector is not None:
                raise CorruptMetadataError(f"manifest {location} gives {f.path} a deletion vector: an append adds "
                                           "files only (CATHTTP-17); nothing was written")
        added += contents.data_files
    if not added:
        raise CorruptMetadataError("the append's manifests add no file (CATHTTP-18); nothing was written")
    sizes = {f"{base.location}/{f.path}": f.file_size_bytes for f in added}
    missing = catalog.io.missing_or_short(sizes)
    if missing:
        raise CommitFileMissingError(f"{len(missing)} of the {len(sizes)} data file(s) the append adds are missing "
                                     f"from storage or shorter than recorded, e.g. {missing[0]} (COMMIT-19); "
                                     "nothing was committed")
    return added
