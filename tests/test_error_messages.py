"""Errors name the table as the user typed it and print times in ISO 8601 UTC, not locations and epoch ms."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.cli import main

EPOCH_MS = re.compile(r"\b1\d{12}\b")  # a 13-digit epoch millisecond timestamp


@pytest.fixture
def table(tmp_path) -> lakefmt.Table:
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = catalog.create_table("artemis.downlinks", pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2]}))
    return t


def assert_user_facing(message: str, t: lakefmt.Table) -> None:
    assert "artemis.downlinks" in message
    assert t.location not in message and "/artemis/" not in message
    assert not EPOCH_MS.search(message), message


def test_as_of_before_the_first_snapshot(table: lakefmt.Table):
    first = dt.datetime.fromtimestamp(table.snapshots()[0].timestamp_ms / 1000, dt.timezone.utc)
    before = first - dt.timedelta(days=400)
    with pytest.raises(lakefmt.NoSuchSnapshotError) as info:
        table.scan(as_of=before.replace(hour=10, minute=0, second=0, microsecond=0))
    message = info.value.args[0]
    assert message.startswith(f"table artemis.downlinks had no snapshot at or before {before:%Y-%m-%d}T10:00:00Z; "
                              "its oldest recorded snapshot became current at ")
    assert re.search(r"became current at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$", message), message
    assert_user_facing(message, table)
    with pytest.raises(lakefmt.NoSuchSnapshotError):  # the same through plan_files
        table.plan_files(as_of=dt.datetime(2000, 1, 1))


@pytest.mark.parametrize("call", [
    lambda t: t.snapshot(42),
    lambda t: t.scan(snapshot_id=42),
    lambda t: t.rollback_to(42),
    lambda t: t.set_current_snapshot(42),
    lambda t: t.maintenance.expire_snapshots(snapshot_ids=[42]),
])
def test_unknown_snapshot_id_names_the_table(table: lakefmt.Table, call):
    with pytest.raises(lakefmt.NoSuchSnapshotError) as info:
        call(table)
    message = info.value.args[0]
    assert message.startswith("table artemis.downlinks has no snapshot 42: it never existed or was expired")
    assert_user_facing(message, table)
    assert len(table.snapshots()) == 1  # nothing was written


def test_cli_as_of_error(table: lakefmt.Table, tmp_path, capsys):
    warehouse = str(tmp_path / "wh")
    capsys.readouterr()
    code = main(["--warehouse", warehouse, "scan", "artemis.downlinks", "--as-of", "2000-01-15T10:00:00"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: table artemis.downlinks had no snapshot at or before 2000-01-15T10:00:00Z")
    assert warehouse not in err and len(err.splitlines()) == 1
    assert_user_facing(err, table)
    code = main(["--warehouse", warehouse, "inspect", "artemis.downlinks", "--snapshot-id", "42"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: table artemis.downlinks has no snapshot 42")
