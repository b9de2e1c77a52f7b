"""``lakefmt serve --demo`` stays bounded: its own schedule and retention, driven fast in-process (SERVICE-30).

The demo writer appends once a second; here one loop iteration is one simulated second,
and every job kind runs when the demo's cron expression fires at that simulated time.
Snapshot expiry keeps a fixed number of snapshots, so it needs no clock. Orphan removal
has a grace period on file age, so before each run the files under the table are given
the modification time they would have in simulated time (a file counts as born when it
is first seen, which makes it look younger than it is: the bound found is conservative).
"""

from __future__ import annotations

import os
import random
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import lakefmt
from lakefmt.service.config import JOB_KINDS, load_config
from lakefmt.service.cron import CronSchedule
from lakefmt.service.demo import DEMO_ENVIRON, RETAIN_SNAPSHOTS, TABLE, batch, create_demo_table
from lakefmt.service.tasks import Control, run_table_job

SECONDS = 280  # simulated seconds: orphan removal runs at :30 of each minute, steady from 2:30 on
ROWS = 300  # rows per append, as the demo writer
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def files_under(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_demo_schedule_keeps_snapshots_and_history_bytes_bounded(tmp_path):
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    config = load_config(environ=DEMO_ENVIRON, warehouse=catalog.warehouse)
    assert all(config.job(kind).enabled for kind in JOB_KINDS)  # the demo runs every kind of job
    create_demo_table(catalog)
    table = catalog.load_table(TABLE)
    root = Path(table.metadata.location.removeprefix("file://"))
    schedules = {kind: CronSchedule.parse(config.job(kind).schedule) for kind in JOB_KINDS}
    next_fire = {kind: s.next_after(START - timedelta(seconds=1)) for kind, s in schedules.items()}
    born: dict[str, float] = {}  # file -> simulated second first seen
    rng = random.Random(7)
    checkpoints: dict[int, dict[str, int]] = {}  # second of each orphan run -> layout() right after it
    for second in range(SECONDS):
        now = START + timedelta(seconds=second)
        table.append(batch(ROWS, rng))
        for kind in JOB_KINDS:
            if next_fire[kind] > now:
                continue
            next_fire[kind] = schedules[kind].next_after(now)
            if kind == "orphans":  # give every file its age in simulated time
                real_now = time.time()
                for path in files_under(root):
                    age = second - born.setdefault(path, second)
                    os.utime(path, (real_now - age, real_now - age))
            outcome = run_table_job(kind, catalog.load_table(TABLE), config, Control())
            assert outcome.status == "succeeded", (second, kind, outcome.error)
            if kind == "orphans":
                checkpoints[second] = layout(table, root)
        table.refresh()
        if second >= 60:  # after the first expiries: the newest RETAIN_SNAPSHOTS plus what 15 s can add
            assert len(table.metadata.snapshots) <= RETAIN_SNAPSHOTS + 20, second
    assert sorted(checkpoints) == [30, 90, 150, 210, 270]
    early, late = checkpoints[150], checkpoints[270]
    # The old demo kept every snapshot: 280 of them here, each metadata file listing all, and every
    # compaction's inputs and outputs. Now metadata stays flat, and old data files are at most the
    # one or two rewrites of each partition that the retained snapshots still reach.
    assert late["metadata_files"] <= 10 + 2 * 60 * 2, checkpoints  # the metadata log + two minutes of commits
    assert late["metadata_bytes"] <= 1.25 * early["metadata_bytes"] + 64 * 1024, checkpoints
    assert late["old_data_bytes"] <= 2.5 * late["live_bytes"], checkpoints
    assert late["live_bytes"] > 1.5 * early["live_bytes"]  # the writer kept appending all along
    assert len(table.scan().to_arrow()) == SECONDS * ROWS  # and nothing it appended was lost


def layout(table: lakefmt.Table, root: Path) -> dict[str, int]:
    """Snapshots, metadata files and bytes, live data bytes, and bytes of data files no longer live."""
    table.refresh()
    live = {f.path.rsplit("/", 1)[-1]: f.file_size_bytes for f in table.scan().plan_files()}
    files = files_under(root)
    metadata = {p: n for p, n in files.items() if Path(p).parent.name == "metadata"}
    data = {p: n for p, n in files.items() if p not in metadata}
    live_bytes = sum(n for p, n in data.items() if Path(p).name in live)
    return {"snapshots": len(table.metadata.snapshots), "live_bytes": live_bytes,
            "metadata_files": sum(1 for p in metadata if p.endswith(".metadata.json")),
            "metadata_bytes": sum(metadata.values()), "old_data_bytes": sum(data.values()) - live_bytes}
