"""The ``lakefmt`` command line, run in-process through ``main([...])`` and once as a real process."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.cli import build_parser, main, parse_storage_options
from lakefmt.cli.commands import COMMANDS
from tests.conftest import Cli, downlinks

REPO = Path(__file__).resolve().parents[1]
DAY_US = 86_400_000_000


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Two Parquet inputs: days 1-2 and days 4-5 of Artemis-like downlinks."""
    d1, d2 = tmp_path / "d1.parquet", tmp_path / "d2.parquet"
    pq.write_table(downlinks(2 * 24 * 60, seed=1, step_us=60_000_000), d1)
    pq.write_table(downlinks(1000, seed=2, start_us=1_767_225_600_000_000 + 3 * DAY_US), d2)
    return {"d1": d1, "d2": d2}


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path / "warehouse", capsys)


@pytest.fixture
def loaded(cli: Cli, files: dict[str, Path]) -> Cli:
    cli.ok("create", "artemis.downlinks", "--from-parquet", str(files["d1"]),
           "--partition-by", "day(ts)", "mission_id", "--sort-by", "payload_id,sensor_kind")
    cli.ok("append", "artemis.downlinks", str(files["d1"]))
    cli.ok("append", "artemis.downlinks", str(files["d2"]))
    return cli


def test_create_takes_schema_partitioning_and_sort_order(cli: Cli, files: dict[str, Path]):
    out = cli.ok("create", "artemis.downlinks", "--from-parquet", str(files["d1"]),
                 "--partition-by", "day(ts),mission_id", "--sort-by", "payload_id", "sensor_kind DESC",
                 "--property", "write.target-file-size-bytes=1048576")
    assert "created artemis.downlinks" in out
    t = lakefmt.Catalog(str(cli.warehouse)).load_table("artemis.downlinks")
    assert t.schema().names == ["ts", "mission_id", "payload_id", "sensor_kind", "value"]
    assert str(t.schema().find("ts").type) == "timestamptz"
    assert [pf.name for pf in t.spec().fields] == ["ts_day", "mission_id"]
    assert [(f.direction) for f in t.sort_order().fields] == ["asc", "desc"]
    assert t.properties["write.target-file-size-bytes"] == "1048576"
    assert t.current_snapshot() is None
    assert cli.ok("tables").split() == ["artemis.downlinks"]
    assert cli.ok("tables", "artemis").split() == ["artemis.downlinks"]
    assert cli.ok("tables", "other").split() == []


def test_append_makes_one_snapshot_per_invocation(cli: Cli, files: dict[str, Path]):
    cli.ok("create", "ns.t", "--from-parquet", str(files["d1"]))
    out = cli.ok("append", "ns.t", str(files["d1"]), str(files["d2"]))
    assert "appended 3880 rows" in out
    t = lakefmt.Catalog(str(cli.warehouse)).load_table("ns.t")
    assert len(t.snapshots()) == 1
    assert t.scan().count() == 2 * 24 * 60 + 1000


def test_scan_with_filter_columns_and_formats(loaded: Cli, files: dict[str, Path]):
    data = pa.concat_tables([pq.read_table(files["d1"]), pq.read_table(files["d2"])])
    expected = data.filter((pc.field("payload_id") == 3) & (pc.field("mission_id") == 1))
    expected_rows = sorted((r["ts"].isoformat(), r["value"]) for r in expected.select(["ts", "value"]).to_pylist())

    out = loaded.ok("scan", "artemis.downlinks", "--filter", "payload_id = 3 AND mission_id = 1",
                    "--columns", "ts,value", "--format", "json")
    got = json.loads(out)
    assert set(got[0]) == {"ts", "value"}
    assert sorted((r["ts"], r["value"]) for r in got) == expected_rows

    out = loaded.ok("scan", "artemis.downlinks", "--where", "payload_id = 3 AND mission_id = 1",
                    "--columns", "ts,value", "--format", "csv")
    reader = list(csv.reader(io.StringIO(out)))
    assert reader[0] == ["ts", "value"]
    assert sorted((ts, float(v)) for ts, v in reader[1:]) == expected_rows

    out = loaded.ok("scan", "artemis.downlinks", "--filter", "payload_id = 3", "--limit", "7", "--format", "jsonl")
    assert len(out.splitlines()) == 7
    assert all(json.loads(line)["payload_id"] == 3 for line in out.splitlines())

    out = loaded.ok("scan", "artemis.downlinks", "--filter", "mission_id = 2", "--limit", "3")
    lines = out.splitlines()
    assert lines[0].split() == ["ts", "mission_id", "payload_id", "sensor_kind", "value"]
    assert lines[-1] == "(3 rows)"


def test_scan_time_travel(loaded: Cli, files: dict[str, Path]):
    t = lakefmt.Catalog(str(loaded.warehouse)).load_table("artemis.downlinks")
    first = t.snapshots()[0].snapshot_id
    out = loaded.ok("scan", "artemis.downlinks", "--snapshot-id", str(first), "--format", "jsonl")
    assert len(out.splitlines()) == pq.read_metadata(files["d1"]).num_rows


def test_snapshots_and_history(loaded: Cli):
    t = lakefmt.Catalog(str(loaded.warehouse)).load_table("artemis.downlinks")
    snaps = json.loads(loaded.ok("snapshots", "artemis.downlinks", "--format", "json"))
    assert [s["snapshot_id"] for s in snaps] == [s.snapshot_id for s in t.snapshots()]
    assert [s["sequence"] for s in snaps] == [1, 2]
    assert snaps[1]["parent_id"] == snaps[0]["snapshot_id"]
    assert [s["operation"] for s in snaps] == ["append", "append"]
    assert [s["current"] for s in snaps] == [False, True]
    assert snaps[1]["total_records"] == str(2 * 24 * 60 + 1000)
    text = loaded.ok("snapshots", "artemis.downlinks")
    assert str(snaps[1]["snapshot_id"]) in text and "(2 rows)" in text

    hist = json.loads(loaded.ok("history", "artemis.downlinks", "--format", "json"))
    assert [h["snapshot_id"] for h in hist] == [s["snapshot_id"] for s in snaps]
    assert all(h["is_current_ancestor"] for h in hist)
    assert "append" in loaded.ok("history", "artemis.downlinks")


def test_inspect_prints_the_file_tree(loaded: Cli):
    t = lakefmt.Catalog(str(loaded.warehouse)).load_table("artemis.downlinks")
    out = loaded.ok("inspect", "artemis.downlinks")
    snap = t.current_snapshot()
    assert f"snapshot  {snap.snapshot_id}" in out
    assert snap.manifest_list in out
    files = t.plan_files()
    for f in files:  # every data file, with its size and row count
        assert f.path in out
        assert f"({f.file_size_bytes} bytes), {f.record_count} rows" in out
    assert "manifest  metadata/" in out
    assert "column" in out and "payload_id" in out and "2026-01-01T" in out  # decoded bounds
    assert f"total     {len(files)} live data files, {2 * 24 * 60 + 1000} rows" in out

    first = t.snapshots()[0]
    out_first = loaded.ok("inspect", "artemis.downlinks", "--snapshot-id", str(first.snapshot_id), "--no-stats")
    assert first.manifest_list in out_first and "column" not in out_first
    short = loaded.ok("inspect", "artemis.downlinks", "--max-files", "1")
    assert "more entries" in short


def test_drop_and_purge(loaded: Cli):
    t = lakefmt.Catalog(str(loaded.warehouse)).load_table("artemis.downlinks")
    location = Path(t.location)
    assert "files were kept" in loaded.ok("drop", "artemis.downlinks")
    assert location.exists() and loaded.ok("tables") == ""
    code, _, err = loaded("scan", "artemis.downlinks")
    assert code == 2 and "does not exist" in err


@pytest.mark.parametrize(("argv", "message"), [
    (["scan", "nope.missing"], "table nope.missing does not exist"),
    (["snapshots", "artemis.nothere"], "does not exist"),
    (["scan", "artemis.downlinks", "--filter", "altitude > 3"], "unknown column 'altitude'"),
    (["scan", "artemis.downlinks", "--filter", "payload_id = 'abc'"], "type mismatch"),
    (["scan", "artemis.downlinks", "--filter", "payload_id = = 3"], "error: "),
    (["scan", "artemis.downlinks", "--columns", "ts,nope"], "unknown column 'nope'"),
    (["scan", "artemis.downlinks", "--snapshot-id", "42"], "no snapshot 42"),
    (["scan", "artemis.downlinks", "--as-of", "yesterday"], "ISO 8601"),
    (["scan", "a; DROP TABLE x"], "namespace.table"),
    (["scan", "ns.a; DROP TABLE x"], "invalid table name"),
    (["append", "artemis.downlinks", "/nonexistent/file.parquet"], "does not exist"),
    (["create", "artemis.downlinks", "--from-parquet", "/nonexistent/f.parquet"], "does not exist"),
    (["--storage-option", "novalue", "tables"], "KEY=VALUE"),
])
def test_errors_exit_2_with_a_clear_message(loaded: Cli, argv: list[str], message: str):
    before = lakefmt.Catalog(str(loaded.warehouse)).commit_log()
    code, _, err = loaded(*argv)
    assert code == 2
    assert err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err
    assert lakefmt.Catalog(str(loaded.warehouse)).commit_log() == before  # nothing was written


def test_append_refuses_a_different_schema(loaded: Cli, tmp_path: Path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"ts": [1], "altitude": [3.5]}), bad)
    code, _, err = loaded("append", "artemis.downlinks", str(bad))
    assert code == 2 and "error: " in err
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello")
    code, _, err = loaded("append", "artemis.downlinks", str(not_parquet))
    assert code == 2 and "cannot read" in err
    assert len(lakefmt.Catalog(str(loaded.warehouse)).load_table("artemis.downlinks").snapshots()) == 2


def test_missing_catalog_is_an_error_not_a_new_warehouse(cli: Cli):
    code, _, err = cli("tables")
    assert code == 2 and "no lakefmt catalog" in err
    assert not cli.warehouse.exists()


def test_usage_errors_return_2(cli: Cli):
    assert cli("scan")[0] == 2  # missing TABLE
    assert cli("bogus-command")[0] == 2
    assert main([]) == 2


def test_storage_options_parsing():
    assert parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=false",
                                  "client_kwargs.region_name=us-east-1", "key=a=b"]) == {
        "endpoint_url": "http://127.0.0.1:9000", "anon": False,
        "client_kwargs": {"region_name": "us-east-1"}, "key": "a=b"}


def test_global_options_accepted_after_the_command(loaded: Cli):
    out = loaded.capsys.readouterr()
    code = main(["tables", "--warehouse", str(loaded.warehouse)])
    out = loaded.capsys.readouterr().out
    assert code == 0 and out.split() == ["artemis.downlinks"]


def test_compact_offers_the_strategies_of_the_compaction_package():
    from lakefmt.cli.compact import STRATEGIES as CLI_STRATEGIES
    from lakefmt.compaction.options import STRATEGIES

    assert CLI_STRATEGIES == STRATEGIES  # kept apart so that the parser does not load lakefmt.compaction


def test_every_command_is_wired():
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(choices) == set(COMMANDS)
    for name, parser in choices.items():
        assert parser.get_default("func") is not None, name


def run_process(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "lakefmt.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_as_a_real_process(tmp_path: Path, files: dict[str, Path]):
    wh = str(tmp_path / "wh")
    p = run_process("--warehouse", wh, "create", "artemis.downlinks", "--from-parquet", str(files["d2"]),
                    "--partition-by", "day(ts)", "--with-data", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "appended 1000 rows" in p.stdout
    p = run_process("--warehouse", wh, "scan", "artemis.downlinks", "--filter", "payload_id = 3",
                    "--format", "jsonl", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    expected = pq.read_table(files["d2"]).filter(pc.field("payload_id") == 3).num_rows
    assert len(p.stdout.splitlines()) == expected > 0
    p = run_process("--warehouse", wh, "scan", "artemis.downlinks", "--filter", "nope = 1", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith("error: unknown column 'nope'") and "Traceback" not in p.stderr
    p = run_process("--warehouse", wh, "inspect", "ghost.table", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("error: table ghost.table does not exist")
    assert len(p.stderr.splitlines()) == 1


# -- start-up: what a command imports, and Ctrl-C ---------------------------------------------------

HEAVY_MODULES = ("pandas", "duckdb", "pyarrow", "fsspec", "tqdm")


def modules_after(*calls: list[str]) -> set[str]:
    """The heavy modules loaded by a fresh interpreter after ``main(argv)`` for each ``argv`` in ``calls``."""
    probe = ("import json, sys\nfrom lakefmt.cli import main\n"
             f"for argv in {list(calls)!r}:\n    main(argv)\n"
             f"print(json.dumps([m for m in {HEAVY_MODULES!r} if m in sys.modules]))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_import_lakefmt_loads_neither_pandas_nor_duckdb():
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = (f"import sys, lakefmt\nprint([m for m in {HEAVY_MODULES!r} if m in sys.modules])\n"
             "print(lakefmt.Catalog.__name__, 'duckdb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout.splitlines()
    assert out == ["[]", "Catalog True"]  # the public names still work, loaded on first use


def test_help_of_every_command_loads_no_heavy_module():
    # `serve` is left out: its parser is lakefmt.service.cli, and importing the service package
    # loads the whole service (it is loaded only when `serve` is the command).
    commands = [name for name in COMMANDS if name != "serve"]
    assert modules_after(["--help"], *([name, "--help"] for name in commands), ["--version"]) == set()


def test_tables_loads_the_catalog_but_not_pandas(loaded: Cli):
    assert modules_after(["--warehouse", str(loaded.warehouse), "tables"]) == {"duckdb", "pyarrow", "fsspec"}


def test_scan_loads_no_pandas(loaded: Cli):
    # pyarrow's own conversion of a zoned timestamp (``ts`` here is timestamptz) imports pandas.
    assert "pandas" not in modules_after(["--warehouse", str(loaded.warehouse), "scan", "artemis.downlinks",
                                          "--format", "jsonl"])


def test_scan_prints_timestamptz_values_as_pyarrow_converts_them():
    from lakefmt.cli.scan import python_values

    micros = [None, 0, -1, 1_767_225_600_123_456, -62_135_596_800_000_000, 253_402_300_799_999_999]
    column = pa.array(micros, pa.timestamp("us", tz="UTC"))
    assert python_values(column) == column.to_pylist()
    assert [v.isoformat() for v in python_values(column)[1:3]] == ["1970-01-01T00:00:00+00:00",
                                                                   "1969-12-31T23:59:59.999999+00:00"]
    naive = pa.array(micros, pa.timestamp("us"))
    assert python_values(naive) == naive.to_pylist()


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path):
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a child would inherit it and never see Ctrl-C
        pytest.skip("SIGINT is ignored in this process (a background job of a non-interactive shell)")
    wh = str(tmp_path / "wh")
    table = lakefmt.Catalog(wh, create=True).create_table("big.rows", pa.schema([("id", pa.int64()),
                                                                                 ("s", pa.string())]))
    table.append(pa.table({"id": range(50_000), "s": [f"row {i}" for i in range(50_000)]}))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # jsonl streams rows: ~1.5 MB against a 64 KiB pipe the test does not drain, so the scan is
    # still running (blocked writing) when SIGINT arrives.
    proc = subprocess.Popen([sys.executable, "-m", "lakefmt.cli", "--warehouse", wh, "scan", "big.rows",
                             "--format", "jsonl"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert json.loads(proc.stdout.readline()) == {"id": 0, "s": "row 0"}  # the scan has started
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert proc.stderr.read() == "interrupted\n"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


# -- global options on either side, final newlines, scan on a terminal ------------------------------

GLOBAL_OPTIONS = {"--warehouse", "--catalog-path", "--storage-option"}


def test_every_command_takes_the_global_options_after_its_name():
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, parser in choices.items():
        assert GLOBAL_OPTIONS <= set(parser._option_string_actions), name


def test_compact_and_demo_take_storage_options_after_the_command(loaded: Cli):
    wh = str(loaded.warehouse)
    loaded.capsys.readouterr()
    assert main(["compact", "artemis.downlinks", "--dry-run", "--warehouse", wh,
                 "--storage-option", "auto_mkdir=true"]) == 0
    assert "too-young" in loaded.capsys.readouterr().out
    code = main(["demo", "--commits", "2", "--missions", "1", "--payloads", "2", "--rows-per-commit", "20",
                 "--table", "demo.small", "--warehouse", wh, "--storage-option", "auto_mkdir=true"])
    assert code == 0, loaded.capsys.readouterr().err
    assert "demo.small" in lakefmt.Catalog(wh).list_tables()


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "jsonl"])
def test_every_output_ends_with_a_newline(loaded: Cli, fmt: str):
    for argv in (["scan", "artemis.downlinks", "--limit", "3"],
                 ["scan", "artemis.downlinks", "--filter", "payload_id < 0"],  # no rows
                 ["scan", "artemis.downlinks", "--columns", "payload_id", "--limit", "1"],
                 ["snapshots", "artemis.downlinks"], ["history", "artemis.downlinks"],
                 ["stats", "artemis.downlinks"]):
        out = loaded.ok(*argv, "--format", fmt)
        if fmt == "jsonl" and "payload_id < 0" in argv:
            assert out == ""  # no rows, no lines
            continue
        assert out.endswith("\n") and not out.endswith("\n\n"), (argv, out[-80:])
    csv_out = loaded.ok("scan", "artemis.downlinks", "--filter", "payload_id < 0", "--format", "csv")
    assert csv_out == "ts,mission_id,payload_id,sensor_kind,value\n"  # the header, even without rows


def run_on_a_terminal(*argv: str) -> tuple[int, str, str]:
    """Run ``python -m lakefmt.cli *argv`` with stdout on a pseudo-terminal; returns (code, stdout, stderr)."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "lakefmt.cli", *argv], stdout=slave, stderr=subprocess.PIPE,
                            env=env, text=True)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    code = proc.wait(timeout=120)
    err = proc.stderr.read()
    proc.stderr.close()
    return code, b"".join(chunks).decode().replace("\r\n", "\n"), err


@pytest.fixture
def rows_250(tmp_path: Path) -> str:
    wh = str(tmp_path / "wh250")
    table = lakefmt.Catalog(wh, create=True).create_table("ns.rows", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": range(250)}))
    return wh


def test_scan_on_a_terminal_prints_the_first_100_rows_and_says_so(rows_250: str):
    code, out, err = run_on_a_terminal("--warehouse", rows_250, "scan", "ns.rows")
    lines = out.splitlines()
    assert code == 0, err
    assert lines[:2] == ["id", "--"] and len(lines) == 2 + 100 + 1
    assert lines[-1].startswith("(showing the first 100 rows; more match: use --limit N or --all")
    code, out, err = run_on_a_terminal("--warehouse", rows_250, "scan", "ns.rows", "--format", "jsonl")
    assert code == 0 and len(out.splitlines()) == 100 and "--all" in err  # the note stays out of the data
    code, out, _ = run_on_a_terminal("--warehouse", rows_250, "scan", "ns.rows", "--all")
    assert len(out.splitlines()) == 2 + 250 + 1 and out.endswith("(250 rows)\n")
    code, out, _ = run_on_a_terminal("--warehouse", rows_250, "scan", "ns.rows", "--limit", "150")
    assert len(out.splitlines()) == 2 + 150 + 1 and out.endswith("(150 rows)\n")


def test_scan_to_a_pipe_prints_every_row(rows_250: str, tmp_path: Path):
    p = run_process("--warehouse", rows_250, "scan", "ns.rows", cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == ""
    assert len(p.stdout.splitlines()) == 2 + 250 + 1 and p.stdout.endswith("(250 rows)\n")
