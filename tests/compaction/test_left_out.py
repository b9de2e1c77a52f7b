"""A compaction that leaves files out says why: too young, until when, and how to override (COMPACT-5, COMPACT-11)."""

from __future__ import annotations

import datetime as dt

from lakefmt.cli import main
from tests.compaction.conftest import small_files_table


def test_first_run_on_fresh_data_explains_the_minimum_age(local_catalog):
    t = small_files_table(local_catalog, appends=6)
    files = len(t.plan_files())
    newest_ms = max(s.timestamp_ms for s in t.snapshots())

    result = t.compaction.run()
    assert result.status == "nothing-to-do" and result.groups_committed == 0
    assert dict(result.skipped_files) == {"too-young": files}
    young = result.too_young
    assert young is not None and (young.files, young.partitions) == (files, 3)
    assert young.min_age_seconds == 3600
    assert young.eligible_ms == newest_ms + 3_600_000
    assert young.eligible_at == dt.datetime.fromtimestamp((newest_ms + 3_600_000) / 1000, dt.timezone.utc)
    summary = result.summary()
    eligible = young.eligible_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"{files} files in 3 partitions left out as too young" in summary
    assert f"eligible at {eligible}" in summary
    assert "compaction.min-age-seconds" in summary and "--min-age-seconds 0" in summary
    assert "too-young" in repr(result)

    assert t.compaction.run(min_age_seconds=0).groups_committed == 3  # the override works
    assert t.compaction.run(min_age_seconds=0).too_young is None


def test_cli_compact_and_dry_run_say_why(local_catalog, capsys):
    t = small_files_table(local_catalog, appends=6)
    files = len(t.plan_files())
    wh = local_catalog.warehouse
    assert main(["--warehouse", wh, "compact", "artemis.downlinks", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "nothing-to-do" in out
    assert f"{files} files in 3 partitions left out as too young" in out
    assert "--min-age-seconds 0" in out and "eligible at 20" in out
    assert main(["--warehouse", wh, "compact", "artemis.downlinks", "--dry-run"]) == 0
    assert "left out as too young" in capsys.readouterr().out
    assert len(t.plan_files()) == files  # nothing was rewritten
