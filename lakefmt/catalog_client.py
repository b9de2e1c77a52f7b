"""The catalog served over HTTP by ``lakefmt serve``: :class:`RemoteCatalog` (spec/catalog-http.md, CATHTTP-14).

``lakefmt.Catalog("http://host:8765", token=...)`` returns a :class:`RemoteCatalog`. It
asks the server's ``/catalog/v1/config`` for the warehouse (CATHTTP-4) and reads and writes table
files there itself (S3 through ``storage_options``); only catalog operations (names,
the pointer's compare-and-swap, leases, writer progress, the commit log) go over HTTP,
with the standard library's ``http.client``: one keep-alive connection per thread.
:meth:`RemoteCatalog.session` yields a :class:`RemoteSession` with the methods of
:class:`lakefmt.catalog_file.CatalogSession`, so tables, commits, leases, compaction and
maintenance run unchanged. It holds no lock: each call is one request, which the server
runs in one session of its catalog file, and the swap is still one DuckDB transaction
there (CAT-4), with the write lease (COMMIT-19) and writer progress (PROGRESS-3) checked
in it (CATHTTP-8).

A commit whose request fails on the connection is sent again with the same body within
``retry_seconds``: the server applies a commit at most once (CATHTTP-9). If the outcome
stays unknown, the pointer and the commit log decide it (CATHTTP-13, COMMIT-11), else
:class:`CommitStateUnknownError`. A server error comes back as the same lakefmt error class
(CATHTTP-3). ``register_table`` asks the server to register a table at a metadata
file of the warehouse (CATHTTP-16). What only a process holding the catalog file can do
(``recover``, which rebuilds the file, and SQL on it such as the service's job tables)
raises :class:`ValidationError`; ``checkpoint`` is a no-op, as the server checkpoints its
own file (CAT-22).

A commit whose swap lost the race is rebuilt here and sent again. The refusal gives this
client the table's commit turn (CATHTTP-22), so the server swaps no other client's commit
to the table first, as a local writer rebuilds under the catalog lock (COMMIT-7).

Example:
    >>> cat = lakefmt.Catalog("http://catalog.internal:8765", token=os.environ["TOKEN"],
    ...                       storage_options={"endpoint_url": "http://minio:9000"})
    >>> cat.load_table("artemis.downlinks").append(batch)
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefmt import errors
from lakefmt.catalog import Catalog
from lakefmt.catalog_file import CommitRecord
from lakefmt.catalog_http import (
    API_PREFIX,
    TOKEN_ENV,
    CatalogServerError,
    CatalogUnauthorizedError,
    HeldTurns,
    HttpClient,
    is_catalog_url,
)
from lakefmt.errors import CommitStateUnknownError, LakefmtError, ReadOnlyCatalogError, ValidationError
from lakefmt.io import FileIO, join, normalize_location
from lakefmt.metadata import FORMAT_VERSION, FORMAT_VERSIONS, read_metadata
from lakefmt.names import parse_identifier, validate_name
from lakefmt.remote_session import RemoteSession, _q
from lakefmt.table_creation import new_table_metadata
from lakefmt.warehouse_layout import metadata_version

if TYPE_CHECKING:
    from lakefmt.table import Table

__all__ = ["API_PREFIX", "TOKEN_ENV", "CatalogServerError", "CatalogUnauthorizedError", "RemoteCatalog",
           "RemoteSession", "is_catalog_url"]
_LEASE_MARGIN = 5.0  # a lease this client took is answered from memory while it lives this much longer
POINTER_SECONDS = 1.0
"""For this long after this client's own commit, a session's read of the table's pointer answers that commit."""
REFUSED_POINTER_SECONDS = 0.05
"""For this long after a refused swap, a session's read of the pointer answers the one the refusal named."""
CONTENDED_SECONDS = 1.0
"""For this long after a sign of other writers (a refusal, or a turn someone else held), commits take the turn first."""
"""For this long after a refused swap, a session's read of the pointer answers the one the refusal named."""


class RemoteCatalog(Catalog):
    """A catalog served by ``lakefmt serve`` at ``url`` (see the module documentation).

    Args:
        warehouse: the server's URL, e.g. ``http://catalog.internal:8765``.
        token: the server's bearer token; default ``$LAKEFMT_CATALOG_TOKEN``.
        storage_options: fsspec options for the warehouse the server names (S3 credentials...).
        timeout: seconds to wait for one answer.
        retry_seconds: how long a request that got no answer is sent again (a server restart).
        read_only: refuse every write before anything is written.
        catalog_path, create, lock_timeout: belong to the server's catalog file: ``catalog_path``
            must be None, ``create`` and ``lock_timeout`` are ignored.
    """

    def __init__(self, warehouse: str, *, catalog_path: str | None = None,
                 storage_options: dict[str, Any] | None = None, lock_timeout: float = 30.0,
                 create: bool = False, read_only: bool = False, token: str | None = None,
                 timeout: float = 60.0, retry_seconds: float = 30.0) -> None:
        if catalog_path is not None:
            raise errors.InvalidCatalogPathError(
                f"catalog_path={catalog_path!r} cannot be combined with the catalog server {warehouse}: the "
                "server owns its catalog file")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ValidationError("token must be a non-empty string (an empty token would send no credentials)")
        self.url = warehouse.rstrip("/")
        self._token = token
        self.retry_seconds = float(retry_seconds)
        self.lock_timeout = float(lock_timeout)
        self._http = HttpClient(self.url, token, timeout=float(timeout), retry_seconds=self.retry_seconds)
        self._own_leases: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._pointers: dict[tuple[str, str], tuple[str, float]] = {}  # -> (location, until when it answers)
        self._turns = HeldTurns()  # CATHTTP-22
        self._contended: dict[tuple[str, str], float] = {}  # table -> until when its commits take the turn first
        self._memory_lock = threading.Lock()
        config = self._json("GET", "/config")
        self.server = str(config.get("server", ""))
        self.format_versions = tuple(config.get("format-versions", FORMAT_VERSIONS))
        self.warehouse = normalize_location(str(config["warehouse"]))
        self.io = FileIO(self.warehouse, storage_options)
        self.catalog_path = None  # type: ignore[assignment]
        self.read_only = bool(read_only) or bool(config.get("read-only"))
        self.read_only_reason = ("opened with read_only=True" if read_only else
                                 "the server's catalog is read-only" if self.read_only else None)

    def __repr__(self) -> str:
        return f"RemoteCatalog({self.url!r}, warehouse={self.warehouse!r})"

    @property
    def token(self) -> str | None:
        """The bearer token sent with every request (None: none), for a tool that opens this catalog again
        elsewhere, e.g. write_native's Spark data source path. Not part of ``repr``."""
        return self._token

    def _read_only_error(self, what: str) -> ReadOnlyCatalogError:
        return ReadOnlyCatalogError(f"cannot {what}: the catalog server {self.url} is open read-only "
                                    f"({self.read_only_reason}). Nothing was written")

    def _call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any, bool]:
        return self._http.call(method, path, body, **kwargs)

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        return self._http.request_json(method, path, body)

    def _table(self, namespace: str, name: str, *, retry: bool = True) -> dict[str, Any]:
        status, payload, _ = self._call("GET", f"/namespaces/{_q(namespace)}/tables/{_q(name)}", retry=retry)
        if status >= 400:
            raise self._http.error(status, payload)
        return payload

    def _told(self, namespace: str, name: str, location: str | None, until: float) -> None:
        """Remember the pointer an answer about our own swap named, to answer the next read until ``until``."""
        with self._memory_lock:
            if location is None:
                self._pointers.pop((namespace, name), None)
            else:
                self._pointers[(namespace, name)] = (location, until)

    def _pointer(self, namespace: str, name: str) -> str:
        """The table's pointer: the one the answer to this client's last swap named, if recent, else asked.

        Without the catalog lock a read is out of date as soon as it is answered, and the swap on
        the server decides. After its own commit (for :data:`POINTER_SECONDS`) a writer has built
        its next commit on that pointer already, so a read would only learn one request earlier
        that the swap will be refused; right after a refusal (for :data:`REFUSED_POINTER_SECONDS`)
        the refusal named the newest pointer (CATHTTP-10), which the rebuilt attempt starts from
        (COMMIT-7). Each such answer is used once; every other read asks the server.
        """
        with self._memory_lock:
            known = self._pointers.pop((namespace, name), None)
        if known is not None and time.monotonic() < known[1]:
            return known[0]
        return str(self._table(namespace, name)["metadata_location"])

    # -- the catalog's own operations ---------------------------------------------
    @contextlib.contextmanager
    def session(self, *, checkpoint: bool = False) -> Iterator[RemoteSession]:  # type: ignore[override]
        """A :class:`RemoteSession`: each call is one request; no lock is held between calls.

        A commit turn this thread held when the session began and did not send is given back
        at its end (CATHTTP-23): the commit it was for did not reach its swap.
        """
        before = self._turns.held()
        try:
            yield RemoteSession(self)
        finally:
            for (namespace, name), ticket in self._turns.unused_since(before):
                with contextlib.suppress(LakefmtError):  # unanswered: the turn lapses on its own
                    self._call("POST", f"/namespaces/{_q(namespace)}/tables/{_q(name)}/turn/release",
                               {"turn": ticket}, retry=False)

    def take_commit_turn(self, namespace: str, name: str, *, before: Callable[[], None] | None = None) -> bool:
        """Under contention, take the table's commit turn before building a commit (CATHTTP-25).

        While other writers were seen recently (:data:`CONTENDED_SECONDS`), a commit built
        first would most likely be refused and built again in the turn the refusal gives;
        taking the turn first builds it once, on the pointer the turn names. ``before`` runs
        before the turn is asked for (the writer makes the files it wrote so far durable, so
        that the turn is held only for the attempt's own). Otherwise, and from a server
        without the endpoint, False: the commit is built and sent at once.
        """
        key = (namespace, name)
        with self._memory_lock:
            contended = time.monotonic() < self._contended.get(key, 0.0)
        if not contended or self._turns.holds(key) or self.read_only:
            return False
        if before is not None:
            before()
        status, payload, _ = self._call("POST", f"/namespaces/{_q(namespace)}/tables/{_q(name)}/turn", {})
        if status != 200 or not isinstance(payload, dict) or not payload.get("turn"):
            return False  # an older server, or an error the commit itself meets and raises
        until = self._turns.given(key, str(payload["turn"]), float(payload["turn_seconds"]))
        self._told(namespace, name, str(payload["current"]), until)
        if payload.get("waited"):
            self._saw_contention(key)
        return True

    def _saw_contention(self, key: tuple[str, str]) -> None:
        with self._memory_lock:
            self._contended[key] = time.monotonic() + CONTENDED_SECONDS

    def holds_commit_turn(self, namespace: str, name: str) -> bool:
        """Whether this thread holds the table's commit turn, given with a refusal (CATHTTP-22)."""
        return self._turns.holds((namespace, name))

    def create_namespace(self, namespace: str, properties: dict[str, str] | None = None) -> None:
        validate_name(namespace, "namespace")
        self._check_writable(f"create namespace {namespace}")
        status, payload, uncertain = self._call("POST", "/namespaces",
                                                {"namespace": namespace, "properties": properties or {}})
        if status >= 400 and not (uncertain and status == 409):  # 409 after a resend: ours was applied
            raise self._http.error(status, payload)

    def list_namespaces(self) -> list[str]:
        answer = self._json("GET", "/namespaces")
        return list(answer["namespaces"] if isinstance(answer, dict) else answer)

    def drop_namespace(self, namespace: str) -> None:
        validate_name(namespace, "namespace")
        self._check_writable(f"drop namespace {namespace}")
        status, payload, uncertain = self._call("DELETE", f"/namespaces/{_q(namespace)}")
        if status >= 400 and not (uncertain and status == 404):
            raise self._http.error(status, payload)

    def create_table(self, identifier: str | Sequence[str], schema: pa.Schema | Any, *,
                     partition_by: Sequence[str] = (), sort_by: Sequence[str] = (),
                     properties: dict[str, str] | None = None, format_version: int = FORMAT_VERSION) -> Table:
        """As :meth:`Catalog.create_table`: the first metadata file is written here, then registered (CATHTTP-7)."""
        from lakefmt.table import Table  # table sits above the catalog

        namespace, name = parse_identifier(identifier)
        self._check_writable(f"create table {namespace}.{name}")
        if self.table_exists((namespace, name)):  # refused before a file is written (the server checks again)
            raise errors.TableExistsError(f"table {namespace}.{name} already exists")
        table_uuid = str(uuid.uuid4())
        location = join(self.warehouse, namespace, f"{name}-{table_uuid.replace('-', '')[:12]}")
        metadata = new_table_metadata(schema, location=location, table_uuid=table_uuid, partition_by=partition_by,
                                      sort_by=sort_by, properties=properties or {})
        if format_version != metadata.format_version:
            if format_version not in FORMAT_VERSIONS:
                raise ValidationError(f"format_version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
            metadata = metadata.evolve(format_version=format_version)
        metadata_location = join(location, "metadata", f"v{1:06d}-{uuid.uuid4()}.metadata.json")
        self.io.write_bytes(metadata_location, metadata.dump_bytes())
        self.io.sync()  # durable before the catalog names it (COMMIT-20)
        body = {"name": name, "table_uuid": table_uuid, "metadata_location": metadata_location}
        # Without an answer (CatalogServerError) the table may exist: its metadata file is kept.
        status, payload, uncertain = self._call("POST", f"/namespaces/{_q(namespace)}/tables", body)
        if status >= 400 and not (uncertain and status == 409 and self._table(namespace, name).get(
                "table_uuid") == table_uuid):
            with contextlib.suppress(Exception):
                self.io.delete(metadata_location)  # refused: nothing names the file
            raise self._http.error(status, payload)
        return Table(self, (namespace, name), metadata, metadata_location)

    def register_table(self, identifier: str | Sequence[str], metadata_location: str) -> Table:
        """As :meth:`Catalog.register_table`: the server reads the metadata file and registers the table
        (CATHTTP-16, CAT-20); the file must be on the warehouse's store."""
        from lakefmt.table import Table  # table sits above the catalog

        namespace, name = parse_identifier(identifier)
        self._check_writable(f"register table {namespace}.{name}")
        if not isinstance(metadata_location, str):
            raise ValidationError(f"metadata_location must be a string, got {metadata_location!r}")
        location = normalize_location(metadata_location)
        metadata_version(location)  # LAYOUT-9, before a request
        status, payload, uncertain = self._call("POST", f"/namespaces/{_q(namespace)}/register",
                                                {"name": name, "metadata_location": location})
        if status >= 400 and not (uncertain and status == 409 and self._registered(namespace, name, location)):
            raise self._http.error(status, payload)
        return Table(self, (namespace, name), read_metadata(self.io, location), location)

    def _registered(self, namespace: str, name: str, location: str) -> bool:
        """Whether the table is registered at ``location``: a resent registration was applied the first time."""
        status, payload, _ = self._call("GET", f"/namespaces/{_q(namespace)}/tables/{_q(name)}")
        return status == 200 and isinstance(payload, dict) and payload.get("metadata_location") == location

    @classmethod
    def recover(cls, *args: Any, **kwargs: Any) -> Any:
        raise ValidationError("recover rebuilds a catalog file: run `lakefmt recover` on the catalog server's "
                              "machine, against its catalog file")

    def current_metadata_location(self, identifier: str | Sequence[str]) -> str:
        namespace, name = parse_identifier(identifier)
        return str(self._table(namespace, name)["metadata_location"])

    def table_exists(self, identifier: str | Sequence[str]) -> bool:
        namespace, name = parse_identifier(identifier)
        status, payload, _ = self._call("GET", f"/namespaces/{_q(namespace)}/tables/{_q(name)}")
        if status == 404:
            return False
        if status >= 400:
            raise self._http.error(status, payload)
        return True

    def list_tables(self, namespace: str | None = None) -> list[str]:
        spaces = self.list_namespaces() if namespace is None else [namespace]
        out: list[str] = []
        for ns in spaces:
            validate_name(ns, "namespace")
            status, payload, _ = self._call("GET", f"/namespaces/{_q(ns)}/tables")
            if status == 404 and namespace is None:
                continue  # dropped meanwhile
            if status >= 400:
                raise self._http.error(status, payload)
            out += [t if "." in t else f"{ns}.{t}" for t in payload["tables"]]
        return sorted(out)

    def rename_table(self, old: str | Sequence[str], new: str | Sequence[str]) -> None:
        old_ns, old_name = parse_identifier(old)
        new_ns, new_name = parse_identifier(new)
        self._check_writable(f"rename table {old_ns}.{old_name}")
        status, payload, uncertain = self._call("POST", "/tables/rename",
                                                {"from": f"{old_ns}.{old_name}", "to": f"{new_ns}.{new_name}"})
        if status >= 400 and not (uncertain and status == 404 and self.table_exists((new_ns, new_name))):
            raise self._http.error(status, payload)

    def drop_table(self, identifier: str | Sequence[str], *, purge: bool = False) -> None:
        """Remove the table from the server's catalog; with ``purge`` the server also deletes its files (CAT-8)."""
        namespace, name = parse_identifier(identifier)
        self._check_writable(f"drop table {namespace}.{name}")
        path = f"/namespaces/{_q(namespace)}/tables/{_q(name)}?purge={'true' if purge else 'false'}"
        status, payload, uncertain = self._call("DELETE", path)
        if status >= 400 and not (uncertain and status == 404):
            raise self._http.error(status, payload)

    def checkpoint(self) -> None:
        """Nothing to do here: the server checkpoints its own catalog file (CAT-22)."""

    def commit_log(self, identifier: str | Sequence[str] | None = None, *, limit: int | None = None
                   ) -> list[CommitRecord]:
        """Commits recorded by the server's catalog, newest first (CAT-5)."""
        query: dict[str, Any] = {}
        if identifier is not None:
            query["namespace"], query["name"] = parse_identifier(identifier)
        if limit is not None:
            query["limit"] = int(limit)
        return self._commit_log(query)

    def _commit_log(self, query: dict[str, Any], *, retry: bool = True) -> list[CommitRecord]:
        path = "/commit-log" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        status, payload, _ = self._call("GET", path, retry=retry)
        if status >= 400:
            raise self._http.error(status, payload)
        rows = payload["commits"] if isinstance(payload, dict) else payload
        return [_record(r) for r in rows]

    # -- the commit's swap ---------------------------------------------------------
    def _commit(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        """Send the swap (again after a lost answer: the server applies it once, CATHTTP-9); True if committed.

        A refusal (pointer moved, write lease lost, batch already committed) returns False:
        ``commit_table``'s next session reads the pointer, the lease and the writer's progress
        again and raises the matching error, deleting the attempt's files.
        """
        path = f"/namespaces/{_q(namespace)}/tables/{_q(name)}/commit"
        body = {**body, "turn": self._turns.take((namespace, name)), "want_turn": True}  # CATHTTP-22
        started = time.monotonic()
        try:  # a 500 may have been raised after the transaction committed: unknown, so sent again
            status, payload, uncertain = self._call("POST", path, body, retry_status=(500,))
        except CatalogServerError as exc:
            return self._settle(namespace, name, body, exc)
        if status == 200 and isinstance(payload, dict) and payload.get("committed"):
            self._told(namespace, name, None if payload.get("replayed") else body["new"], started + POINTER_SECONDS)
            return True
        if status == 409:
            if isinstance(payload, dict) and payload.get("current"):
                self._saw_contention((namespace, name))
                until = time.monotonic() + REFUSED_POINTER_SECONDS
                if payload.get("turn"):  # no other commit is swapped before this client's next one
                    until = self._turns.given((namespace, name), str(payload["turn"]),
                                              float(payload.get("turn_seconds") or 0))
                self._told(namespace, name, str(payload["current"]), until)
            if isinstance(payload, dict) and payload.get("reason") == "write-lease-lost":
                self._forget_lease("write", body.get("lease_token"))  # the next session asks the server
            # The server answers a resend of an applied commit "committed"; checked here as well (COMMIT-11).
            return uncertain and self._logged(namespace, name, body["new"])
        raise self._http.error(status, payload)

    def _logged(self, namespace: str, name: str, new: str, *, retry: bool = True) -> bool:
        rows = self._commit_log({"namespace": namespace, "name": name, "new_metadata_location": new}, retry=retry)
        return any(r.new_metadata_location == new for r in rows)

    def _settle(self, namespace: str, name: str, body: dict[str, Any], problem: Exception) -> bool:
        """The outcome of a swap sent without an answer, from the pointer and the commit log (COMMIT-11).

        The pointer is read first: once it has moved away from ``expected`` the swap can no longer
        happen (a request still on its way would be refused), so the commit log tells whether it did
        (CATHTTP-13). While the pointer is still ``expected`` the outcome stays unknown.
        """
        try:
            current = self._table(namespace, name, retry=False)["metadata_location"]
            if current == body["new"]:
                return True
            if current != body["expected"]:
                return self._logged(namespace, name, body["new"], retry=False)
        except LakefmtError:
            pass
        raise CommitStateUnknownError(
            f"the commit of {namespace}.{name} to {body['new']} got no answer from the catalog server {self.url} "
            f"({problem}); whether it was applied is unknown, so its files are kept (COMMIT-11). Check "
            "the table's history once the server is back")

    # -- leases this client took: known live until they expire ---------------------------
    def _remember_lease(self, key: tuple[str, str, str], owner: str, expires_at: float | None) -> None:
        with self._memory_lock:
            if expires_at is None:
                self._own_leases.pop(key, None)
            else:
                self._own_leases[key] = (owner, expires_at)

    def _forget_lease(self, kind: str, key: object) -> None:
        with self._memory_lock:
            for known in [k for k in self._own_leases if k[1] == kind and k[2] == key]:
                del self._own_leases[known]

    def _known_lease(self, key: tuple[str, str, str]) -> tuple[str, float] | None:
        with self._memory_lock:
            known = self._own_leases.get(key)
        return known if known is not None and known[1] - time.time() > _LEASE_MARGIN else None


def _record(row: dict[str, Any]) -> CommitRecord:
    committed_at = row["committed_at"]
    if isinstance(committed_at, str):
        committed_at = datetime.fromisoformat(committed_at.replace("Z", "+00:00"))
    if committed_at.tzinfo is None:
        committed_at = committed_at.replace(tzinfo=timezone.utc)
    identifier = row.get("identifier") or f"{row['namespace']}.{row['name']}"
    summary = row.get("summary") or {}
    return CommitRecord(identifier, int(row["version"]), row.get("old_metadata_location"),
                        row["new_metadata_location"], committed_at, row["operation"], row.get("snapshot_id"),
                        json.loads(summary) if isinstance(summary, str) else dict(summary))
