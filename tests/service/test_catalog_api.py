"""The catalog over HTTP (spec/catalog-http.md): every endpoint against a real catalog file, served by the
service's app on a loopback port, and once by a real `lakefmt serve` process."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.io import join
from tests.conftest import rows
from tests.service.conftest import TOKEN, Http, ServiceProcess

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from fastapi import FastAPI

from lakefmt.service.api import create_app
from lakefmt.service.catalog_api import catalog_router
from lakefmt.service.config import load_config
from lakefmt.service.daemon import CompactionService
from lakefmt.service.server import bind, url_of

P = "/catalog/v1"
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


class Served:
    """The service's app over ``catalog`` on a free loopback port, in a thread of this process.

    The socket listens before uvicorn starts, so requests queue until it serves them: no wait is needed.
    """

    def __init__(self, catalog: lakefmt.Catalog, token: str | None = TOKEN, *, router_only: bool = False) -> None:
        self.catalog = catalog
        if router_only:  # the catalog router alone, without the service (which needs a writable catalog)
            app = FastAPI()
            app.include_router(catalog_router(catalog, []))
        else:
            config = load_config(environ={}, warehouse=catalog.warehouse, catalog_path=catalog.catalog_path,
                                 token=token)
            app = create_app(CompactionService(config, catalog=catalog))
        self.sock = bind("127.0.0.1", 0)
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        self.http = Http(url_of(self.sock), token)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(catalog: lakefmt.Catalog | None = None, **kw: Any) -> Served:
        served = Served(catalog or lakefmt.Catalog(str(tmp_path / "wh"), create=True), **kw)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


def catalog_state(catalog: lakefmt.Catalog) -> dict[str, list[tuple]]:
    """Every row of the catalog's tables of CAT-3, to show that nothing was written."""
    with catalog.session() as s:
        return {t: sorted(s.con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in ("namespaces", "tables", "commit_log", "leases", "writer_progress")}


def first_metadata(catalog: lakefmt.Catalog, namespace: str, name: str) -> tuple[str, str]:
    """What a client does before creating a table (CAT-12): write its version 1 metadata file."""
    from lakefmt.table import new_table_metadata

    table_uuid = str(uuid.uuid4())
    location = join(catalog.warehouse, namespace, f"{name}-{table_uuid.replace('-', '')[:12]}")
    metadata = new_table_metadata(SCHEMA, location=location, table_uuid=table_uuid, partition_by=(), sort_by=(),
                                  properties={})
    metadata_location = join(location, "metadata", f"v000001-{uuid.uuid4()}.metadata.json")
    catalog.io.write_bytes(metadata_location, metadata.dump_bytes())
    return table_uuid, metadata_location


def next_metadata(table: lakefmt.Table) -> str:
    """A new metadata file over the table's current one, as a commit writes it before its swap (COMMIT-5)."""
    table.refresh()
    with table.catalog.session() as s:
        version = s.con.execute("SELECT version FROM tables WHERE namespace = ? AND name = ?",
                                list(table.identifier)).fetchone()[0]
    location = join(table.location, "metadata", f"v{version + 1:06d}-{uuid.uuid4()}.metadata.json")
    table.catalog.io.write_bytes(location, table.metadata.dump_bytes())
    return location


def commit_body(expected: str, new: str, **kw: Any) -> dict[str, Any]:
    return {"expected": expected, "new": new, "operation": "append", "snapshot_id": 7, "summary": {"k": "v"}, **kw}


def commits_to(catalog: lakefmt.Catalog, new: str) -> int:
    return sum(1 for r in catalog.commit_log() if r.new_metadata_location == new)


def test_config_and_namespaces(serve):
    """CATHTTP-4: /config names the warehouse and format versions. CATHTTP-5: namespaces as CAT-13 says.
    CATHTTP-3: errors name the lakefmt class; a refused request changes nothing."""
    served = serve()
    http, catalog = served.http, served.catalog
    assert http.get(P + "/config") == (200, {"warehouse": catalog.warehouse, "format-versions": [1, 2],
                                             "server": f"lakefmt {lakefmt.__version__}", "read-only": False})
    assert http.post(P + "/namespaces", {"namespace": "ops", "properties": {"owner": "flight"}}) == (
        200, {"namespace": "ops"})
    assert catalog.list_namespaces() == ["ops"]
    status, body = http.post(P + "/namespaces", {"namespace": "ops"})
    assert (status, body) == (409, {"error": "NamespaceExistsError", "message": "namespace ops already exists"})
    status, body = http.post(P + "/namespaces", {"namespace": "bad name"})
    assert status == 400 and body["error"] == "InvalidNameError" and "'bad name'" in body["message"]
    assert http.get(P + "/namespaces") == (200, {"namespaces": ["ops"]})
    catalog.create_table("ops.events", schema=SCHEMA)
    status, body = http.request("DELETE", P + "/namespaces/ops")
    assert (status, body["error"]) == (409, "ValidationError") and "not empty" in body["message"]
    status, body = http.request("DELETE", P + "/namespaces/nope")
    assert (status, body) == (404, {"error": "NoSuchNamespaceError", "message": "namespace nope does not exist"})
    catalog.drop_table("ops.events")
    assert http.request("DELETE", P + "/namespaces/ops") == (200, {"dropped": True})
    assert catalog.list_namespaces() == []


def test_create_load_list_rename_and_drop_tables(serve):
    """CATHTTP-7: the client writes the first metadata file, the server checks it and inserts the row and the
    create commit (CAT-12). CATHTTP-6: load, list, rename (CAT-7) and drop (CAT-8) as on a local catalog."""
    served = serve()
    http, catalog = served.http, served.catalog
    table_uuid, location = first_metadata(catalog, "ops", "events")
    before = catalog_state(catalog)
    for body, status, error in [
            ({"name": "events", "table_uuid": table_uuid, "metadata_location": location.replace("v000001", "v000002")},
             400, "ValidationError"),
            ({"name": "events", "table_uuid": table_uuid, "metadata_location": location.replace(".metadata", "x.metadata")},
             409, "CorruptMetadataError"),
            ({"name": "events", "table_uuid": str(uuid.uuid4()), "metadata_location": location}, 409, "ValidationError"),
            ({"name": "events-1", "table_uuid": table_uuid, "metadata_location": location}, 400, "InvalidNameError")]:
        got = http.post(P + "/namespaces/ops/tables", body)
        assert (got[0], got[1]["error"]) == (status, error), got
    assert catalog_state(catalog) == before  # refused: nothing written
    assert http.post(P + "/namespaces/ops/tables", {"name": "events", "table_uuid": table_uuid,
                                                    "metadata_location": location}) == (
        200, {"table_uuid": table_uuid, "metadata_location": location, "version": 1})
    [create] = catalog.commit_log("ops.events")
    assert (create.operation, create.version, create.old_metadata_location, create.new_metadata_location) == (
        "create", 1, None, location)
    t = catalog.load_table("ops.events")  # a real table: append and read it locally
    t.append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=SCHEMA))
    assert rows(catalog.load_table("ops.events").scan().to_arrow()) == [(1, "a"), (2, "b")]
    again_uuid, again = first_metadata(catalog, "ops", "events")
    status, body = http.post(P + "/namespaces/ops/tables", {"name": "events", "table_uuid": again_uuid,
                                                            "metadata_location": again})
    assert (status, body["error"]) == (409, "TableExistsError")
    status, body = http.post(P + "/namespaces/ops/tables", {"name": "other", "table_uuid": table_uuid,
                                                            "metadata_location": location})
    assert (status, body["error"]) == (409, "TableExistsError") and "LAYOUT-11" in body["message"]

    assert http.get(P + "/namespaces/ops/tables/events") == (200, {
        "table_uuid": table_uuid, "metadata_location": catalog.current_metadata_location("ops.events"), "version": 2})
    status, body = http.get(P + "/namespaces/ops/tables/missing")
    assert (status, body["error"]) == (404, "NoSuchTableError") and body["message"].startswith(
        "table ops.missing does not exist")
    assert http.get(P + "/namespaces/ops/tables") == (200, {"tables": ["ops.events"]})
    catalog.create_table("ops.other", schema=SCHEMA)
    status, body = http.post(P + "/tables/rename", {"from": "ops.events", "to": "ops.other"})
    assert (status, body["error"]) == (409, "TableExistsError")
    status, body = http.post(P + "/tables/rename", {"from": "ops.missing", "to": "arch.x"})
    assert (status, body["error"]) == (404, "NoSuchTableError")
    assert http.post(P + "/tables/rename", {"from": "ops.events", "to": "arch.events"}) == (200, {"renamed": True})
    assert catalog.list_tables() == ["arch.events", "ops.other"]
    assert rows(catalog.load_table("arch.events").scan().to_arrow()) == [(1, "a"), (2, "b")]

    folder = Path(catalog.load_table("arch.events").location)
    assert http.request("DELETE", P + "/namespaces/arch/tables/events?purge=true") == (200, {"dropped": True})
    assert not catalog.table_exists("arch.events") and not [p for p in folder.rglob("*") if p.is_file()]
    kept = Path(catalog.load_table("ops.other").location)
    assert http.request("DELETE", P + "/namespaces/ops/tables/other") == (200, {"dropped": True})
    assert catalog.list_tables() == [] and kept.exists()  # no purge: the files stay (CAT-8)
    assert http.request("DELETE", P + "/namespaces/ops/tables/other")[1]["error"] == "NoSuchTableError"


def test_commit_swaps_refuses_a_moved_pointer_and_answers_a_replay_once(serve):
    """CATHTTP-8, CATHTTP-10: a commit is the CAS of CAT-4 with its commit-log row; from a stale base it is
    refused with the current pointer. CATHTTP-9: the same request sent again — at once, or after other
    commits followed — answers committed and is applied once."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    base = catalog.current_metadata_location("ops.events")
    new = next_metadata(t)
    request = commit_body(base, new)
    assert http.post(P + "/namespaces/ops/tables/events/commit", request) == (
        200, {"committed": True, "version": 2, "replayed": False, "reason": None, "current": None,
              "batch_id": None, "turn": None, "turn_seconds": None, "last_committed": None, "error": None,
              "message": None})
    assert catalog.current_metadata_location("ops.events") == new
    [record] = [r for r in catalog.commit_log("ops.events") if r.new_metadata_location == new]
    assert (record.version, record.old_metadata_location, record.operation, record.snapshot_id, record.summary) == (
        2, base, "append", 7, {"k": "v"})

    status, body = http.post(P + "/namespaces/ops/tables/events/commit", request)  # the answer was lost: again
    assert status == 200 and (body["committed"], body["version"], body["replayed"]) == (True, 2, True)
    other = next_metadata(t)
    before = catalog_state(catalog)
    status, body = http.post(P + "/namespaces/ops/tables/events/commit", commit_body(base, other))
    assert status == 409 and body["committed"] is False
    assert (body["reason"], body["current"], body["error"]) == ("moved", new, "CommitConflictError")
    assert catalog_state(catalog) == before

    newer = next_metadata(t)
    assert http.post(P + "/namespaces/ops/tables/events/commit", commit_body(new, newer))[1]["version"] == 3
    status, body = http.post(P + "/namespaces/ops/tables/events/commit", request)  # a late retry
    assert status == 200 and (body["committed"], body["version"], body["replayed"]) == (True, 2, True)
    assert commits_to(catalog, new) == 1 and catalog.current_metadata_location("ops.events") == newer

    status, body = http.post(P + "/namespaces/ops/tables/nope/commit", commit_body(base, other))
    assert (status, body["error"]) == (404, "NoSuchTableError")
    status, body = http.post(P + "/namespaces/ops/tables/events/commit", commit_body(newer, newer))
    assert (status, body["error"]) == (400, "ValidationError")
    assert catalog.current_metadata_location("ops.events") == newer


def test_commit_checks_the_write_lease_in_its_session(serve):
    """CATHTTP-8 step 3 (COMMIT-19): a commit with a lease token swaps only while that write lease is live and
    the token's own; otherwise 409 write-lease-lost and nothing is written. A retry of a commit applied under
    the lease still answers committed after the lease is gone (CATHTTP-9)."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    uuid_ = t.metadata.table_uuid
    url = P + "/namespaces/ops/tables/events/commit"
    assert http.post(P + "/leases/acquire", {"table_uuid": uuid_, "kind": "write", "keys": ["tok1"], "owner": "tok1",
                                             "ttl": 600}) == (200, {"acquired": True})
    base = catalog.current_metadata_location("ops.events")
    new = next_metadata(t)
    applied = commit_body(base, new, lease_token="tok1")
    assert http.post(url, applied)[1]["committed"] is True

    with catalog.session() as s:
        s.acquire_leases(uuid_, "write", ["expired"], owner="expired", ttl=-1)  # expired a second ago
        s.acquire_leases(uuid_, "write", ["taken"], owner="someone-else", ttl=600)
    for token in ("expired", "taken", "never-taken"):
        before = catalog_state(catalog)
        status, body = http.post(url, commit_body(new, next_metadata(t), lease_token=token))
        assert status == 409 and (body["committed"], body["reason"], body["error"]) == (
            False, "write-lease-lost", "WriteLeaseLostError"), token
        assert token in body["message"]
        assert catalog_state(catalog) == before and catalog.current_metadata_location("ops.events") == new

    assert http.post(P + "/leases/release", {"table_uuid": uuid_, "kind": "write", "keys": ["tok1"],
                                             "owner": "tok1"}) == (200, {"released": True})
    status, body = http.post(url, applied)
    assert status == 200 and (body["committed"], body["replayed"]) == (True, True)
    assert commits_to(catalog, new) == 1


def test_commit_records_writer_progress_and_refuses_a_replayed_batch(serve):
    """CATHTTP-8 step 4 (PROGRESS-3): an idempotent commit records its batch in the swap's transaction; a batch
    not above the last one is 409 already-committed with the last batch id. CATHTTP-12: the progress endpoint
    reads it. CATHTTP-9: the same request retried is committed, not already-committed."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    uuid_ = t.metadata.table_uuid
    url = P + "/namespaces/ops/tables/events/commit"
    writer = "stream/query-7 é"  # printable, with a slash: percent-encoded in the progress path
    progress = f"{P}/writer-progress/{uuid_}/{quote(writer, safe='')}"
    assert http.get(progress) == (200, {"batch_id": None})
    base = catalog.current_metadata_location("ops.events")
    new = next_metadata(t)
    first = commit_body(base, new, writer_batch={"writer_id": writer, "batch_id": 5})
    assert http.post(url, first)[1]["committed"] is True
    assert http.get(progress) == (200, {"batch_id": 5})
    assert t.last_committed_batch(writer) == 5

    for batch in (5, 4):
        before = catalog_state(catalog)
        status, body = http.post(url, commit_body(new, next_metadata(t),
                                                  writer_batch={"writer_id": writer, "batch_id": batch}))
        assert status == 409, body
        assert (body["reason"], body["error"], body["batch_id"], body["last_committed"]) == (
            "already-committed", "AlreadyCommittedError", 5, 5)
        assert catalog_state(catalog) == before
    status, body = http.post(url, first)
    assert status == 200 and body["replayed"] is True
    newer = next_metadata(t)
    assert http.post(url, commit_body(new, newer, writer_batch={"writer_id": writer, "batch_id": 6}))[0] == 200
    assert http.get(progress + "?migrate=true") == (200, {"batch_id": 6})
    status, body = http.post(url, commit_body(newer, next_metadata(t), writer_batch={"writer_id": "\x07",
                                                                                       "batch_id": 7}))
    assert (status, body["error"]) == (400, "ValidationError") and "PROGRESS-2" in body["message"]


def test_leases_between_owners(serve):
    """CATHTTP-11 (CAT-9): a live lease of one owner keeps another out, all keys or none; renew extends only
    the owner's live lease; release drops only the owner's rows; an expired lease is free to take."""
    served = serve()
    http = served.http
    u = str(uuid.uuid4())
    part = "0:day=2026-11-01/mission=3"  # a partition key holds '/' and '='

    def acquire(owner: str, keys: list[str], ttl: float = 600) -> bool:
        status, body = http.post(P + "/leases/acquire", {"table_uuid": u, "kind": "partition", "keys": keys,
                                                         "owner": owner, "ttl": ttl})
        assert status == 200, body
        return body["acquired"]

    holder = f"{P}/leases/{u}/partition/{quote(part, safe='')}"
    assert acquire("a", ["k1", part]) is True
    assert acquire("b", ["k1"]) is False
    assert acquire("b", ["k3", "k1"]) is False  # all or none: k3 was not taken
    assert acquire("a", ["k1"]) is True  # the same owner renews by taking again
    status, body = http.get(holder)
    assert status == 200 and body["owner"] == "a" and body["expires_at"] > time.time() + 500
    status, live = http.get(f"{P}/leases/{u}?kind=partition")
    assert status == 200 and [row[2:4] for row in live] == [[part, "a"], ["k1", "a"]]
    assert http.get(f"{P}/leases/{u}?kind=write") == (200, [])
    renew = {"table_uuid": u, "kind": "partition", "key": "k1", "ttl": 900}
    assert http.post(P + "/leases/renew", {**renew, "owner": "b"}) == (200, {"renewed": False})
    assert http.post(P + "/leases/renew", {**renew, "owner": "a"}) == (200, {"renewed": True})
    assert http.post(P + "/leases/release", {"table_uuid": u, "kind": "partition", "keys": ["k1", part],
                                             "owner": "b"}) == (200, {"released": True})
    assert http.get(holder)[1]["owner"] == "a"  # b's release left a's leases alone
    http.post(P + "/leases/release", {"table_uuid": u, "kind": "partition", "keys": [part], "owner": "a"})
    status, body = http.get(holder)
    assert (status, body["error"]) == (404, "NoSuchLease")
    with served.catalog.session() as s:
        s.acquire_leases(u, "partition", ["k9"], owner="a", ttl=-1)  # a's lease expired a second ago
    assert acquire("b", ["k9"]) is True
    assert http.get(f"{P}/leases/{u}/partition/k9")[1]["owner"] == "b"
    status, body = http.post(P + "/leases/acquire", {"table_uuid": u, "kind": "partition", "keys": ["x"],
                                                     "owner": "a", "ttl": 0})
    assert (status, body["error"]) == (400, "ValidationError")


def test_commit_log_endpoint(serve):
    """CATHTTP-13: the commit log as CAT-5 records it, newest first, filtered by table, by new metadata location
    (COMMIT-11's lookup) and limited."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    catalog.create_table("ops.other", schema=SCHEMA)
    t.append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    status, body = http.get(P + "/commit-log?namespace=ops&name=events")
    assert status == 200
    local = catalog.commit_log("ops.events")
    assert [(c["version"], c["operation"], c["new_metadata_location"], c["old_metadata_location"], c["snapshot_id"],
             c["summary"]) for c in body["commits"]] == [
        (r.version, r.operation, r.new_metadata_location, r.old_metadata_location, r.snapshot_id, r.summary)
        for r in local]
    assert [c["committed_at"] for c in body["commits"]] == [r.committed_at.isoformat() for r in local]
    assert body["commits"][0]["summary"]["added-records"] == "1"
    assert len(http.get(P + "/commit-log")[1]["commits"]) == 3
    assert [c["identifier"] for c in http.get(P + "/commit-log?limit=1")[1]["commits"]] == ["ops.events"]
    location = catalog.current_metadata_location("ops.events")
    status, body = http.get(P + "/commit-log?new_metadata_location=" + quote(location, safe=""))
    assert [c["version"] for c in body["commits"]] == [2]
    assert http.get(P + "/commit-log?new_metadata_location=nowhere") == (200, {"commits": []})


def test_wrong_or_missing_token_is_401_and_writes_nothing(serve):
    """CATHTTP-2 (SERVICE-10): every catalog endpoint answers 401 without the right bearer token, and nothing is
    written to the catalog."""
    served = serve()
    http, catalog = served.http, served.catalog
    t = catalog.create_table("ops.events", schema=SCHEMA)
    u = t.metadata.table_uuid
    _, location = first_metadata(catalog, "ops", "fresh")
    base = catalog.current_metadata_location("ops.events")
    calls = [("GET", "/config", None), ("GET", "/namespaces", None), ("POST", "/namespaces", {"namespace": "x"}),
             ("DELETE", "/namespaces/ops", None), ("GET", "/namespaces/ops/tables", None),
             ("POST", "/namespaces/ops/tables", {"name": "fresh", "table_uuid": u, "metadata_location": location}),
             ("GET", "/namespaces/ops/tables/events", None), ("DELETE", "/namespaces/ops/tables/events", None),
             ("POST", "/tables/rename", {"from": "ops.events", "to": "ops.renamed"}),
             ("POST", "/namespaces/ops/tables/events/commit", commit_body(base, next_metadata(t))),
             ("POST", "/namespaces/ops/tables/events/turn/release", {"turn": "t"}),
             ("POST", "/leases/acquire", {"table_uuid": u, "kind": "write", "keys": ["k"], "owner": "o", "ttl": 60}),
             ("POST", "/leases/release", {"table_uuid": u, "kind": "write", "keys": ["k"], "owner": "o"}),
             ("POST", "/leases/renew", {"table_uuid": u, "kind": "write", "key": "k", "owner": "o", "ttl": 60}),
             ("GET", f"/leases/{u}", None), ("GET", f"/leases/{u}/write/k", None),
             ("GET", f"/writer-progress/{u}/w?migrate=true", None), ("GET", "/commit-log", None)]
    before = catalog_state(catalog)
    for method, path, body in calls:
        for token in (None, "wrong", TOKEN + "x"):
            status, answer = http.request(method, P + path, body, token=token)
            assert (status, answer) == (401, {"detail": "missing or wrong bearer token"}), (method, path, token)
    assert catalog_state(catalog) == before


def test_bad_requests_and_a_read_only_catalog(serve, tmp_path):
    """CATHTTP-3: a malformed body, an unknown field or query parameter is 400 ValidationError; a read-only catalog
    (CAT-18) refuses every write with 403 ReadOnlyCatalogError and still answers reads (the router alone: the
    service itself needs a writable catalog)."""
    served = serve()
    http, catalog = served.http, served.catalog
    catalog.create_table("ops.events", schema=SCHEMA)
    status, body = http.request("POST", P + "/namespaces", None, headers={"Content-Type": "application/json"})
    assert (status, body["error"]) == (400, "ValidationError")
    request = urllib.request.Request(http.url + P + "/namespaces", data=b"{not json", method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(request, timeout=30)
    assert bad.value.code == 400 and json.loads(bad.value.read())["error"] == "ValidationError"
    status, body = http.post(P + "/namespaces", {"namespace": "x", "colour": "red"})
    assert (status, body["error"]) == (400, "ValidationError") and "colour" in body["message"]
    status, body = http.get(P + "/namespaces?colour=red")
    assert (status, body["error"]) == (400, "ValidationError") and "colour" in body["message"]
    status, body = http.post(P + "/tables/rename", {"from": "ops.events", "to": "ops.a.b"})
    assert (status, body["error"]) == (400, "InvalidNameError")

    read_only = serve(lakefmt.Catalog(catalog.warehouse, read_only=True), router_only=True)
    before = catalog_state(catalog)
    status, body = read_only.http.post(P + "/namespaces", {"namespace": "x"})
    assert (status, body["error"]) == (403, "ReadOnlyCatalogError")
    base = catalog.current_metadata_location("ops.events")
    status, body = read_only.http.post(P + "/namespaces/ops/tables/events/commit",
                                       commit_body(base, next_metadata(catalog.load_table("ops.events"))))
    assert (status, body["error"]) == (403, "ReadOnlyCatalogError")
    assert read_only.http.get(P + "/config")[1]["read-only"] is True
    assert read_only.http.get(P + "/namespaces/ops/tables/events")[1]["metadata_location"] == base
    assert catalog_state(catalog) == before


def test_real_lakefmt_serve_commits_and_replays_across_a_restart(tmp_path):
    """CATHTTP-1, CATHTTP-2: `lakefmt serve` serves the catalog on a loopback port behind its token.
    CATHTTP-9: a commit applied before the server was killed (SIGKILL) answers committed, once, when the
    same request reaches the restarted server."""
    warehouse = tmp_path / "wh"
    catalog = lakefmt.Catalog(str(warehouse), create=True)
    t = catalog.create_table("ops.events", schema=SCHEMA)
    t.append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    proc = ServiceProcess(warehouse, tmp_path / "serve-1.log", args=["--no-schedule"])
    try:
        http = proc.http
        assert http.get("/healthz", token=None) == (200, {"status": "ok"})
        assert http.get(P + "/namespaces", token=None)[0] == 401
        assert http.get(P + "/config")[1]["warehouse"] == catalog.warehouse
        status, row = http.get(P + "/namespaces/ops/tables/events")
        assert status == 200 and row["version"] == 2 and row["table_uuid"] == t.metadata.table_uuid
        new = next_metadata(t)
        request = commit_body(row["metadata_location"], new, writer_batch={"writer_id": "w", "batch_id": 1})
        assert http.post(P + "/namespaces/ops/tables/events/commit", request)[1]["version"] == 3
    finally:
        proc.kill()  # SIGKILL: no clean shutdown
    proc = ServiceProcess(warehouse, tmp_path / "serve-2.log", args=["--no-schedule"])
    try:
        status, body = proc.http.post(P + "/namespaces/ops/tables/events/commit", request)
        assert status == 200 and (body["committed"], body["version"], body["replayed"]) == (True, 3, True)
        assert proc.terminate() == 0
    finally:
        proc.kill()
    assert commits_to(catalog, new) == 1 and catalog.current_metadata_location("ops.events") == new
    assert rows(catalog.load_table("ops.events").scan().to_arrow()) == [(1, "a")]
    assert TOKEN not in (tmp_path / "serve-1.log").read_text() + (tmp_path / "serve-2.log").read_text()
