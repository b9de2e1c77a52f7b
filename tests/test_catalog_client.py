"""The catalog over HTTP (spec/catalog-http.md) with real parts: ``lakefmt serve`` as a real process on a
loopback port with a token, and writers as real processes, each in its own working directory, sharing
nothing but the server's URL and the warehouse's store (a moto S3 server, or a local folder).

The server is restarted on the same catalog file and port after a SIGKILL; readiness is its ``/healthz``
answering, and every other wait is on an event (a line from a worker, a pause file of lakefmt.hooks).
Run as ``python -m tests.test_catalog_client <role> <json spec>`` this module is the worker.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import lakefmt
import lakefmt.leases
from lakefmt.catalog_client import CatalogUnauthorizedError, RemoteCatalog
from tests.conftest import rows
from tests.mp_workers import ROWS_PER_APPEND, TAGGED_SCHEMA, tagged_rows

REPO = Path(__file__).resolve().parents[1]
TOKEN = "catalog-token-5c2e81d0"


# -- the server ---------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without LAKEFMT_* variables, lakefmt importable from this checkout, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFMT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**env, **(extra or {})}


def storage_args(options: dict[str, Any] | None, prefix: str = "") -> list[str]:
    """``--storage-option key=value`` arguments of a (nested) storage options dict."""
    out: list[str] = []
    for key, value in (options or {}).items():
        if isinstance(value, dict):
            out += storage_args(value, f"{prefix}{key}.")
        else:
            out += ["--storage-option", f"{prefix}{key}={value}"]
    return out


class CatalogServer:
    """``lakefmt serve --no-schedule`` on 127.0.0.1:<port>, serving one catalog file; killed and restarted
    on the same file and port."""

    def __init__(self, root: Path, warehouse: str, *, catalog_path: str | None = None,
                 storage_options: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ("--no-schedule",), token: str | None = TOKEN) -> None:
        self.root = root / "server"  # the "server machine": its working directory and logs
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "lakefmt.cli", "serve", "--warehouse", warehouse, "--host", "127.0.0.1",
                     "--port", str(self.port), *(["--catalog-path", catalog_path] if catalog_path else []),
                     *storage_args(storage_options), *args]
        self.token = token
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start(env)

    def start(self, env: dict[str, str] | None = None) -> None:
        extra = {"LAKEFMT_SERVICE_TOKEN": self.token} if self.token else {}
        self.starts += 1
        self.log_path = self.root / f"serve-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, env=clean_env({**extra, **(env or {})}), cwd=self.root,
                                         stdout=subprocess.DEVNULL, stderr=log)
        self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        """Poll ``/healthz`` until it answers 200 (no token needed there, SERVICE-10)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"lakefmt serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"lakefmt serve did not answer /healthz within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def request(self, method: str, path: str, body: Any = None, token: str | None = None, *,
                prefix: str = "/catalog/v1") -> tuple[int, Any]:
        """A raw request under ``prefix`` (no client): status and decoded answer."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{prefix}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture
def servers() -> Any:
    """Start CatalogServer processes; any still running at teardown are killed (by their pid)."""
    started: list[CatalogServer] = []

    def start(*args: Any, **kwargs: Any) -> CatalogServer:
        started.append(CatalogServer(*args, **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.kill()


# -- worker processes -----------------------------------------------------------------------------------
class Worker:
    """``python -m <module> <role> <spec>`` in its own working directory; JSON lines out."""

    def __init__(self, role: str, spec: dict[str, Any], cwd: Path, env: dict[str, str] | None = None, *,
                 module: str = "tests.test_catalog_client") -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.role, self.cwd = role, cwd
        self.stderr = cwd / "stderr.log"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", module, role, json.dumps(spec)],
                                         cwd=cwd, env=clean_env(env), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err)
        self.lines: list[dict[str, Any]] = []

    def next_line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = self.proc.stdout.readline()
        if not raw:
            self.proc.wait(60)
            raise AssertionError(f"{self.role} worker ended (status {self.proc.returncode}):\n"
                                 f"{self.stderr.read_text(errors='replace')[-4000:]}")
        line = json.loads(raw)
        self.lines.append(line)
        return line

    def wait_for(self, key: str) -> dict[str, Any]:
        while True:
            line = self.next_line()
            if key in line:
                return line

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{word}\n".encode())
        self.proc.stdin.flush()

    def finish(self, timeout: float = 600) -> list[dict[str, Any]]:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines += [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        assert self.proc.returncode == 0, (self.role, self.proc.returncode,
                                           self.stderr.read_text(errors="replace")[-4000:])
        return self.lines


def start_together(workers: list[Worker]) -> None:
    """Every worker has loaded its table: let them all go at once."""
    for w in workers:
        w.wait_for("ready")
    for w in workers:
        w.send("go")


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _await(word: str) -> None:
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit(f"expected {word!r} on stdin, got {line!r}")


def worker_main(role: str, spec: dict[str, Any]) -> None:
    """A worker: opens the catalog by URL (token from $LAKEFMT_CATALOG_TOKEN) and does its role."""
    catalog = lakefmt.Catalog(spec["url"], storage_options=spec.get("storage_options"))
    table = catalog.load_table(spec["table"])
    _emit(ready=True)
    _await("go")
    if role == "append":  # tagged batches (proc, i); a pause after `pause_after` of them
        proc = spec["proc"]
        for i in range(spec["count"]):
            if i == spec.get("pause_after"):
                _emit(paused=i)
                _await("go")
            try:
                snap = table.append(tagged_rows(proc, i))
            except lakefmt.CommitStateUnknownError as exc:
                _emit(unknown=i, error=str(exc))
                table.refresh()
                continue
            _emit(proc=proc, i=i, snapshot_id=snap.snapshot_id, metadata_location=table.metadata_location)
    elif role == "maintain":  # compaction and expiry rounds until told to stop
        stop = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
        compacted = expired = 0
        while not stop.is_set():
            result = table.compaction.run(min_age_seconds=0, min_input_files=2)
            if result.groups_committed:
                compacted += result.groups_committed
                _emit(compacted=compacted)
            gone = table.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=3).expired_snapshot_ids
            if gone:
                expired += len(gone)
                _emit(expired=expired)
        _emit(done=True, compacted=compacted, expired=expired)
    else:
        raise SystemExit(f"unknown role {role}")


# -- checks -------------------------------------------------------------------------------------------
def assert_linear_history(t: lakefmt.Table) -> list[lakefmt.Snapshot]:
    """Every retained snapshot is on one chain from the current one, sequence numbers rising by one."""
    chain = list(t.metadata.ancestors(t.metadata.current_snapshot_id))
    assert {s.snapshot_id for s in chain} == {s.snapshot_id for s in t.snapshots()}
    for child, parent in itertools.pairwise(chain):
        assert child.parent_snapshot_id == parent.snapshot_id
        assert child.sequence_number == parent.sequence_number + 1
    return chain


def tagged_counts(t: lakefmt.Table) -> Counter[tuple[int, int, int]]:
    got = t.scan().to_arrow()
    return Counter(zip(got.column("proc").to_pylist(), got.column("i").to_pylist(), got.column("k").to_pylist()))


def expected_rows(batches: set[tuple[int, int]]) -> Counter[tuple[int, int, int]]:
    return Counter((p, i, k) for p, i in batches for k in range(ROWS_PER_APPEND))


def acknowledged(workers: list[Worker]) -> list[dict[str, Any]]:
    return [line for w in workers for line in w.lines if "snapshot_id" in line]


def assert_commit_log_chain(catalog: lakefmt.Catalog, identifier: str, created: str, current: str) -> list[Any]:
    """One commit-log row per version, each moving the pointer on from the previous one (CAT-5)."""
    chain = sorted(catalog.commit_log(identifier), key=lambda r: r.version)
    assert chain[0].new_metadata_location == created and chain[0].operation == "create"
    assert [r.version for r in chain] == list(range(1, len(chain) + 1))
    for prev, rec in itertools.pairwise(chain):
        assert rec.old_metadata_location == prev.new_metadata_location
    assert chain[-1].new_metadata_location == current
    assert len({r.new_metadata_location for r in chain}) == len(chain)
    return chain


# -- tests --------------------------------------------------------------------------------------------
pytestmark = [pytest.mark.service, pytest.mark.multiprocess, pytest.mark.timeout(900)]
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server on a local warehouse, for the tests that need no restart."""
    root = tmp_path_factory.mktemp("served")
    lakefmt.Catalog(str(root / "wh"), create=True)
    server = CatalogServer(root, str(root / "wh"))
    yield server, str(root / "wh")
    server.kill()


@pytest.mark.s3
def test_four_processes_append_through_the_server_to_s3(tmp_path: Path, s3_server: dict[str, Any], servers: Any):
    """4 processes x 50 appends, sharing only the server's URL and S3: 200 snapshots on one linear
    chain, every row once, one commit-log row per commit (CATHTTP-8, CATHTTP-14, CAT-4, CAT-5, COMMIT-7)."""
    options = dict(s3_server["options"])
    prefix = f"s3://{s3_server['bucket']}/{uuid.uuid4().hex}"
    catalog_path = str(tmp_path / "server" / "catalog.duckdb")
    lakefmt.Catalog(prefix, catalog_path=catalog_path, storage_options=options, create=True)
    server = servers(tmp_path, prefix, catalog_path=catalog_path, storage_options=options)
    remote = lakefmt.Catalog(server.url, token=TOKEN, storage_options=options)
    assert isinstance(remote, RemoteCatalog) and remote.warehouse == prefix
    created = remote.create_table("mp.tagged", schema=TAGGED_SCHEMA, partition_by=["proc"])
    spec = {"url": server.url, "table": "mp.tagged", "storage_options": options, "count": 50}
    workers = [Worker("append", {**spec, "proc": p}, tmp_path / f"writer-{p}", {"LAKEFMT_CATALOG_TOKEN": TOKEN})
               for p in range(4)]
    start_together(workers)
    for w in workers:
        w.finish()

    acks = acknowledged(workers)
    assert len(acks) == 200 and not [line for w in workers for line in w.lines if "unknown" in line]
    t = remote.load_table("mp.tagged")
    chain = assert_linear_history(t)
    assert len(chain) == 200 and all(s.operation == "append" for s in chain)
    assert {a["snapshot_id"] for a in acks} == {s.snapshot_id for s in chain}
    assert tagged_counts(t) == expected_rows({(p, i) for p in range(4) for i in range(50)})
    log = assert_commit_log_chain(remote, "mp.tagged", created.metadata_location, t.metadata_location)
    assert len(log) == 201 and {r.snapshot_id for r in log[1:]} == {s.snapshot_id for s in chain}
    # Lost races left no files behind: the table's data files in S3 are exactly the live ones.
    on_s3 = {f.path.split("/data/", 1)[1] for f in remote.io.list_files(f"{t.location}/data")}
    assert on_s3 == {f.path.split("data/", 1)[1] for f in t.plan_files()}
    server.stop()


@pytest.mark.parametrize("point", ["catalog-http-before-swap", "catalog-http-after-swap"])
def test_server_killed_mid_commit_and_restarted_loses_and_repeats_nothing(tmp_path: Path, servers: Any,
                                                                          point: str):
    """SIGKILL while a commit is inside the server (before its swap, or after it with the answer unsent),
    restart on the same catalog file: the clients' resends are applied once (CATHTTP-1, CATHTTP-9,
    CATHTTP-14, COMMIT-11)."""
    warehouse = str(tmp_path / "wh")
    lakefmt.Catalog(warehouse, create=True)
    pause = tmp_path / "paused"
    server = servers(tmp_path, warehouse)
    remote = lakefmt.Catalog(server.url, token=TOKEN)
    created = remote.create_table("crash.tagged", schema=TAGGED_SCHEMA, partition_by=["proc"])
    spec = {"url": server.url, "table": "crash.tagged", "count": 12, "pause_after": 4}
    workers = [Worker("append", {**spec, "proc": p}, tmp_path / f"writer-{p}", {"LAKEFMT_CATALOG_TOKEN": TOKEN})
               for p in range(2)]
    start_together(workers)
    for w in workers:  # 4 acknowledged commits each, then the server is swapped for one that pauses
        w.wait_for("paused")
    assert server.stop() == 0
    server.start({"LAKEFMT_PAUSE_AT": point, "LAKEFMT_PAUSE_FILE": str(pause)})
    for w in workers:
        w.send("go")
    deadline = time.monotonic() + 120
    while not pause.exists():  # a commit reached the point inside the server
        assert time.monotonic() < deadline, server.log()
        assert all(w.proc.poll() is None for w in workers)
        time.sleep(0.02)
    server.kill()
    server.start()  # same catalog file and port, no pause
    for w in workers:
        w.finish()

    acks = acknowledged(workers)
    assert len(acks) == 24 and not [line for w in workers for line in w.lines if "unknown" in line]
    t = remote.load_table("crash.tagged")
    chain = assert_linear_history(t)
    assert len(chain) == 24  # none applied twice
    assert {a["snapshot_id"] for a in acks} == {s.snapshot_id for s in chain}  # none lost
    assert tagged_counts(t) == expected_rows({(p, i) for p in range(2) for i in range(12)})
    log = assert_commit_log_chain(remote, "crash.tagged", created.metadata_location, t.metadata_location)
    logged = Counter(r.new_metadata_location for r in log)
    assert all(logged[a["metadata_location"]] == 1 for a in acks)


def test_commit_without_answer_is_unknown_and_keeps_its_files(tmp_path: Path, servers: Any):
    """The server dies inside a commit and stays down: CommitStateUnknownError, and the commit's files are
    kept (CATHTTP-14, COMMIT-11); once the server is back the table is as before, the files unreferenced."""
    warehouse = str(tmp_path / "wh")
    lakefmt.Catalog(warehouse, create=True)
    pause = tmp_path / "paused"
    server = servers(tmp_path, warehouse, env={"LAKEFMT_PAUSE_AT": "catalog-http-before-swap",
                                               "LAKEFMT_PAUSE_FILE": str(pause)})
    remote = lakefmt.Catalog(server.url, token=TOKEN, retry_seconds=1.0)
    t = remote.create_table("crash.once", schema=TAGGED_SCHEMA)
    outcome: list[BaseException] = []

    def append() -> None:
        try:
            t.append(tagged_rows(0, 0))
        except BaseException as exc:  # noqa: BLE001 - examined below
            outcome.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    deadline = time.monotonic() + 120
    while not pause.exists():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.02)
    server.kill()
    thread.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], lakefmt.CommitStateUnknownError), outcome
    assert "got no answer from the catalog server" in str(outcome[0])
    assert "whether it was applied is unknown, so its files are kept (COMMIT-11)" in str(outcome[0])
    data = list(Path(t.location, "data").rglob("*.parquet"))
    metadata = sorted(Path(t.location, "metadata").glob("*.metadata.json"))
    assert len(data) == 1 and len(metadata) == 2  # kept: it may have been committed
    server.start({})
    assert remote.load_table("crash.once").current_snapshot() is None  # it was not


def test_compaction_and_expiry_through_the_server_while_appends_run(tmp_path: Path, servers: Any):
    """Two appenders and a compaction + snapshot-expiry process, all through the server: rows as a
    multiset equal the model, the history stays linear (COMPACT-18, MAINT-5)."""
    warehouse = str(tmp_path / "wh")
    lakefmt.Catalog(warehouse, create=True)
    server = servers(tmp_path, warehouse)
    remote = lakefmt.Catalog(server.url, token=TOKEN)
    remote.create_table("maint.tagged", schema=TAGGED_SCHEMA, partition_by=["proc"])
    env = {"LAKEFMT_CATALOG_TOKEN": TOKEN}
    spec = {"url": server.url, "table": "maint.tagged", "count": 30, "pause_after": 15}
    appenders = [Worker("append", {**spec, "proc": p}, tmp_path / f"writer-{p}", env) for p in range(2)]
    maintainer = Worker("maintain", {"url": server.url, "table": "maint.tagged"}, tmp_path / "maintainer", env)
    start_together([*appenders, maintainer])
    for w in appenders:
        w.wait_for("paused")
    seen: set[str] = set()
    while seen != {"compacted", "expired"}:  # both committed between the two halves of the appends
        seen |= set(maintainer.next_line()) & {"compacted", "expired"}
    for w in appenders:
        w.send("go")
    for w in appenders:
        w.finish()
    maintainer.send("stop")
    done = maintainer.finish()[-1]
    assert done["done"] and done["compacted"] >= 1 and done["expired"] >= 1

    t = remote.load_table("maint.tagged")
    assert tagged_counts(t) == expected_rows({(p, i) for p in range(2) for i in range(30)})
    assert_linear_history(t)
    ops = [r.operation for r in sorted(remote.commit_log("maint.tagged"), key=lambda r: r.version)]
    first_replace = ops.index("replace")
    assert "append" in ops[first_replace:]  # appends committed after a compaction
    assert len(acknowledged(appenders)) == 60


def test_wrong_or_missing_token_gets_401_and_writes_nothing(served: Any):
    """CATHTTP-2, SERVICE-10: every catalog endpoint refuses a missing or wrong token with 401, the client
    raises CatalogUnauthorizedError, and the catalog and the warehouse are unchanged."""
    server, warehouse = served
    good = lakefmt.Catalog(server.url, token=TOKEN)
    t = good.create_table("auth.events", schema=TAGGED_SCHEMA)
    t.append(tagged_rows(0, 0))
    local = lakefmt.Catalog(warehouse)

    def state() -> tuple[Any, ...]:
        with local.session() as s:
            leases = s.con.execute("SELECT * FROM leases ORDER BY ALL").fetchall()
        files = sorted(str(p) for p in Path(warehouse, "auth").rglob("*") if p.is_file())
        return local.list_namespaces(), local.list_tables(), local.commit_log(), leases, files

    before = state()
    uuid_ = t.metadata.table_uuid
    loc = t.metadata_location
    calls = [("GET", "/config", None), ("GET", "/namespaces", None), ("POST", "/namespaces", {"namespace": "x"}),
             ("DELETE", "/namespaces/auth", None), ("GET", "/namespaces/auth/tables", None),
             ("POST", "/namespaces/auth/tables", {"name": "t2", "table_uuid": str(uuid.uuid4()),
                                                  "metadata_location": loc}),
             ("GET", "/namespaces/auth/tables/events", None), ("DELETE", "/namespaces/auth/tables/events", None),
             ("POST", "/tables/rename", {"from": "auth.events", "to": "auth.moved"}),
             ("POST", "/namespaces/auth/tables/events/commit", {"expected": loc, "new": loc + ".x",
                                                                "operation": "append"}),
             ("POST", "/leases/acquire", {"table_uuid": uuid_, "kind": "write", "keys": ["k"], "owner": "o",
                                          "ttl": 60}),
             ("POST", "/leases/release", {"table_uuid": uuid_, "kind": "write", "keys": ["k"], "owner": "o"}),
             ("POST", "/leases/renew", {"table_uuid": uuid_, "kind": "write", "key": "k", "owner": "o", "ttl": 9}),
             ("GET", f"/leases/{uuid_}", None), ("GET", f"/leases/{uuid_}/write/k", None),
             ("GET", f"/writer-progress/{uuid_}/w", None), ("GET", "/commit-log", None)]
    for method, path, body in calls:
        for token in (None, "wrong", TOKEN + "x"):
            status, answer = server.request(method, path, body, token=token)
            assert status == 401, (method, path, token, status, answer)
    for token in ("wrong", None):
        with pytest.raises(CatalogUnauthorizedError, match=r"refused the request \(401, missing or wrong bearer "
                                                           r"token\); nothing was done"):
            lakefmt.Catalog(server.url, token=token)
    # A client whose token is revoked after it opened the catalog: its append is refused before any write.
    stale = lakefmt.Catalog(server.url, token=TOKEN)
    table = stale.load_table("auth.events")
    stale._http.headers["Authorization"] = "Bearer revoked"
    with pytest.raises(CatalogUnauthorizedError):
        table.append(tagged_rows(0, 1))
    assert state() == before


def test_catalog_operations_and_errors_over_http(served: Any, tmp_path: Path):
    """The catalog-level methods over HTTP (CATHTTP-4 .. CATHTTP-7, CATHTTP-13), server errors re-raised as
    the same lakefmt class (CATHTTP-3)."""
    server, warehouse = served
    remote = lakefmt.Catalog(server.url + "/", token=TOKEN)
    local = lakefmt.Catalog(warehouse)
    remote.create_namespace("ops", {"owner": "flight"})
    with pytest.raises(lakefmt.NamespaceExistsError, match="namespace ops already exists"):
        remote.create_namespace("ops")
    t = remote.create_table("ops.events", schema=TAGGED_SCHEMA, partition_by=["proc"], format_version=2)
    assert t.metadata.format_version == 2 and remote.table_exists("ops.events")
    with pytest.raises(lakefmt.TableExistsError, match="table ops.events already exists"):
        remote.create_table("ops.events", schema=TAGGED_SCHEMA)
    assert len(list(Path(warehouse, "ops").glob("events-*"))) == 1  # the refused create's file is gone
    assert "ops" in remote.list_namespaces() and "ops.events" in remote.list_tables()
    assert remote.list_tables("ops") == local.list_tables("ops") == ["ops.events"]
    with pytest.raises(lakefmt.NoSuchTableError, match="table ops.missing does not exist"):
        remote.load_table("ops.missing")
    assert not remote.table_exists("ops.missing")
    with pytest.raises(lakefmt.InvalidNameError):
        remote.load_table("ops.bad name")
    t.append(tagged_rows(1, 1))
    t.delete("i = 1 and k = 0")  # merge-on-read: a deletion vector, committed through the server
    assert rows(t.scan().to_arrow()) == rows(local.load_table("ops.events").scan().to_arrow())
    assert remote.commit_log("ops.events") == local.commit_log("ops.events")
    assert remote.commit_log(limit=1) == local.commit_log(limit=1)
    remote.rename_table("ops.events", "ops.renamed")
    assert remote.load_table("ops.renamed").metadata_location == local.current_metadata_location("ops.renamed")
    with pytest.raises(lakefmt.ValidationError, match="namespace ops is not empty"):
        remote.drop_namespace("ops")
    remote.drop_table("ops.renamed", purge=True)
    assert not list(Path(warehouse, "ops").rglob("*.parquet")) and not local.table_exists("ops.renamed")
    remote.drop_namespace("ops")
    assert "ops" not in local.list_namespaces()
    # What only the catalog file's own process can do.
    with pytest.raises(lakefmt.ValidationError, match="run `lakefmt recover` on the catalog server's machine"):
        RemoteCatalog.recover(server.url)
    with pytest.raises(lakefmt.ValidationError, match="on the catalog server's machine"):
        lakefmt.Catalog.recover(server.url)
    with pytest.raises(lakefmt.ValidationError, match=r"is not a metadata file location.*\(LAYOUT-9\)"):
        remote.register_table("ops.again", "x")  # registering goes through the server (CATHTTP-16)
    with remote.session() as s, pytest.raises(lakefmt.ValidationError, match="SQL on the catalog file"):
        s.con.execute("SELECT 1")
    remote.checkpoint()  # the server checkpoints its own file: nothing to do
    with pytest.raises(lakefmt.InvalidCatalogPathError, match="cannot be combined with the catalog server"):
        lakefmt.Catalog(server.url, token=TOKEN, catalog_path=str(tmp_path / "c.duckdb"))
    with pytest.raises(lakefmt.ValidationError, match="token=... is for a catalog server URL"):
        lakefmt.Catalog(warehouse, token=TOKEN)
    with pytest.raises(lakefmt.ValidationError, match="non-empty string"):
        lakefmt.Catalog(server.url, token="  ")
    unreachable = free_port()
    with pytest.raises(lakefmt.LakefmtError, match=f"127.0.0.1:{unreachable} did not answer GET /config"):
        lakefmt.Catalog(f"http://127.0.0.1:{unreachable}", token=TOKEN, retry_seconds=0.2)
    readonly = lakefmt.Catalog(server.url, token=TOKEN, read_only=True)
    with pytest.raises(lakefmt.ReadOnlyCatalogError, match="open read-only"):
        readonly.create_table("ops.ro", schema=TAGGED_SCHEMA)


def test_leases_writer_progress_and_lost_leases_over_http(served: Any):
    """Leases (CATHTTP-11, CAT-9..CAT-11), idempotent commits (CATHTTP-12, PROGRESS-3), refused swaps
    (CATHTTP-10) and a lost write lease (COMMIT-19) through the server, as a local catalog does them."""
    server, warehouse = served
    remote = lakefmt.Catalog(server.url, token=TOKEN)
    other = lakefmt.Catalog(server.url, token=TOKEN)
    t = remote.create_table("lease.events", schema=TAGGED_SCHEMA, partition_by=["proc"])
    uid, key = t.metadata.table_uuid, "proc=1/day=2026-01-01"
    leases, others = lakefmt.leases.Leases(remote), lakefmt.leases.Leases(other)
    assert leases.acquire(uid, "partition", key, owner="a", ttl=60)
    assert not others.acquire(uid, "partition", key, owner="b", ttl=60)
    with other.session() as s:
        assert s.lease_holder(uid, "partition", key)[0] == "a"
        assert s.lease_holder(uid, "partition", "proc=9") is None
        assert not s.renew_lease(uid, "partition", key, owner="b", ttl=60)
        assert s.renew_lease(uid, "partition", key, owner="a", ttl=120)
    live = leases.live(uid, "partition")
    assert [(x.key, x.owner) for x in live] == [(key, "a")]
    with lakefmt.Catalog(warehouse).session() as s:  # the server's file holds the same rows
        assert [row[2:4] for row in s.live_leases(uid, "partition")] == [(key, "a")]
    leases.release(uid, "partition", [key], owner="a")
    assert others.acquire(uid, "partition", key, owner="b", ttl=60)

    t.append(tagged_rows(0, 0), idempotency=("ingest-1", 7))
    assert t.last_committed_batch("ingest-1") == 7 and t.last_committed_batch("nobody") is None
    with pytest.raises(lakefmt.AlreadyCommittedError, match="already committed batch 7"):
        t.append(tagged_rows(0, 1), idempotency=("ingest-1", 7))
    t.append(tagged_rows(0, 2), idempotency=("ingest-1", 8))
    # The swap itself refuses a replayed batch and a base that moved: not committed, nothing changed.
    current = t.refresh().metadata_location
    with other.session() as s:
        assert not s.compare_and_swap("lease", "events", current, current + ".replay", operation="append",
                                      snapshot_id=None, summary={},
                                      writer_batch=lakefmt.WriterBatch("ingest-1", 8))
        assert not s.compare_and_swap("lease", "events", current + ".old", current + ".moved",
                                      operation="append", snapshot_id=None, summary={})
        assert s.current_location("lease", "events") == current
        assert s.last_committed_batch(uid, "ingest-1", migrate=False) == 8
    snapshots = len(t.refresh().snapshots())

    token = t.write_token()  # the write lease, then taken away by another client: the commit must fail
    lakefmt.leases.Leases(other).release(uid, "write", [token], owner=token)
    with pytest.raises(lakefmt.WriteLeaseLostError, match="expired or was taken over before this commit"):
        t.append(tagged_rows(0, 4))
    assert len(t.refresh().snapshots()) == snapshots
    assert tagged_counts(t) == expected_rows({(0, 0), (0, 2)})


def test_command_line_and_spark_options_take_the_url(served: Any, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch):
    """``--warehouse``/``--catalog`` URL with ``--token`` or $LAKEFMT_CATALOG_TOKEN; the Spark ``catalog``
    option with ``token`` (resolved on the driver: executors get the warehouse itself) (CATHTTP-14)."""
    from lakefmt.cli import main
    from lakefmt.spark.options import TableRef

    server, warehouse = served
    lakefmt.Catalog(server.url, token=TOKEN).create_table("cli.events", schema=TAGGED_SCHEMA)
    assert main(["--warehouse", server.url, "--token", TOKEN, "tables"]) == 0
    assert "cli.events" in capsys.readouterr().out
    monkeypatch.setenv("LAKEFMT_CATALOG_TOKEN", TOKEN)
    assert main(["tables", "--catalog", server.url]) == 0
    assert "cli.events" in capsys.readouterr().out
    assert main(["--warehouse", server.url, "--token", "wrong", "tables"]) == 2
    assert "refused the request (401" in capsys.readouterr().err
    monkeypatch.delenv("LAKEFMT_CATALOG_TOKEN")
    ref = TableRef.from_options({"catalog": server.url, "token": TOKEN, "path": "cli.events"})
    assert ref.warehouse == lakefmt.Catalog(warehouse).warehouse and ref.catalog_url == server.url
    assert TOKEN not in repr(ref)
    assert isinstance(ref.catalog(), RemoteCatalog) and ref.load().name == "cli.events"
    assert ref.io().location == ref.warehouse


if __name__ == "__main__":
    worker_main(sys.argv[1], json.loads(sys.argv[2]))
