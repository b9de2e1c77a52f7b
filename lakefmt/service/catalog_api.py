"""The catalog over HTTP: the router ``lakefmt serve`` mounts under ``/catalog/v1`` (spec/catalog-http.md).

The service owns its catalog file; writers on other machines reach it through these
endpoints (CATHTTP-1). Every request is one :meth:`Catalog.session` of the served
catalog, under its lock (CAT-6), and needs the service's bearer token (CATHTTP-2). A
commit is checked and swapped in one session (CATHTTP-8) and is idempotent: a retried
commit that was already applied answers committed again (CATHTTP-9). Errors are
``{"error": <lakefmt error class>, "message": ...}`` (CATHTTP-3), so a client re-raises
the same class.

Example:
    $ curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8765/catalog/v1/namespaces/ops/tables/events
    {"table_uuid": "...", "metadata_location": "s3://.../v000004-....metadata.json", "version": 4}
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations at runtime.
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.convertors import PathConvertor, register_url_convertor

from lakefmt import __version__
from lakefmt.catalog import Catalog, CommitRecord
from lakefmt.errors import (
    AlreadyCommittedError,
    CatalogLockTimeoutError,
    CommitConflictError,
    CorruptMetadataError,
    InvalidNameError,
    LakefmtError,
    NamespaceExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    ReadOnlyCatalogError,
    TableExistsError,
    ValidationError,
    WriteLeaseLostError,
)
from lakefmt.hooks import checkpoint
from lakefmt.idempotency import WriterBatch
from lakefmt.io import normalize_location, scheme_of
from lakefmt.metadata import FORMAT_VERSIONS, read_metadata
from lakefmt.names import parse_identifier, validate_name
from lakefmt.service.catalog_models import (
    NAME,
    AcquireBody,
    CommitAnswer,
    CommitBody,
    CommitRow,
    CreateTableBody,
    LeaseHolderAnswer,
    LeaseKeys,
    NamespaceBody,
    RegisterBody,
    RenameBody,
    RenewBody,
    TableAnswer,
    TurnAnswer,
    TurnBody,
    responses,
)
from lakefmt.service.commit_turns import CommitTurns, KnownPointers
from lakefmt.service.metrics import ServiceMetrics
from lakefmt.warehouse_layout import metadata_version

PREFIX = "/catalog/v1"
SEGMENT = r"^[^/]+$"  # one path segment, percent-encoded by the client
T = TypeVar("T")
logger = logging.getLogger(__name__)


class TextConvertor(PathConvertor):
    """The rest of the path, whatever it holds: a lease key or writer id may contain ``/`` and line breaks."""

    regex = r"[\s\S]+"


register_url_convertor("lakefmt_text", TextConvertor())

# -- errors (CATHTTP-3) ------------------------------------------------------------------------------
STATUS: list[tuple[type[LakefmtError], int]] = [  # first match wins: subclasses before their bases
    (NoSuchTableError, 404), (NoSuchNamespaceError, 404), (ReadOnlyCatalogError, 403),
    (CatalogLockTimeoutError, 503), (ValidationError, 400), (TableExistsError, 409), (NamespaceExistsError, 409),
    (CommitConflictError, 409), (WriteLeaseLostError, 409), (CorruptMetadataError, 409)]


def message_of(exc: BaseException) -> str:
    """The message without the quotes ``str()`` puts around a KeyError's (NoSuchTableError is one)."""
    return exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)


def error(status: int, exc: LakefmtError | None = None, *, name: str = "", message: str = "",
          **extra: Any) -> JSONResponse:
    """``{"error": <class name>, "message": ...}`` with ``status`` (CATHTTP-3)."""
    if exc is not None:
        name, message = type(exc).__name__, message_of(exc)
    return JSONResponse({"error": name, "message": message, **extra}, status_code=status)


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    """400; a name that breaks CAT-2 is an ``InvalidNameError`` with lakefmt's own message."""
    for e in exc.errors():
        field = str(e.get("loc", ("",))[-1])
        if e.get("type") == "string_pattern_mismatch" and field in ("namespace", "name", "from", "to"):
            try:
                parse_identifier(e.get("input")) if field in ("from", "to") else validate_name(e.get("input"), field)
            except InvalidNameError as bad:
                return error(400, bad)
    problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
    return error(400, name="ValidationError", message=problems or "invalid request")


class Conflict(Exception):
    """A request refused with 409 and ``error``, whatever the class's usual status (CATHTTP-3)."""

    def __init__(self, error: LakefmtError) -> None:
        super().__init__(str(error))
        self.error = error


class CatalogRoute(APIRoute):
    """A route whose errors answer ``{"error", "message"}`` (CATHTTP-3); 401 stays the service's (SERVICE-10)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException as exc:  # 401 from the service's auth; 422 for an unknown query parameter
                if exc.status_code == 401:
                    raise
                return error(400 if exc.status_code == 422 else exc.status_code, name="ValidationError",
                             message=str(exc.detail))
            except RequestValidationError as exc:
                return invalid_request(exc)
            except Conflict as exc:
                return error(409, exc.error)
            except LakefmtError as exc:
                return error(next((code for cls, code in STATUS if isinstance(exc, cls)), 500), exc)
            except Exception as exc:  # a bug or a storage failure: an answer all the same
                logger.exception("catalog request %s %s failed", request.method, request.url.path)
                return error(500, name="LakefmtError", message=f"internal error: {type(exc).__name__}: {exc}")

        return route


def commit_row(record: CommitRecord) -> CommitRow:
    """A commit-log row as CATHTTP-13 answers it: ``committed_at`` in ISO 8601 with its UTC offset."""
    return CommitRow(identifier=record.identifier, version=record.version,
                     old_metadata_location=record.old_metadata_location,
                     new_metadata_location=record.new_metadata_location, committed_at=record.committed_at.isoformat(),
                     operation=record.operation, snapshot_id=record.snapshot_id, summary=record.summary)


def catalog_router(catalog: Catalog, dependencies: Sequence[Any], metrics: ServiceMetrics | None = None) -> APIRouter:
    """The ``/catalog/v1`` endpoints over ``catalog``, each behind ``dependencies`` (the service's auth);
    ``metrics`` gets the commit turns' figures."""
    router = APIRouter(prefix=PREFIX, dependencies=list(dependencies), route_class=CatalogRoute, tags=["catalog"])
    Name = Annotated[str, Path(pattern=NAME, description="a namespace or table name (CAT-2)")]
    Segment = Annotated[str, Path(pattern=SEGMENT, description="percent-encoded text")]

    def writable(what: str) -> None:
        if catalog.read_only:
            raise ReadOnlyCatalogError(f"cannot {what}: the served catalog {catalog.catalog_path} is read-only "
                                       f"({catalog.read_only_reason}); nothing was written")

    def stored(raw_location: str, read: Callable[[str], T], *, hint: str = "") -> tuple[str, T]:
        """``read`` a metadata file the client wrote on the warehouse's store (CAT-12, CAT-20); a file elsewhere,
        missing, unreadable or invalid is refused with 409 (:class:`Conflict`)."""
        location = normalize_location(raw_location)
        if scheme_of(location) != catalog.io.scheme:
            raise Conflict(ValidationError(f"{location} is not on the warehouse's store ({catalog.io.scheme}://)"
                                           + hint))
        try:
            return location, read(location)
        except CorruptMetadataError as exc:  # missing or invalid: the client writes it first
            raise Conflict(exc) from exc
        except OSError as exc:  # not a file, a name too long, no permission
            raise Conflict(CorruptMetadataError(f"cannot read metadata file {location}: {exc}")) from exc

    @router.get("/config", responses=responses())
    def config() -> dict[str, Any]:
        """CATHTTP-4: where the data files go, and what this server implements."""
        return {"warehouse": catalog.warehouse, "format-versions": list(FORMAT_VERSIONS),
                "server": f"lakefmt {__version__}", "read-only": catalog.read_only}

    # -- namespaces (CATHTTP-5, CAT-13) ---------------------------------------------------------------
    @router.get("/namespaces", responses=responses())
    def list_namespaces() -> dict[str, list[str]]:
        return {"namespaces": catalog.list_namespaces()}

    @router.post("/namespaces", responses=responses(409))
    def create_namespace(body: NamespaceBody) -> dict[str, str]:
        catalog.create_namespace(body.namespace, body.properties)
        return {"namespace": body.namespace}

    @router.delete("/namespaces/{namespace}", responses=responses(404, 409))
    def drop_namespace(namespace: Name) -> Any:
        try:
            catalog.drop_namespace(namespace)
        except ValidationError as exc:  # it still holds tables (CAT-13): refused by the catalog's state
            return error(409, exc)
        return {"dropped": True}

    # -- tables (CATHTTP-6, CATHTTP-7) ---------------------------------------------------------------
    @router.get("/namespaces/{namespace}/tables", responses=responses())
    def list_tables(namespace: Name) -> dict[str, list[str]]:
        return {"tables": catalog.list_tables(namespace)}

    @router.post("/namespaces/{namespace}/tables", response_model=TableAnswer, responses=responses(409))
    def create_table(namespace: Name, body: CreateTableBody) -> Any:
        namespace, name = parse_identifier((namespace, body.name))
        writable(f"create table {namespace}.{name}")
        location, metadata = stored(body.metadata_location, lambda at: read_metadata(catalog.io, at))
        if metadata.table_uuid != body.table_uuid:
            return error(409, ValidationError(f"{location} holds table-uuid {metadata.table_uuid}, not "
                                              f"{body.table_uuid} (CAT-15)"))
        with catalog.session(checkpoint=True) as s:  # CAT-22: a created table is checkpointed
            s.insert_table(namespace, name, body.table_uuid, location)
        return TableAnswer(table_uuid=body.table_uuid, metadata_location=location, version=1)

    @router.post("/namespaces/{namespace}/register", response_model=TableAnswer, responses=responses(409))
    def register_table(namespace: Name, body: RegisterBody) -> Any:
        """CATHTTP-16: a table that exists in storage, at one of its metadata files (CAT-20)."""
        namespace, name = parse_identifier((namespace, body.name))
        writable(f"register table {namespace}.{name}")
        location, table = stored(body.metadata_location, lambda at: catalog.register_table((namespace, name), at),
                                 hint="; copy the table under the warehouse first")
        version = metadata_version(location)  # LAYOUT-9, as RegisterBody's pattern checked
        return TableAnswer(table_uuid=table.metadata.table_uuid, metadata_location=location, version=version)

    @router.get("/namespaces/{namespace}/tables/{name}", response_model=TableAnswer, responses=responses(404))
    def load_table(namespace: Name, name: Name) -> TableAnswer:
        with catalog.session() as s:
            uuid, location, version = s.table_row(*parse_identifier((namespace, name)))
        return TableAnswer(table_uuid=uuid, metadata_location=location, version=version)

    @router.delete("/namespaces/{namespace}/tables/{name}", responses=responses(404))
    def drop_table(namespace: Name, name: Name, purge: bool = False) -> dict[str, bool]:
        catalog.drop_table((namespace, name), purge=purge)
        return {"dropped": True}

    @router.post("/tables/rename", responses=responses(404, 409))
    def rename_table(body: RenameBody) -> dict[str, bool]:
        catalog.rename_table(body.from_, body.to)
        return {"renamed": True}

    # -- commit (CATHTTP-8 .. CATHTTP-10), in the table's turn (CATHTTP-21 .. CATHTTP-24) ------------------
    turns = CommitTurns()
    pointers = KnownPointers(catalog.catalog_path)  # CATHTTP-25 without a session while nothing else wrote
    if metrics is not None:
        metrics.commits_waiting.set_function(turns.waiting)

    @router.post("/namespaces/{namespace}/tables/{name}/commit", response_model=CommitAnswer,
                 responses={**responses(404), 409: {"model": CommitAnswer, "description": "Not committed"}})
    def commit(namespace: Name, name: Name, body: CommitBody) -> Any:
        namespace, name = parse_identifier((namespace, name))
        writable(f"commit to {namespace}.{name}")
        with turns.request((namespace, name), body.turn) as turn:
            answer = swap(namespace, name, body)
            if isinstance(answer, CommitAnswer) and not answer.replayed:
                pointers.remember((namespace, name), body.new)
            elif isinstance(answer, Refusal) and answer.reason == "moved":
                pointers.remember((namespace, name), answer.extra["current"])
            if isinstance(answer, Refusal) and answer.reason == "moved" and body.want_turn:
                turn.keep()  # CATHTTP-22: the rebuilt attempt is the next commit this server swaps
                if metrics is not None:
                    metrics.commit_turns.inc()
        if isinstance(answer, CommitAnswer):
            return answer
        if turn.kept:
            answer.extra.update(turn=turn.ticket, turn_seconds=turns.seconds)
        return not_committed(answer.reason, answer.exc, **answer.extra)

    @router.post("/namespaces/{namespace}/tables/{name}/turn", response_model=TurnAnswer, responses=responses(404))
    def take_turn(namespace: Name, name: Name) -> TurnAnswer:
        """CATHTTP-25: the table's turn, once every earlier request is done, with the pointer to build on."""
        namespace, name = parse_identifier((namespace, name))
        writable(f"commit to {namespace}.{name}")
        with turns.request((namespace, name), None) as turn:
            current = pointers.get((namespace, name))
            if current is None:
                with catalog.session() as s:
                    _, current, _ = s.table_row(namespace, name)
                pointers.remember((namespace, name), current)
            turn.keep()
        if metrics is not None:
            metrics.commit_turns.inc()
        return TurnAnswer(turn=turn.ticket, turn_seconds=turns.seconds, current=current, waited=turn.waited)

    @router.post("/namespaces/{namespace}/tables/{name}/turn/release", responses=responses(404))
    def release_turn(namespace: Name, name: Name, body: TurnBody) -> dict[str, bool]:
        """CATHTTP-23: a client gives back a turn it will not use."""
        namespace, name = parse_identifier((namespace, name))
        return {"released": turns.release((namespace, name), body.turn)}

    def swap(namespace: str, name: str, body: CommitBody) -> CommitAnswer | Refusal:
        """CATHTTP-8 steps 1-5 in one catalog session: the answer, or why nothing was committed."""
        answer = swap_in_session(namespace, name, body)
        if isinstance(answer, CommitAnswer) and not answer.replayed:
            checkpoint("catalog-http-after-swap")  # test hook: committed, the answer not sent yet
        return answer

    def swap_in_session(namespace: str, name: str, body: CommitBody) -> CommitAnswer | Refusal:
        """The steps of :func:`swap`.

        A well-formed commit without a writer batch is first tried as the swap alone, whose
        ``UPDATE`` also checks the write lease: the common case costs one transaction and no
        reads before it. Only a commit that swapped nothing goes through the steps one by one,
        which find why (the same session: nothing changed in between).
        """
        plain = body.writer_batch is None and body.new != body.expected and (
            body.snapshot_id is None or -(2**63) <= body.snapshot_id < 2**63)
        with catalog.session() as s:
            if plain:
                checkpoint("catalog-http-before-swap")  # test hook: crash tests stop the server here
                swapped = s.swap(namespace, name, body.expected, body.new, operation=body.operation,
                                 snapshot_id=body.snapshot_id, summary=body.summary, lease_token=body.lease_token)
                if swapped is not None:
                    return CommitAnswer(committed=True, version=swapped, replayed=False)
            uuid, current, version = s.table_row(namespace, name)
            if body.new == body.expected:  # the body's values are checked once the table is known
                raise ValidationError(f"a commit must move the pointer: new equals expected ({body.new})")
            if body.snapshot_id is not None and not -(2**63) <= body.snapshot_id < 2**63:
                raise ValidationError(f"snapshot_id {body.snapshot_id} is not a 64-bit integer (SNAP-2)")
            batch = None if body.writer_batch is None else WriterBatch(**body.writer_batch.model_dump())
            if current != body.expected:  # another commit won, or this one was applied and is retried
                applied = s.commit_records(table_uuid=uuid, new=body.new, limit=1)
                if applied:
                    return CommitAnswer(committed=True, version=applied[0].version, replayed=True)
                return Refusal("moved", moved(namespace, name, current), {"current": current})
            if body.lease_token is not None:  # COMMIT-19, as WriteLease.verify_in_session
                holder = s.lease_holder(uuid, "write", body.lease_token)
                if holder is None or holder[0] != body.lease_token or holder[1] <= time.time():
                    return Refusal("write-lease-lost", WriteLeaseLostError(
                        f"the write lease {body.lease_token} of {namespace}.{name} expired or was taken over "
                        "before this commit: orphan removal may have deleted files written under it, so nothing "
                        "was committed"), {})
            if batch is not None:  # PROGRESS-3
                last = s.last_committed_batch(uuid, batch.writer_id, migrate=True)
                try:
                    batch.check(last, where=s.where)
                except AlreadyCommittedError as exc:
                    return Refusal("already-committed", exc, {"batch_id": last, "last_committed": last})
            checkpoint("catalog-http-before-swap")  # test hook: crash tests stop the server here
            if not s.compare_and_swap(namespace, name, body.expected, body.new, operation=body.operation,
                                      snapshot_id=body.snapshot_id, summary=body.summary, writer_batch=batch,
                                      lease_token=body.lease_token):
                return Refusal("moved", moved(namespace, name, current), {"current": current})
        return CommitAnswer(committed=True, version=version + 1, replayed=False)

    # -- leases (CATHTTP-11, CAT-9 .. CAT-11) -------------------------------------------------------
    @router.post("/leases/acquire", responses=responses())
    def acquire(body: AcquireBody) -> dict[str, bool]:
        writable("take a lease")
        with catalog.session() as s:
            return {"acquired": s.acquire_leases(body.table_uuid, body.kind, body.keys, owner=body.owner,
                                                 ttl=body.ttl)}

    @router.post("/leases/release", responses=responses())
    def release(body: LeaseKeys) -> dict[str, bool]:
        writable("release a lease")
        with catalog.session() as s:
            s.release_leases(body.table_uuid, body.kind, body.keys, owner=body.owner)
        return {"released": True}

    @router.post("/leases/renew", responses=responses())
    def renew(body: RenewBody) -> dict[str, bool]:
        writable("renew a lease")
        with catalog.session() as s:
            return {"renewed": s.renew_lease(body.table_uuid, body.kind, body.key, owner=body.owner, ttl=body.ttl)}

    @router.get("/leases/{table_uuid}", responses=responses())
    def live_leases(table_uuid: Segment, kind: str | None = None) -> list[list[str | float]]:
        """``[table_uuid, kind, key, owner, expires_at]`` of each live lease, by key."""
        with catalog.session() as s:
            return [list(row) for row in s.live_leases(table_uuid, kind)]

    @router.get("/leases/{table_uuid}/{kind}/{key:lakefmt_text}", response_model=LeaseHolderAnswer,
                responses=responses(404))
    def lease_holder(table_uuid: Segment, kind: Segment, key: Annotated[str, Path(min_length=1)]) -> Any:
        with catalog.session() as s:
            holder = s.lease_holder(table_uuid, kind, key)
        if holder is None:
            return error(404, name="NoSuchLease", message=f"no {kind} lease {key!r} on table {table_uuid}")
        return LeaseHolderAnswer(owner=holder[0], expires_at=holder[1])

    # -- writer progress and the commit log (CATHTTP-12, CATHTTP-13) ----------------------------------
    @router.get("/writer-progress/{table_uuid}/{writer_id:lakefmt_text}", responses=responses())
    def writer_progress(table_uuid: Segment, writer_id: Annotated[str, Path(min_length=1)],
                        migrate: bool = False) -> dict[str, int | None]:
        with catalog.session() as s:
            return {"batch_id": s.last_committed_batch(table_uuid, writer_id,
                                                       migrate=migrate and not catalog.read_only)}

    @router.get("/commit-log", responses=responses())
    def commit_log(namespace: Annotated[str | None, Query(pattern=NAME)] = None,
                   name: Annotated[str | None, Query(pattern=NAME)] = None,
                   limit: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
                   new_metadata_location: str | None = None) -> dict[str, list[CommitRow]]:
        with catalog.session() as s:
            records = s.commit_records(namespace=namespace, name=name, new=new_metadata_location, limit=limit)
        return {"commits": [commit_row(r) for r in records]}
    return router


def moved(namespace: str, name: str, current: str) -> CommitConflictError:
    return CommitConflictError(f"table {namespace}.{name} moved to {current} since the commit's base: another "
                               "commit won the compare-and-swap (CAT-4)")


@dataclass
class Refusal:
    """Why a commit was not applied (CATHTTP-10): the reason, its error, and the answer's extra keys."""

    reason: str
    exc: LakefmtError
    extra: dict[str, Any]


def not_committed(reason: str, exc: LakefmtError, **extra: Any) -> JSONResponse:
    """409: nothing was committed, and why (CATHTTP-10)."""
    return error(409, exc, committed=False, reason=reason, **extra)
