"""``lakefmt compact`` and ``lakefmt demo`` through the CLI's ``main`` (in-process)."""

from __future__ import annotations

import argparse

import pytest

from lakefmt.cli import compact as compact_cli
from lakefmt.cli import demo as demo_cli
from lakefmt.cli import main
from lakefmt.cli.progress import progress_bar
from tests.compaction.conftest import small_files_table
from tests.conftest import rows


def test_compact_dry_run_then_run(local_catalog, capsys):
    t = small_files_table(local_catalog)
    before = t.scan().to_arrow()
    wh = local_catalog.warehouse
    assert main(["--warehouse", wh, "compact", "artemis.downlinks", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "0 groups" in out and "too-young" in out  # default min age: just-written partitions are open
    code = main(["compact", "artemis.downlinks", "--warehouse", wh, "--strategy", "sort",
                 "--columns", "payload_id,sensor_kind", "--min-age-seconds", "0", "--rewrite-manifests"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "3 committed" in captured.out and "manifest compaction" in captured.out
    assert "3/3 groups" in captured.err  # the progress bar
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before) and len(t.plan_files()) == 3
    assert main(["--warehouse", wh, "compact", "artemis.downlinks", "--strategy", "zorder"]) == 0
    assert main(["--warehouse", wh, "compact", "artemis.downlinks", "--strategy", "bogus"]) == 2
    assert main(["--warehouse", wh, "compact", "artemis.downlinks", "--strategy", "sort",
                 "--columns", "nope"]) == 2
    assert "unknown column" in capsys.readouterr().err


def test_parsers_standalone():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    compact_cli.register(sub)
    demo_cli.register(sub)
    args = parser.parse_args(["compact", "a.b", "--strategy", "zorder", "--columns", "x,y", "--read-mb-per-s", "5"])
    assert (args.table, args.strategy, args.columns, args.read_mb_per_s) == ("a.b", "zorder", "x,y", 5.0)
    assert not hasattr(args, "warehouse")  # the top-level option is not overridden
    demo = parser.parse_args(["demo", "--commits", "3"])
    assert demo.commits == 3 and demo.strategy == "sort"


def test_progress_bar_plain_stream():
    import io

    stream = io.StringIO()
    bar = progress_bar(4, "groups", stream=stream)
    for _ in range(4):
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and lines[-1].startswith("4/4 groups")  # whole lines, not redraws


@pytest.mark.parametrize("strategy", ["sort", "zorder"])
def test_demo_small(tmp_path, capsys, strategy):
    argv = ["demo", "--warehouse", str(tmp_path / "wh"), "--commits", "16", "--missions", "2",
            "--rows-per-commit", "1000", "--strategy", strategy]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "the same multiset as before compaction" in out and "current snapshot: same rows" in out
    assert "data files" in out and "files planned" in out and "planning time" in out
    assert main(argv) == 0  # re-runnable: the demo table is dropped and re-created
