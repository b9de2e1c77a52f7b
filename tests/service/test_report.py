"""``lakefmt report``: a self-contained HTML page with inline SVG charts."""

from __future__ import annotations

import re

from lakefmt.cli import main
from lakefmt.report import last_compaction, render_report
from tests.service.conftest import small_files_table


def test_report_of_a_compacted_table(local_catalog, tmp_path, capsys):
    """SERVICE-28: one self-contained HTML file (no script, no external resource, inline SVG) with the
    file-size histograms per partition before and after the last compaction run."""
    t = small_files_table(local_catalog, "ops.events")
    pre = t.current_snapshot().snapshot_id
    result = t.compaction.run("binpack")
    t.append(t.scan().to_arrow().slice(0, 10))  # ingest after the compaction
    run = last_compaction(t.refresh())
    assert run is not None and run.before_snapshot_id == pre and run.after_snapshot_id == result.snapshot_ids[-1]
    assert run.commits == len(result.snapshot_ids) >= 1 and run.strategy == "binpack"
    page = render_report(t, samples=4)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 3 + 3  # 3 partitions, 3 charts
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)  # self-contained
    assert "before: 6 file(s)" in page and "after: 1 file(s)" in page
    assert "No service job has touched this table" in page
    out = tmp_path / "report.html"
    code = main(["report", "ops.events", "--warehouse", local_catalog.warehouse, "--out", str(out), "--samples", "3"])
    assert code == 0 and out.read_text().count("<svg") == 6 and "wrote" in capsys.readouterr().out


def test_report_before_any_compaction_and_bad_arguments(local_catalog, tmp_path, capsys):
    small_files_table(local_catalog, "ops.events", appends=2)
    t = local_catalog.load_table("ops.events")
    assert last_compaction(t) is None
    assert "No compaction in the current history yet" in render_report(t, samples=2)
    args = ["report", "ops.events", "--warehouse", local_catalog.warehouse]
    assert main([*args, "--out", str(tmp_path / "r.png")]) == 2
    assert main([*args, "--samples", "1"]) == 2
    assert main(["report", "no.table", "--warehouse", local_catalog.warehouse, "--out",
                 str(tmp_path / "r.html")]) == 2
    assert "error:" in capsys.readouterr().err
