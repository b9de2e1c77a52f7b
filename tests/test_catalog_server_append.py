"""Appends the catalog server applies (spec/catalog-http.md, CATHTTP-17 … CATHTTP-20), with real parts:
``lakefmt serve`` as a real process on a loopback port, writers as real processes sharing only the
server's URL and the warehouse folder, raw HTTP requests for what a client would never send.

Run as ``python -m tests.test_catalog_server_append append <json spec>`` this module is the worker.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import lakefmt
from lakefmt.manifest import EntryStatus, ManifestEntry
from lakefmt.manifest_cache import read_list
from lakefmt.manifest_io import write_manifest
from tests.mp_workers import ROWS_PER_APPEND, TAGGED_SCHEMA, tagged_rows
from tests.test_catalog_client import (
    TOKEN,
    CatalogServer,
    Worker,
    assert_commit_log_chain,
    assert_linear_history,
    expected_rows,
    start_together,
    tagged_counts,
)

pytestmark = [pytest.mark.service, pytest.mark.multiprocess, pytest.mark.timeout(900)]
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
MODULE = "tests.test_catalog_server_append"


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def worker_main(role: str, spec: dict[str, Any]) -> None:
    """Append ``count`` tagged batches as writer ``w<proc>`` (batch ids 0, 1, ...), counting the commits the
    server applied (CATHTTP-17) besides those the writer's own swap committed."""
    from lakefmt.catalog_client import RemoteSession

    counts = Counter()
    on_server = RemoteSession.append_on_server

    def counted(self: RemoteSession, *args: Any, **kwargs: Any) -> Any:
        applied = on_server(self, *args, **kwargs)
        counts["server" if applied else "declined"] += 1
        return applied

    RemoteSession.append_on_server = counted  # type: ignore[method-assign]
    table = lakefmt.Catalog(spec["url"], server_appends=True).load_table(spec["table"])
    _emit(ready=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected go")
    proc = spec["proc"]
    for i in range(spec["count"]):
        snap = table.append(tagged_rows(proc, i), idempotency=(f"w{proc}", i))
        _emit(proc=proc, i=i, snapshot_id=snap.snapshot_id)
    _emit(server_appends=counts["server"], declined=counts["declined"])


@pytest.fixture
def served(tmp_path: Path) -> Any:
    """A server on a fresh local warehouse, and a client of it holding the table ``mp.tagged``."""
    warehouse = str(tmp_path / "wh")
    lakefmt.Catalog(warehouse, create=True)
    server = CatalogServer(tmp_path, warehouse)
    remote = lakefmt.Catalog(server.url, token=TOKEN)
    table = remote.create_table("mp.tagged", schema=TAGGED_SCHEMA, partition_by=["proc"])
    yield server, remote, table
    server.kill()


def table_files(t: lakefmt.Table) -> set[str]:
    return {f.path for f in t.io.list_files(t.location)}


def referenced_files(t: lakefmt.Table, metadata_locations: list[str]) -> set[str]:
    """Every file the table's history references: metadata files, manifest lists, manifests, data files."""
    out = set(metadata_locations)
    for snap in t.snapshots():
        out.add(f"{t.location}/{snap.manifest_list}")
        for m in read_list(t.io, f"{t.location}/{snap.manifest_list}"):
            out.add(f"{t.location}/{m.path}")
    out |= {f"{t.location}/{f.path}" for f in t.plan_files()}
    return out


def test_four_writers_append_through_the_server_side_path(served: Any, tmp_path: Path):
    """4 processes x 20 idempotent appends; a refused commit is handed to the server, which commits it on its
    current base under its lock (CATHTTP-17, CATHTTP-20, ROWDEL-10, COMMIT-7): every row once, 80 snapshots on
    one linear chain, each writer batch once, and no file of a refused attempt left behind (COMMIT-14)."""
    server, remote, created = served
    count = 20
    spec = {"url": server.url, "table": "mp.tagged", "count": count}
    workers = [Worker("append", {**spec, "proc": p}, tmp_path / f"writer-{p}", {"LAKEFMT_CATALOG_TOKEN": TOKEN},
                      module=MODULE) for p in range(4)]
    start_together(workers)
    lines = [line for w in workers for line in w.finish()]

    acks = [line for line in lines if "snapshot_id" in line]
    on_server = sum(line["server_appends"] for line in lines if "server_appends" in line)
    assert len(acks) == 4 * count
    assert sum(line["declined"] for line in lines if "declined" in line) == 0  # every refused one was an append
    assert on_server > 2 * count, f"only {on_server} of {4 * count} appends went through the server"
    t = remote.load_table("mp.tagged")
    chain = assert_linear_history(t)
    assert len(chain) == 4 * count and all(s.operation == "append" for s in chain)
    assert {a["snapshot_id"] for a in acks} == {s.snapshot_id for s in chain}
    assert tagged_counts(t) == expected_rows({(p, i) for p in range(4) for i in range(count)})
    batches = Counter((s.summary["lakefmt.writer-id"], int(s.summary["lakefmt.batch-id"])) for s in chain)
    assert batches == Counter({(f"w{p}", i): 1 for p in range(4) for i in range(count)})
    assert [t.last_committed_batch(f"w{p}") for p in range(4)] == [count - 1] * 4
    log = assert_commit_log_chain(remote, "mp.tagged", created.metadata_location, t.metadata_location)
    assert len(log) == 4 * count + 1
    # Refused attempts, on the clients and in the server, left no file: what is stored is what is referenced.
    assert table_files(t) == referenced_files(t, [r.new_metadata_location for r in log])


def written_manifest(t: lakefmt.Table, rows: Any, snapshot_id: int, *, data_path: str | None = None
                     ) -> tuple[str, list[Any]]:
    """Data files written and synced under the table's write lease, and a manifest of them as ADDED entries
    (COMMIT-2, COMMIT-3), as a client writes them before CATHTTP-17; ``data_path`` renames the entry."""
    files = t.write_data_files(rows)
    if data_path is not None:
        files = [dataclasses.replace(files[0], path=data_path)]
    rel = f"metadata/m-{t.write_token()}-{uuid.uuid4().hex[:16]}.manifest.parquet"
    entries = [ManifestEntry(EntryStatus.ADDED, f) for f in files]
    write_manifest(t.io, f"{t.location}/{rel}", rel, entries, t.metadata.spec, t.metadata.schema,
                   snapshot_id=snapshot_id, sequence_number=0, format_version=t.metadata.format_version)
    t.io.sync()
    return rel, files


def append_body(t: lakefmt.Table, manifest: str, snapshot_id: int, **extra: Any) -> dict[str, Any]:
    return {"table_uuid": t.metadata.table_uuid, "expected": t.metadata_location,
            "manifests": [{"path": manifest, "spec_id": t.metadata.spec.spec_id}], "snapshot_id": snapshot_id,
            "summary": {"source": "resend-test"}, "writer_batch": None, "lease_token": t.write_token(), **extra}


def test_a_resent_server_append_is_applied_once(served: Any):
    """CATHTTP-19: the same request sent again after its answer was lost — after another commit moved the
    pointer, and twice at the same time — is answered committed from the commit log and applied once."""
    server, remote, t = served
    path = "/namespaces/mp/tables/tagged/append"
    first_id = 1_000_001
    manifest, _ = written_manifest(t, tagged_rows(0, 0), first_id)
    body = append_body(t, manifest, first_id, writer_batch={"writer_id": "w", "batch_id": 7})
    status, first = server.request("POST", path, body, TOKEN)
    assert status == 200 and first["committed"] and not first["replayed"] and first["version"] == 2
    assert first["snapshot_id"] == first_id
    remote.load_table("mp.tagged").append(tagged_rows(1, 0))  # the pointer moves on: version 3
    status, again = server.request("POST", path, body, TOKEN)  # the first answer was "lost"
    assert status == 200 and again["replayed"] is True
    assert (again["version"], again["metadata_location"]) == (2, first["metadata_location"])
    # The same batch under another snapshot id is a replay of the batch, not of the request (PROGRESS-3).
    status, refused = server.request("POST", path, {**body, "snapshot_id": first_id + 1}, TOKEN)
    assert status == 409 and refused["reason"] == "already-committed" and refused["last_committed"] == 7

    # Two deliveries of one request at the same time: one applies it, the other is answered as a resend.
    second_id = 1_000_002
    t.refresh()
    manifest2, _ = written_manifest(t, tagged_rows(2, 0), second_id)
    body2 = append_body(t, manifest2, second_id)
    answers: list[tuple[int, Any]] = []
    barrier = threading.Barrier(2)

    def send() -> None:
        barrier.wait()
        answers.append(server.request("POST", path, body2, TOKEN))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [a[0] for a in answers] == [200, 200]
    assert sorted(a[1]["replayed"] for a in answers) == [False, True]
    assert len({(a[1]["version"], a[1]["metadata_location"]) for a in answers}) == 1

    t = remote.load_table("mp.tagged")
    assert tagged_counts(t) == Counter({(p, 0, k): 1 for p in range(3) for k in range(ROWS_PER_APPEND)})
    snaps = {s.snapshot_id: s for s in assert_linear_history(t)}
    assert len(snaps) == 3 and {first_id, second_id} <= set(snaps)
    assert snaps[first_id].summary["source"] == "resend-test" and snaps[first_id].summary["lakefmt.batch-id"] == "7"
    assert [r.snapshot_id for r in remote.commit_log("mp.tagged")].count(first_id) == 1
    assert t.last_committed_batch("w") == 7


def test_files_outside_the_table_are_refused_with_nothing_written(served: Any, tmp_path: Path):
    """CATHTTP-18: a manifest or data file outside the table's location, a missing manifest, another table's
    uuid, a missing data file and a token that is no writer token are refused before anything is written;
    the pointer does not move."""
    server, remote, t = served
    path = "/namespaces/mp/tables/tagged/append"
    manifest, files = written_manifest(t, tagged_rows(0, 0), 2_000_001)
    stray, _ = written_manifest(t, tagged_rows(0, 1), 2_000_002, data_path="../../elsewhere/data/x.parquet")
    gone, gone_files = written_manifest(t, tagged_rows(0, 2), 2_000_003)
    t.io.delete(f"{t.location}/{gone_files[0].path}")
    before, pointer = table_files(t), remote.current_metadata_location("mp.tagged")
    good = append_body(t, manifest, 2_000_001)
    cases = [
        (append_body(t, "../other-1234/metadata/m.manifest.parquet", 2_000_001), 400, "ValidationError"),
        (append_body(t, str(tmp_path / "m.manifest.parquet"), 2_000_001), 400, "ValidationError"),
        (append_body(t, "data/../metadata/" + manifest.rsplit("/", 1)[1], 2_000_001), 400, "ValidationError"),
        (append_body(t, stray, 2_000_002), 409, "ValidationError"),
        (append_body(t, "metadata/m-missing.manifest.parquet", 2_000_001), 409, "CorruptMetadataError"),
        (append_body(t, gone, 2_000_003), 409, "CommitFileMissingError"),
        ({**good, "table_uuid": str(uuid.uuid4())}, 409, "CommitConflictError"),
        ({**good, "manifests": [{"path": manifest, "spec_id": 99}]}, 409, "CorruptMetadataError"),
        ({**good, "unknown": 1}, 400, "ValidationError"),
        ({**good, "lease_token": "../../../escape"}, 400, "ValidationError"),  # it names the server's files
    ]
    for body, status, error in cases:
        got = server.request("POST", path, body, TOKEN)
        assert got[0] == status and got[1]["error"] == error and got[1]["message"], (body, got)
    assert table_files(t) == before and remote.current_metadata_location("mp.tagged") == pointer
    # The same manifest, asked properly, commits: the refusals left it usable.
    status, answer = server.request("POST", path, good, TOKEN)
    assert status == 200 and answer["committed"] and answer["version"] == 2
    assert {f.path for f in remote.load_table("mp.tagged").plan_files()} == {f.path for f in files}


def test_server_append_needs_the_token(served: Any):
    """CATHTTP-2: without the bearer token, or with another, the append is answered 401 and nothing is
    written."""
    server, remote, t = served
    manifest, _ = written_manifest(t, tagged_rows(0, 0), 3_000_001)
    before, pointer = table_files(t), remote.current_metadata_location("mp.tagged")
    body = append_body(t, manifest, 3_000_001)
    for token in (None, "not-the-token"):
        status, answer = server.request("POST", "/namespaces/mp/tables/tagged/append", body, token)
        assert status == 401 and "detail" in answer
    assert table_files(t) == before and remote.current_metadata_location("mp.tagged") == pointer


if __name__ == "__main__":
    worker_main(sys.argv[1], json.loads(sys.argv[2]))
