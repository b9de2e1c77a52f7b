"""``lakefmt expire | orphans | rollback | stats | check`` (lakefmt.cli.maintenance)."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

import lakefmt
from lakefmt.cli import build_parser, main
from lakefmt.cli.maintenance import EXIT_VIOLATIONS, parse_age
from tests.maintenance.helpers import batch, make_table


@pytest.fixture
def warehouse(tmp_path):
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = make_table(catalog)
    t.append(batch(0, 30))
    t.append(batch(30, 30))
    return str(tmp_path / "wh"), t


def run(capsys, warehouse: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--warehouse", warehouse, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_commands_are_wired():
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"expire", "orphans", "rollback", "stats", "check"} <= set(choices)


def test_check_and_stats(warehouse, capsys):
    wh, _ = warehouse
    code, out, _ = run(capsys, wh, "check", "maint.t")
    assert code == 0 and "OK" in out
    code, out, _ = run(capsys, "unused", "check", "maint.t", "--warehouse", wh, "--format", "json")
    assert code == 0 and json.loads(out)["ok"] is True
    code, out, _ = run(capsys, wh, "stats", "maint.t")
    assert code == 0 and "part=a" in out and "historical" in out
    code, out, _ = run(capsys, wh, "stats", "maint.t", "--format", "json")
    assert json.loads(out)["live_records"] == 60


def test_check_exits_non_zero_on_a_violation(warehouse, capsys):
    wh, t = warehouse
    t.io.delete(f"{t.location}/{t.plan_files()[0].path}")
    code, out, _ = run(capsys, wh, "check", "maint.t")
    assert code == EXIT_VIOLATIONS and "LAYOUT-5" in out


def test_rollback_expire_orphans(warehouse, capsys):
    wh, t = warehouse
    first = t.snapshots()[0].snapshot_id
    code, out, _ = run(capsys, wh, "rollback", "maint.t", str(first))
    assert code == 0 and str(first) in out
    code, out, _ = run(capsys, wh, "expire", "maint.t", "--older-than", "0", "--dry-run")
    assert code == 0 and out.startswith("would expire 1 snapshot")
    code, out, _ = run(capsys, wh, "expire", "maint.t", "--older-than", "0")
    assert code == 0 and out.startswith("expired 1 snapshot")
    t.io.write_bytes(f"{t.location}/data/stray.bin", b"x")
    code, out, err = run(capsys, wh, "orphans", "maint.t", "--older-than", "0")
    assert code == 0 and out.split() == ["data/stray.bin"] and "dry run" in err
    code, out, err = run(capsys, wh, "orphans", "maint.t", "--older-than", "0", "--delete")
    assert code == 0 and "1 orphan(s) deleted" in err and not t.io.exists(f"{t.location}/data/stray.bin")
    code, _, err = run(capsys, wh, "rollback", "maint.t", "12345")
    assert code == 2 and err.startswith("error: table maint.t has no snapshot 12345")
    code, _, err = run(capsys, wh, "expire", "maint.t", "--snapshot-id", "12345")
    assert code == 2 and err.startswith("error: table maint.t has no snapshot 12345") and wh not in err


@pytest.mark.parametrize(("text", "expected"), [
    ("7d", dt.timedelta(days=7)), ("12h", dt.timedelta(hours=12)), ("0", dt.timedelta(0)),
    ("90m", dt.timedelta(minutes=90)), ("1.5s", dt.timedelta(seconds=1.5)),
    ("2026-01-15T10:00:00", dt.datetime(2026, 1, 15, 10, tzinfo=dt.timezone.utc)),
])
def test_parse_age(text, expected):
    assert parse_age(text) == expected


def test_bad_age_is_a_user_error(warehouse, capsys):
    wh, _ = warehouse
    code, _, err = run(capsys, wh, "expire", "maint.t", "--older-than", "soon")
    assert code == 2 and "--older-than" in err


def test_stats_and_orphans_explain_superseded_metadata_files(tmp_path, capsys):
    """Old metadata files out of the metadata-log are orphans, not in flight, and the output says why."""
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    t = make_table(catalog, **{"write.metadata.previous-versions-max": "2"})
    for i in range(4):
        t.append(batch(i * 10, 10))  # v000001 (create) … v000005: v000001 and v000002 fall out of the log
    wh = str(tmp_path / "wh")
    code, out, _ = run(capsys, wh, "stats", "maint.t")
    assert code == 0 and re.search(r"of which superseded metadata +2 files", out)
    assert re.search(r"in flight \(uncommitted, leased\) +0 files", out) and "MAINT-6" in out
    code, out, err = run(capsys, wh, "orphans", "maint.t", "--older-than", "0")
    assert code == 0 and sorted(p[:17] for p in out.split()) == ["metadata/v000001-", "metadata/v000002-"]
    assert "2 of the orphans are old metadata files that fell out of the metadata-log" in err
