"""``lakefmt delete`` and ``lakefmt upsert`` end to end, on real Parquet files and a real catalog."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from tests.conftest import Cli as SharedCli
from tests.conftest import rows

REPO = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([pa.field("sensor", pa.string()), pa.field("day", pa.int32()), pa.field("reading", pa.float64())])


class Cli(SharedCli):
    def table(self) -> lakefmt.Table:
        return lakefmt.Catalog(str(self.warehouse)).load_table("lab.readings")


def parquet(path: Path, records: list[tuple]) -> Path:
    pq.write_table(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in records], schema=SCHEMA), path)
    return path


BASE = [(s, d, float(i)) for i, (s, d) in enumerate((s, d) for s in ("a", "b", "c") for d in range(1, 5))]


@pytest.fixture(params=["merge-on-read", "copy-on-write"])
def cli(request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    cli = Cli(tmp_path / "warehouse", capsys)
    base = parquet(tmp_path / "base.parquet", BASE)
    cli.ok("create", "lab.readings", "--from-parquet", str(base), "--partition-by", "sensor",
           "--property", f"write.delete.mode={request.param}", "--with-data")
    return cli


def test_help_lists_delete_and_upsert(cli: Cli):
    out = cli.ok("--help")
    assert re.search(r"^\s+delete\s+delete the rows matching a filter", out, re.MULTILINE)
    assert re.search(r"^\s+upsert\s+update rows by key", out, re.MULTILINE)


def test_delete_prints_the_rows_deleted_and_the_snapshot(cli: Cli):
    out = cli.ok("delete", "lab.readings", "--filter", "day >= 3 AND sensor != 'c'")
    t = cli.table()
    snap = t.current_snapshot()
    assert out.startswith(f"deleted 4 rows from lab.readings as snapshot {snap.snapshot_id} (")
    assert snap.operation == "delete"
    assert rows(t.scan().to_arrow()) == sorted((r for r in BASE if not (r[1] >= 3 and r[0] != "c")), key=repr)
    if t.properties["write.delete.mode"] == "merge-on-read":
        assert "4 by deletion vectors" in out and t.metadata.format_version == 2
    else:
        assert "2 file(s) removed, 2 written" in out and t.metadata.format_version == 2  # as created


def test_delete_of_nothing_says_so_and_commits_nothing(cli: Cli):
    before = cli.table().current_snapshot().snapshot_id
    out = cli.ok("delete", "lab.readings", "--filter", "reading > 1000")
    assert out == "no row of lab.readings matches 'reading > 1000'; nothing was committed\n"
    assert cli.table().current_snapshot().snapshot_id == before


def test_upsert_from_parquet_files_on_a_two_column_key(cli: Cli, tmp_path: Path):
    first = parquet(tmp_path / "u1.parquet", [("a", 1, 100.0), ("b", 4, 200.0)])
    second = parquet(tmp_path / "u2.parquet", [("z", 1, 300.0), ("a", 9, 400.0)])
    out = cli.ok("upsert", "lab.readings", str(first), str(second), "--on", "sensor,day")
    t = cli.table()
    snap = t.current_snapshot()
    assert out == (f"upserted 4 rows into lab.readings on sensor, day: 2 updated, 2 inserted, as snapshot "
                   f"{snap.snapshot_id}\n")
    expected = [r for r in BASE if (r[0], r[1]) not in {("a", 1), ("b", 4)}]
    expected += [("a", 1, 100.0), ("b", 4, 200.0), ("z", 1, 300.0), ("a", 9, 400.0)]
    assert rows(t.scan().to_arrow()) == sorted(expected, key=repr)
    assert len(t.snapshots()) == 2 and snap.summary["lakefmt.row-operation"] == "upsert"
    # --on given twice means the same key.
    third = parquet(tmp_path / "u3.parquet", [("z", 1, -1.0)])
    assert "1 updated, 0 inserted" in cli.ok("upsert", "lab.readings", str(third), "--on", "sensor", "--on", "day")


@pytest.mark.parametrize("argv, message", [
    (["--on", "sensor"], "1 key(s) occur in more than one source row, e.g. sensor='a' (2 rows)"),
    (["--on", "nope"], "upsert key column 'nope' is not a column of table lab.readings"),
    (["--on", ","], "--on needs at least one key column"),
])
def test_bad_upsert_exits_2_and_writes_nothing(cli: Cli, tmp_path: Path, argv: list[str], message: str):
    data = parquet(tmp_path / "dup.parquet", [("a", 1, 1.0), ("a", 2, 2.0)])
    before = sorted(p for p in (cli.warehouse).rglob("*") if p.is_file() and "catalog" not in p.name)
    code, out, err = cli("upsert", "lab.readings", str(data), *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err
    after = sorted(p for p in (cli.warehouse).rglob("*") if p.is_file() and "catalog" not in p.name)
    assert after == before


def test_missing_input_file_and_bad_filter_are_clear_errors(cli: Cli, tmp_path: Path):
    code, _, err = cli("upsert", "lab.readings", str(tmp_path / "absent.parquet"), "--on", "sensor")
    assert code == 2 and "absent.parquet does not exist" in err
    code, _, err = cli("delete", "lab.readings", "--filter", "nope = 1")
    assert code == 2 and "unknown column 'nope'" in err
    code, _, err = cli("delete", "lab.readings")
    assert code == 2 and "--filter" in err


@pytest.mark.multiprocess
def test_lakefmt_upsert_as_a_real_process(tmp_path: Path):
    warehouse = tmp_path / "warehouse"
    base = parquet(tmp_path / "base.parquet", BASE)
    update = parquet(tmp_path / "u.parquet", [("c", 2, 42.0)])
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lakefmt.cli", "--warehouse", str(warehouse), *argv],
                              check=False, env=env, capture_output=True, text=True, timeout=300)

    assert run("create", "lab.readings", "--from-parquet", str(base), "--with-data").returncode == 0
    done = run("upsert", "lab.readings", str(update), "--on", "sensor,day")
    assert done.returncode == 0, done.stderr
    assert "1 updated, 0 inserted" in done.stdout
    deleted = run("delete", "lab.readings", "--filter", "sensor = 'c'")
    assert deleted.returncode == 0 and deleted.stdout.startswith("deleted 4 rows from lab.readings")
    t = lakefmt.Catalog(str(warehouse)).load_table("lab.readings")
    assert rows(t.scan().to_arrow()) == sorted((r for r in BASE if r[0] != "c"), key=repr)
