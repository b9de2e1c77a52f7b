"""One "session" of a catalog served over HTTP: the methods of :class:`~lakefmt.catalog_file.CatalogSession`,
each one request to ``lakefmt serve`` (spec/catalog-http.md).

A :class:`RemoteSession` holds no lock across calls: what must be atomic happens in one
request (the swap with its lease and progress checks, CATHTTP-8; taking several leases,
CATHTTP-11). :class:`~lakefmt.catalog_client.RemoteCatalog` yields one per ``session()``.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakefmt import errors
from lakefmt.errors import ValidationError
from lakefmt.idempotency import WriterBatch

if TYPE_CHECKING:
    from lakefmt.catalog_client import RemoteCatalog


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


class RemoteSession:
    """The methods of :class:`lakefmt.catalog_file.CatalogSession`, each one request to the server.

    There is no lock across calls: what must be atomic happens in one request (the swap with
    its lease and progress checks, taking several leases).
    """

    def __init__(self, catalog: RemoteCatalog) -> None:
        self.catalog = catalog
        self.where = f"in catalog server {catalog.url} (warehouse {catalog.warehouse})"

    @property
    def con(self) -> Any:
        raise ValidationError(f"SQL on the catalog file runs only where the file is; the catalog server "
                              f"{self.catalog.url} offers the catalog's operations only (spec/catalog-http.md)")

    def no_such_table(self, namespace: str, name: str) -> errors.NoSuchTableError:
        return errors.NoSuchTableError(f"table {namespace}.{name} does not exist {self.where}")

    def current_location(self, namespace: str, name: str) -> str:
        """The table's pointer (from the server's last answer about it within :data:`POINTER_SECONDS`)."""
        return self.catalog._pointer(namespace, name)

    def compare_and_swap(self, namespace: str, name: str, expected: str, new: str, *,
                         operation: str, snapshot_id: int | None, summary: dict[str, Any],
                         writer_batch: WriterBatch | None = None, lease_token: str | None = None) -> bool:
        """The server swaps the pointer if it still equals ``expected`` (CAT-4), in one transaction with the
        lease check (COMMIT-19), the commit-log row (CAT-5) and the writer's progress (PROGRESS-3)."""
        self.catalog._check_writable(f"commit to {namespace}.{name}")
        batch = None if writer_batch is None else {"writer_id": writer_batch.writer_id,
                                                   "batch_id": writer_batch.batch_id}
        return self.catalog._commit(namespace, name, {
            "expected": expected, "new": new, "operation": operation, "snapshot_id": snapshot_id,
            "summary": summary, "writer_batch": batch, "lease_token": lease_token})

    def acquire_leases(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str, ttl: float) -> bool:
        self.catalog._check_writable(f"take a {kind} lease")
        started = time.time()
        acquired = bool(self.catalog._json("POST", "/leases/acquire", {
            "table_uuid": table_uuid, "kind": kind, "keys": list(keys), "owner": owner, "ttl": ttl})["acquired"])
        for key in keys:
            self.catalog._remember_lease((table_uuid, kind, key), owner, started + ttl if acquired else None)
        return acquired

    def release_leases(self, table_uuid: str, kind: str, keys: Sequence[str], *, owner: str) -> None:
        for key in keys:
            self.catalog._remember_lease((table_uuid, kind, key), owner, None)
        self.catalog._json("POST", "/leases/release",
                           {"table_uuid": table_uuid, "kind": kind, "keys": list(keys), "owner": owner})

    def renew_lease(self, table_uuid: str, kind: str, key: str, *, owner: str, ttl: float) -> bool:
        started = time.time()
        renewed = bool(self.catalog._json("POST", "/leases/renew", {
            "table_uuid": table_uuid, "kind": kind, "key": key, "owner": owner, "ttl": ttl})["renewed"])
        self.catalog._remember_lease((table_uuid, kind, key), owner, started + ttl if renewed else None)
        return renewed

    def lease_holder(self, table_uuid: str, kind: str, key: str) -> tuple[str, float] | None:
        """The owner of a lease and when it expires, or None.

        A lease this client took or renewed is answered from memory while it surely lives
        (its expiry was computed from the time the request was sent); the server checks a
        commit's lease again in the swap's transaction (COMMIT-19).
        """
        known = self.catalog._known_lease((table_uuid, kind, key))
        if known is not None:
            return known
        status, payload, _ = self.catalog._call("GET", f"/leases/{_q(table_uuid)}/{_q(kind)}/{_q(key)}")
        if status == 404:
            return None
        if status >= 400:
            raise self.catalog._http.error(status, payload)
        return str(payload["owner"]), float(payload["expires_at"])

    def live_leases(self, table_uuid: str, kind: str | None = None) -> list[tuple[str, str, str, str, float]]:
        query = "" if kind is None else f"?kind={_q(kind)}"
        answer = self.catalog._json("GET", f"/leases/{_q(table_uuid)}{query}")
        rows = answer["leases"] if isinstance(answer, dict) else answer
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4])) for r in rows]

    def last_committed_batch(self, table_uuid: str, writer_id: str, *, migrate: bool) -> int | None:
        """The writer's last committed batch on the table (PROGRESS-1); the server migrates if needed."""
        query = "?migrate=true" if migrate and not self.catalog.read_only else ""
        answer = self.catalog._json("GET", f"/writer-progress/{_q(table_uuid)}/{_q(writer_id)}{query}")
        batch = answer.get("batch_id") if isinstance(answer, dict) else answer
        return None if batch is None else int(batch)

