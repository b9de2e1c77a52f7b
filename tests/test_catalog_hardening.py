"""The catalog under faults and bad input (spec/catalog.md CAT-2, CAT-6, CAT-14, CAT-18 … CAT-21).

Real parts only: a second process holding the lock file and stopped with SIGSTOP, a
tmpfs mount remounted read-only, a reader without write permission (a child that drops
to uid ``nobody``), catalog files overwritten with real garbage, and a deleted catalog
file recovered from the table folders.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.cli import main as cli_main
from tests.conftest import downlinks, rows

REPO = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])


def some_rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [f"p{i % 3}" for i in range(start, start + n)]},
                    schema=SCHEMA)


def files_under(folder: str | Path) -> dict[str, bytes]:
    """Every file below ``folder`` with its bytes, except the catalog's lock file (its content is the holder)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            if not name.endswith(".lock"):
                path = os.path.join(root, name)
                out[os.path.relpath(path, folder)] = Path(path).read_bytes()
    return out


def filled_warehouse(folder: Path) -> dict[str, pa.Table]:
    """Two tables with a few commits each; returns their expected rows."""
    cat = lakefmt.Catalog(str(folder), create=True)
    events = cat.create_table("ops.events", SCHEMA, partition_by=["part"])
    events.append(some_rows(0, 50))
    events.append(some_rows(50, 25))
    events.delete("id < 10")
    dl = cat.create_table("artemis.downlinks", downlinks(1).schema, partition_by=["day(ts)"])
    dl.append(downlinks(300, seed=3))
    return {name: cat.load_table(name).scan().to_arrow() for name in ("ops.events", "artemis.downlinks")}


# -- CAT-2: names match in full ----------------------------------------------------------------------------

@pytest.mark.parametrize("identifier", ["ns.t\n", "ns\n.t", "ns.t\r\n", ("ns", "t\n"), 123, None, 1.5,
                                        b"ns.t", ("ns", 5), ("ns", None), {"ns": "t"}])
def test_identifiers_that_are_not_two_whole_names_are_refused(local_catalog, identifier):
    local_catalog.create_table("ns.t", SCHEMA)
    before = files_under(local_catalog.warehouse), local_catalog.list_tables()
    for call in (lambda: local_catalog.create_table(identifier, SCHEMA), lambda: local_catalog.load_table(identifier),
                 lambda: local_catalog.table_exists(identifier), lambda: local_catalog.drop_table(identifier),
                 lambda: local_catalog.rename_table("ns.t", identifier),
                 lambda: local_catalog.register_table(identifier, "/nowhere/metadata/v000001-x.metadata.json")):
        with pytest.raises(lakefmt.InvalidNameError):
            call()
    assert (files_under(local_catalog.warehouse), local_catalog.list_tables()) == before


@pytest.mark.parametrize("namespace", ["ns\n", None, 7])
def test_namespace_names_match_in_full(local_catalog, namespace):
    with pytest.raises(lakefmt.InvalidNameError):
        local_catalog.create_namespace(namespace)
    assert local_catalog.list_namespaces() == []


def test_cli_refuses_a_name_with_a_trailing_newline(tmp_path, capsys):
    source = tmp_path / "in.parquet"
    pq.write_table(some_rows(0, 3), source)
    code = cli_main(["create", "ns.t\n", "--from-parquet", str(source), "--warehouse", str(tmp_path / "wh")])
    assert code == 2 and "invalid table name" in capsys.readouterr().err
    assert not (tmp_path / "wh" / "ns").exists()


# -- CAT-6: a bounded wait for the lock file ---------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, lakefmt
    cat = lakefmt.Catalog(sys.argv[1])
    with cat.session():
        print("locked", flush=True)
        sys.stdin.read()  # hold the lock until stdin closes (or the process is stopped or killed)
""")


@pytest.fixture
def stopped_holder(local_catalog) -> Iterator[subprocess.Popen[str]]:
    """A second process inside a catalog session, then stopped with SIGSTOP."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, local_catalog.warehouse], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        os.kill(proc.pid, signal.SIGSTOP)
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=60)


def test_a_stopped_lock_holder_gives_a_timeout_naming_the_lock_file_and_its_pid(local_catalog, stopped_holder):
    local_catalog.lock_timeout = 0.5
    started = time.monotonic()
    with pytest.raises(lakefmt.CatalogLockTimeoutError) as info:
        local_catalog.list_tables()
    assert time.monotonic() - started >= 0.5
    message = str(info.value)
    assert local_catalog.catalog_path + ".lock" in message
    assert f"process {stopped_holder.pid}" in message
    with pytest.raises(lakefmt.CatalogLockTimeoutError):
        local_catalog.create_table("ns.t", SCHEMA)
    assert not os.path.exists(os.path.join(local_catalog.warehouse, "ns"))  # nothing was written


def test_the_catalog_works_again_once_the_holder_is_gone(local_catalog):
    local_catalog.create_table("ns.t", SCHEMA).append(some_rows(0, 5))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, local_catalog.warehouse], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        os.kill(proc.pid, signal.SIGSTOP)
        local_catalog.lock_timeout = 0.3
        with pytest.raises(lakefmt.CatalogLockTimeoutError, match=f"process {proc.pid}"):
            local_catalog.load_table("ns.t")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    local_catalog.lock_timeout = 60.0
    assert rows(local_catalog.load_table("ns.t").scan().to_arrow()) == rows(some_rows(0, 5))


def table_files(warehouse: str) -> list[str]:
    """Every file under the warehouse's ``ns`` folder (the catalog file lives beside it)."""
    return sorted(str(p.relative_to(warehouse)) for p in Path(warehouse, "ns").rglob("*") if p.is_file())


def test_an_append_that_cannot_take_the_lock_leaves_no_file_and_the_next_one_commits(tmp_path):
    """COMMIT-21: the commit's metadata file and manifest list, written before the lock is asked for
    (their fsyncs started, COMMIT-20), are deleted when the lock times out; the data file too."""
    warehouse = str(tmp_path / "w")
    lakefmt.Catalog(warehouse, create=True).create_table("ns.t", SCHEMA).append(some_rows(0, 5))
    impatient = lakefmt.Catalog(warehouse, lock_timeout=0.5)
    table = impatient.load_table("ns.t")
    table.append(some_rows(5, 1))  # takes the handle's write lease: the next append writes before any session
    before = table_files(warehouse)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, warehouse], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(lakefmt.CatalogLockTimeoutError, match=f"process {proc.pid}"):
            table.append(some_rows(6, 2))
        after = table_files(warehouse)
        assert after == before
    finally:
        proc.kill()
        proc.wait(timeout=60)
    table.append(some_rows(8, 2))  # the same FileIO: nothing of the failed commit awaits its sync
    assert rows(lakefmt.Catalog(warehouse).load_table("ns.t").scan().to_arrow()) == \
        rows(pa.concat_tables([some_rows(0, 6), some_rows(8, 2)]))


def test_a_compaction_whose_commit_cannot_take_the_lock_leaves_no_file(tmp_path):
    """COMMIT-21 through compaction: the group's outputs, manifests, manifest list and metadata file
    are deleted when its commit's session times out on the lock; the table stays as it was."""
    warehouse = str(tmp_path / "w")
    table = lakefmt.Catalog(warehouse, create=True, lock_timeout=0.5).create_table(
        "ns.t", SCHEMA, partition_by=["part"])
    for start in range(0, 36, 3):
        table.append(some_rows(start, 3))
    before = table_files(warehouse)
    holders: list[subprocess.Popen[str]] = []

    def lock_before_commit(point: str, info: dict) -> None:
        if point == "before-commit" and not holders:
            holders.append(subprocess.Popen([sys.executable, "-c", HOLDER, warehouse], cwd=REPO,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            assert holders[0].stdout is not None and holders[0].stdout.readline().strip() == "locked"

    try:
        with pytest.raises(lakefmt.CatalogLockTimeoutError):
            table.compaction.run("binpack", min_age_seconds=0, hook=lock_before_commit)
        after = table_files(warehouse)
        assert holders and after == before
    finally:
        for proc in holders:
            proc.kill()
            proc.wait(timeout=60)
    reopened = lakefmt.Catalog(warehouse).load_table("ns.t")
    reopened.append(some_rows(36, 3))  # the partition leases the run could not release do not block appends
    assert rows(reopened.scan().to_arrow()) == rows(some_rows(0, 39))


def test_a_thread_stuck_in_a_session_bounds_the_other_threads(local_catalog):
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with local_catalog.session():
            entered.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(60)
        local_catalog.lock_timeout = 0.3
        with pytest.raises(lakefmt.CatalogLockTimeoutError, match="another thread of this process"):
            local_catalog.list_tables()
    finally:
        release.set()
        holder.join(60)
    assert local_catalog.list_tables() == []


def test_the_lock_file_records_the_holders_pid(local_catalog):
    with local_catalog.session():
        assert Path(local_catalog.catalog_path + ".lock").read_text().strip() == str(os.getpid())


# -- CAT-18: read-only warehouses --------------------------------------------------------------------------

@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs mount, unmounted at the end."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
                            check=False, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount tmpfs (needs root): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_warehouse_on_a_read_only_mount_can_be_read(tmpfs):
    expected = filled_warehouse(tmpfs / "wh")
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    before = files_under(tmpfs)
    cat = lakefmt.Catalog(str(tmpfs / "wh"))
    assert cat.read_only and "Read-only file system" in (cat.read_only_reason or "")
    assert cat.list_tables() == ["artemis.downlinks", "ops.events"]
    for name, table in expected.items():
        t = cat.load_table(name)
        assert rows(t.scan().to_arrow()) == rows(table)
        assert t.scan().to_arrow().num_rows == table.num_rows > 0
    assert [r.operation for r in cat.commit_log("ops.events")] == ["delete", "append", "append", "create"]
    t = cat.load_table("ops.events")
    for write in (lambda: t.append(some_rows(100, 3)), lambda: cat.create_table("ops.new", SCHEMA),
                  lambda: cat.drop_table("ops.events"), lambda: cat.rename_table("ops.events", "ops.x"),
                  lambda: cat.create_namespace("x"), lambda: t.delete("id = 11")):
        with pytest.raises(lakefmt.ReadOnlyCatalogError, match="read-only"):
            write()
    assert files_under(tmpfs) == before


def test_read_only_is_explicit_too_and_a_writer_waits_for_a_reader(tmp_path):
    expected = filled_warehouse(tmp_path / "wh")
    reader = lakefmt.Catalog(str(tmp_path / "wh"), read_only=True)
    writer = lakefmt.Catalog(str(tmp_path / "wh"))
    assert reader.read_only and not writer.read_only
    with reader.session():  # a shared lock: a second reader shares it, a writer waits for it (CAT-18)
        assert lakefmt.Catalog(str(tmp_path / "wh"), read_only=True).list_tables() == sorted(expected)
        writer.lock_timeout = 0.3
        with pytest.raises(lakefmt.CatalogLockTimeoutError):
            writer.list_tables()
    writer.load_table("ops.events").append(some_rows(500, 2))
    assert reader.load_table("ops.events").scan().count() == expected["ops.events"].num_rows + 2
    with pytest.raises(lakefmt.ReadOnlyCatalogError, match="read_only=True"):
        reader.load_table("ops.events").append(some_rows(600, 1))


NOBODY_READER = textwrap.dedent("""
    import json, os, sys
    import lakefmt, lakefmt.commit, lakefmt.leases, lakefmt.write
    # The interpreter lives under /root, which uid nobody cannot enter: load every module the
    # reader needs (a read-only read writes nothing), then drop to nobody.
    lakefmt.Catalog(sys.argv[1], read_only=True).load_table("ops.events").scan().to_arrow()
    os.setgid(65534); os.setuid(65534)
    cat = lakefmt.Catalog(sys.argv[1])
    t = cat.load_table("ops.events")
    out = {"read_only": cat.read_only, "reason": cat.read_only_reason,
           "ids": sorted(t.scan().to_arrow().column("id").to_pylist())}
    try:
        t.append(t.scan().to_arrow().slice(0, 1))
        out["append"] = "accepted"
    except lakefmt.ReadOnlyCatalogError as exc:
        out["append"] = type(exc).__name__
    print(json.dumps(out))
""")


def test_a_reader_without_write_permission_can_read(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")
    folder = Path(tempfile.mkdtemp(prefix="lakefmt-ro-", dir="/tmp"))
    try:
        os.chmod(folder, 0o755)
        expected = filled_warehouse(folder / "wh")
        before = files_under(folder)
        result = subprocess.run([sys.executable, "-c", NOBODY_READER, str(folder / "wh")], cwd=REPO,
                                check=False, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["read_only"] is True and "cannot be opened for writing" in out["reason"]
        assert out["ids"] == sorted(expected["ops.events"].column("id").to_pylist())
        assert out["append"] == "ReadOnlyCatalogError"
        assert files_under(folder) == before
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- CAT-14: missing and damaged catalog files --------------------------------------------------------------

def test_a_missing_warehouse_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(lakefmt.NoSuchWarehouseError) as info:
        lakefmt.Catalog(str(tmp_path / "typo"))
    assert str(tmp_path / "typo" / "catalog.duckdb") in str(info.value) and "create=True" in str(info.value)
    assert not (tmp_path / "typo").exists()
    with pytest.raises(lakefmt.NoSuchWarehouseError):
        lakefmt.Catalog("memory://nowhere", catalog_path=str(tmp_path / "nothing.duckdb"))
    assert list(tmp_path.iterdir()) == []
    lakefmt.Catalog(str(tmp_path / "typo"), create=True)
    assert (tmp_path / "typo" / "catalog.duckdb").exists()


def test_no_such_table_names_the_warehouse_and_the_catalog(local_catalog):
    with pytest.raises(lakefmt.NoSuchTableError) as info:
        local_catalog.load_table("ns.missing")
    message = str(info.value)
    assert "ns.missing" in message and local_catalog.warehouse in message and local_catalog.catalog_path in message


def _real_catalog_bytes(tmp_path: Path) -> bytes:
    cat = lakefmt.Catalog(str(tmp_path / "source"), create=True)
    cat.create_table("ns.t", SCHEMA)
    return Path(cat.catalog_path).read_bytes()


def _foreign_duckdb(path: Path) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE customers (id INTEGER)")
    con.close()


@pytest.mark.parametrize("damage", ["empty", "garbage", "text", "truncated-half", "truncated-header", "foreign"])
def test_a_damaged_catalog_file_is_refused_and_left_alone(tmp_path, damage):
    wh = tmp_path / "wh"
    wh.mkdir()
    path = wh / "catalog.duckdb"
    real = _real_catalog_bytes(tmp_path) if damage.startswith("truncated") else b""
    if damage == "foreign":
        _foreign_duckdb(path)
    else:
        path.write_bytes({"empty": b"", "garbage": random.Random(1).randbytes(5000), "text": b"catalog\n" * 300,
                          "truncated-half": real[:len(real) // 2], "truncated-header": real[:100]}[damage])
    before = path.read_bytes()
    with pytest.raises(lakefmt.CorruptCatalogError) as info:
        lakefmt.Catalog(str(wh))
    if damage == "truncated-half":  # DuckDB opens it and fails later; lakefmt checks the size first
        assert "is truncated" in str(info.value) and "lakefmt recover" in str(info.value)
    elif damage != "foreign":
        assert isinstance(info.value.__cause__, duckdb.Error)
        assert "backup" in str(info.value) and "lakefmt recover" in str(info.value)
    else:
        assert "not a lakefmt catalog" in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in wh.iterdir()) == ["catalog.duckdb", "catalog.duckdb.lock"]


def test_a_catalog_file_truncated_while_open_fails_cleanly(tmp_path):
    cat = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    for i in range(3):
        cat.create_table(f"ns.t{i}", SCHEMA).append(some_rows(0, 2))
    path = Path(cat.catalog_path)
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    with pytest.raises(lakefmt.CorruptCatalogError, match="lakefmt recover") as info:
        for name in ("ns.t0", "ns.t1", "ns.t2"):
            cat.load_table(name).append(some_rows(10, 1))
    assert isinstance(info.value.__cause__, duckdb.Error)  # an I/O error, or one replaying the log (CAT-22)


def test_catalog_path_naming_a_folder_is_refused(tmp_path):
    (tmp_path / "cat").mkdir()
    with pytest.raises(lakefmt.InvalidCatalogPathError, match="is a folder"):
        lakefmt.Catalog(str(tmp_path / "wh"), catalog_path=str(tmp_path / "cat"), create=True)
    with pytest.raises(lakefmt.InvalidCatalogPathError, match="local file path"):
        lakefmt.Catalog(str(tmp_path / "wh"), catalog_path="s3://bucket/catalog.duckdb", create=True)
    with pytest.raises(lakefmt.InvalidCatalogPathError, match="needs catalog_path"):
        lakefmt.Catalog("memory://wh", create=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cat"]


# -- CAT-19 … CAT-21: a deleted catalog file, registration and recovery ------------------------------------

def test_a_deleted_catalog_is_refused_then_recovered_with_every_row(tmp_path):
    wh = tmp_path / "wh"
    expected = filled_warehouse(wh)
    os.remove(wh / "catalog.duckdb")
    before = files_under(wh)
    for create in (False, True):
        with pytest.raises(lakefmt.CatalogMissingError) as info:
            lakefmt.Catalog(str(wh), create=create)
        assert str(wh / "catalog.duckdb") in str(info.value) and "lakefmt recover" in str(info.value)
    assert files_under(wh) == before and not (wh / "catalog.duckdb").exists()

    cat, report = lakefmt.Catalog.recover(str(wh))
    assert sorted(t.identifier for t in report.registered) == sorted(expected) and not report.skipped
    for name, table in expected.items():
        assert rows(cat.load_table(name).scan().to_arrow()) == rows(table)
    assert [r.operation for r in cat.commit_log("ops.events")] == ["register"]
    t = cat.load_table("ops.events")  # and the table carries on from its version
    t.append(some_rows(1000, 4))
    assert cat.commit_log("ops.events", limit=1)[0].version == report_version(report, "ops.events") + 1
    assert rows(lakefmt.Catalog(str(wh)).load_table("ops.events").scan().to_arrow()) == rows(
        pa.concat_tables([expected["ops.events"], some_rows(1000, 4)]))

    again, second = lakefmt.Catalog.recover(str(wh))  # a second run changes nothing
    assert second.registered == () and len(second.already_registered) == 2
    assert again.list_tables() == sorted(expected)


def report_version(report, identifier: str) -> int:
    return next(t.version for t in report.registered if t.identifier == identifier)


def test_recovery_keeps_the_newest_table_of_a_name_and_skips_a_torn_metadata_file(tmp_path):
    wh = tmp_path / "wh"
    cat = lakefmt.Catalog(str(wh), create=True)
    old = cat.create_table("ns.t", SCHEMA)
    old.append(some_rows(0, 5))
    cat.drop_table("ns.t")  # files kept (CAT-8)
    new = cat.create_table("ns.t", SCHEMA)
    new.append(some_rows(100, 7))
    torn = Path(new.metadata_location).parent / "v000099-0123456789abcdef-0123456789abcdef.metadata.json"
    torn.write_bytes(Path(new.metadata_location).read_bytes()[:40])  # a writer killed mid-write
    current = cat.current_metadata_location("ns.t")
    os.remove(wh / "catalog.duckdb")

    cat, report = lakefmt.Catalog.recover(str(wh))
    by_name = {t.identifier: t for t in report.registered}
    old_name = f"ns.t_{old.location.rsplit('-', 1)[1]}"
    assert set(by_name) == {"ns.t", old_name}
    assert rows(cat.load_table("ns.t").scan().to_arrow()) == rows(some_rows(100, 7))
    assert rows(cat.load_table(old_name).scan().to_arrow()) == rows(some_rows(0, 5))
    assert any("skipped" in note and "v000099" in note for note in by_name["ns.t"].notes)
    assert by_name["ns.t"].metadata_location == current


def test_register_table_validates_its_input(tmp_path):
    """CAT-20: a taken name or table-uuid, a bad file name and a bad file are refused, writing nothing."""
    cat = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = cat.create_table("ns.t", SCHEMA)
    t.append(some_rows(0, 3))
    location = cat.current_metadata_location("ns.t")
    before = files_under(tmp_path / "wh"), cat.list_tables()
    with pytest.raises(lakefmt.TableExistsError, match="already exists"):
        cat.register_table("ns.t", location)
    with pytest.raises(lakefmt.TableExistsError, match="already registered as ns.t"):
        cat.register_table("ns.copy", location)
    with pytest.raises(lakefmt.ValidationError, match="not a metadata file location"):
        cat.register_table("ns.other", str(tmp_path / "wh" / "ns" / "x.json"))
    with pytest.raises(lakefmt.CorruptMetadataError):
        cat.register_table("ns.other", str(tmp_path / "wh" / "ns" / "gone" / "metadata" / "v000001-x.metadata.json"))
    garbage = tmp_path / "wh" / "ns" / "g-000000000000" / "metadata" / "v000001-x.metadata.json"
    garbage.parent.mkdir(parents=True)
    garbage.write_text("{not json")
    with pytest.raises(lakefmt.CorruptMetadataError):
        cat.register_table("ns.other", str(garbage))
    shutil.rmtree(garbage.parent.parent)
    assert (files_under(tmp_path / "wh"), cat.list_tables()) == before
    cat.drop_table("ns.t")
    again = cat.register_table("ns.back", location)
    assert rows(again.scan().to_arrow()) == rows(some_rows(0, 3))
    assert cat.commit_log("ns.back")[0].operation == "register"


def test_cli_recover_and_a_missing_catalog(tmp_path, capsys):
    wh = tmp_path / "wh"
    expected = filled_warehouse(wh)
    os.remove(wh / "catalog.duckdb")
    assert cli_main(["tables", "--warehouse", str(wh)]) == 2
    assert "lakefmt recover" in capsys.readouterr().err
    assert cli_main(["recover", "--warehouse", str(wh)]) == 0
    out = capsys.readouterr().out
    assert "registered ops.events" in out and "registered 2 table(s), skipped 0" in out
    assert cli_main(["tables", "--warehouse", str(wh)]) == 0
    assert capsys.readouterr().out.split() == sorted(expected)
    assert cli_main(["tables", "--warehouse", str(tmp_path / "typo")]) == 2
    assert "no lakefmt catalog" in capsys.readouterr().err
