"""``lakefmt report TABLE --out report.html``: a table's small-files story as one self-contained HTML page.

The page has no external resource (inline CSS and SVG, no script) and shows:

1. **File sizes per partition, before and after the last compaction**: histograms of
   the live files' sizes in the snapshot before the last run of compaction commits and
   in the last commit of that run (``replace`` snapshots carrying ``lakefmt.compaction.*``
   summary keys, COMPACT-20; consecutive ones in the current history form a run);
2. **File count over time**: ``total-data-files`` of every snapshot in the snapshot log,
   compactions marked;
3. **Planning time trend**: the time to plan a full scan of retained snapshots, sampled
   across the history and measured now with a cold manifest cache (what a new reader
   pays), with the number of manifests;
4. **Service jobs** touching the table, when ``lakefmt serve`` has run on the warehouse.

Example:
    $ lakefmt report artemis.downlinks --out report.html     # lakefmt.cli.report
    >>> html = render_report(catalog.load_table("artemis.downlinks"))
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from lakefmt import __version__
from lakefmt.compaction.planner import format_bytes
from lakefmt.manifest_cache import clear as clear_manifest_cache
from lakefmt.manifest_cache import read_list
from lakefmt.report_svg import bar_chart, esc, line_chart

if TYPE_CHECKING:
    from lakefmt.metadata import Snapshot
    from lakefmt.table import Table

KiB = 1024
COMPACTION_KEY = "lakefmt.compaction.group"
STYLE = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:980px;color:#1d2329}
h1{font-size:22px;margin-bottom:2px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #dde2e6}
.muted{color:#66707a}.grid{display:flex;flex-wrap:wrap;gap:8px}table{border-collapse:collapse;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #eef0f2;text-align:right}td:first-child,th:first-child{text-align:left}
.kpi{display:inline-block;margin-right:26px}.kpi b{display:block;font-size:20px}"""


@dataclass(frozen=True)
class CompactionRun:
    """The last run of consecutive compaction commits in the current history."""

    before_snapshot_id: int | None  # the parent of the run's first commit (None if expired or absent)
    after_snapshot_id: int
    commits: int
    strategy: str
    finished_ms: int


def is_compaction(snapshot: Snapshot) -> bool:
    return snapshot.operation == "replace" and COMPACTION_KEY in snapshot.summary


def last_compaction(table: Table) -> CompactionRun | None:
    meta = table.metadata
    chain = list(meta.ancestors(meta.current_snapshot_id))  # newest first
    start = next((i for i, s in enumerate(chain) if is_compaction(s)), None)
    if start is None:
        return None
    end = start
    while end + 1 < len(chain) and is_compaction(chain[end + 1]):
        end += 1
    first, last = chain[end], chain[start]
    parent = first.parent_snapshot_id
    retained = {s.snapshot_id for s in meta.snapshots}
    return CompactionRun(parent if parent in retained else None, last.snapshot_id, end - start + 1,
                         last.summary.get("lakefmt.compaction.strategy", "?"), last.timestamp_ms)


def sizes_by_partition(table: Table, snapshot_id: int) -> dict[str, list[int]]:
    meta = table.metadata
    out: dict[str, list[int]] = {}
    for f in table.plan_files(snapshot_id=snapshot_id):
        spec = meta.spec_by_id(f.spec_id)
        label = "(unpartitioned)" if spec.is_unpartitioned else spec.partition_path(f.partition, meta.schema)
        out.setdefault(label, []).append(f.file_size_bytes)
    return out


def size_edges(sizes: list[int]) -> list[int]:
    """Bucket edges at powers of 4 from 1 KiB, covering ``sizes``."""
    edges = [KiB]
    top = max(sizes, default=KiB)
    while edges[-1] <= top:
        edges.append(edges[-1] * 4)
    low = min(sizes, default=KiB)
    while len(edges) > 2 and edges[1] <= low:
        edges.pop(0)
    return edges


def histogram(sizes: list[int], edges: list[int]) -> list[int]:
    counts = [0] * (len(edges) + 1)
    for size in sizes:
        counts[sum(1 for e in edges if size >= e)] += 1
    return counts


def edge_labels(edges: list[int]) -> list[str]:
    def short(n: int) -> str:
        return format_bytes(n).replace(".0 ", " ")

    return [f"<{short(edges[0])}", *(f"{short(a)}–{short(b)}" for a, b in pairwise(edges)),
            f"≥{short(edges[-1])}"]


def planning_trend(table: Table, *, samples: int = 24) -> list[tuple[int, float, int, int]]:
    """``(timestamp_ms, seconds, files, manifests)`` for up to ``samples`` retained snapshots, cold cache."""
    snaps = sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number))
    if len(snaps) > samples:
        step = (len(snaps) - 1) / (samples - 1)
        snaps = [snaps[round(i * step)] for i in range(samples)]
    out = []
    for s in snaps:
        clear_manifest_cache()
        started = time.perf_counter()
        plan = table.scan(snapshot_id=s.snapshot_id).plan()
        seconds = time.perf_counter() - started
        manifests = len(read_list(table.io, f"{table.metadata.location}/{s.manifest_list}"))
        out.append((s.timestamp_ms, seconds, len(plan.files), manifests))
    return out


def _time(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%m-%d %H:%M:%S")


def _kpi(label: str, value: object) -> str:
    return f'<span class="kpi"><b>{esc(value)}</b><span class="muted">{esc(label)}</span></span>'


def _histograms(table: Table, run: CompactionRun | None, max_partitions: int) -> str:
    if run is None:
        return '<p class="muted">No compaction in the current history yet.</p>'
    after = sizes_by_partition(table, run.after_snapshot_id)
    before = sizes_by_partition(table, run.before_snapshot_id) if run.before_snapshot_id is not None else {}
    note = "" if run.before_snapshot_id is not None else \
        '<p class="muted">The snapshot before this compaction was expired: only "after" is shown.</p>'
    names = sorted(set(before) | set(after), key=lambda p: (-len(before.get(p, [])), p))
    edges = size_edges([s for d in (before, after) for v in d.values() for s in v])
    labels = edge_labels(edges)
    charts = []
    for name in names[:max_partitions]:
        b, a = before.get(name, []), after.get(name, [])
        charts.append(bar_chart(labels, {f"before: {len(b)} file(s)": histogram(b, edges),
                                         f"after: {len(a)} file(s)": histogram(a, edges)}, title=name))
    more = f'<p class="muted">… and {len(names) - max_partitions} more partitions.</p>' \
        if len(names) > max_partitions else ""
    head = (f"<p>Last compaction: {run.commits} commit(s), strategy <b>{esc(run.strategy)}</b>, finished "
            f"{esc(_time(run.finished_ms))} UTC (snapshot {run.before_snapshot_id} → {run.after_snapshot_id}).</p>")
    return head + note + '<div class="grid">' + "".join(charts) + "</div>" + more


def _jobs(table: Table) -> str:
    from lakefmt.service.jobs import stored_history  # the service sits above the report; optional section

    rows = []
    for job in stored_history(table.catalog, table=table.name, limit=20):
        mine = next((t for t in job.tables if t.get("table") == table.name), None)
        if mine is None:
            continue
        rows.append(f"<tr><td>{esc(job.to_dict()['finished_at'])}</td><td>{esc(job.kind)}</td><td>{esc(job.trigger)}"
                    f"</td><td>{esc(mine.get('status'))}</td><td>{mine.get('files_rewritten', 0)} → "
                    f"{mine.get('files_written', 0)}</td><td>{esc(format_bytes(mine.get('bytes_rewritten', 0)))}"
                    f"</td><td>{mine.get('seconds', 0):.2f}</td></tr>")
    if not rows:
        return '<p class="muted">No service job has touched this table.</p>'
    return ("<table><tr><th>finished (UTC)</th><th>kind</th><th>trigger</th><th>status</th><th>files</th>"
            "<th>bytes rewritten</th><th>seconds</th></tr>" + "".join(rows) + "</table>")


def render_report(table: Table, *, samples: int = 24, max_partitions: int = 12) -> str:
    """The report of ``table`` as one HTML document."""
    table.refresh()
    meta = table.metadata
    snap = meta.current_snapshot
    summary: dict[str, Any] = dict(snap.summary) if snap else {}
    run = last_compaction(table)
    history = table.history()
    counts = [(h.made_current_at.timestamp() * 1000, float(h.summary.get("total-data-files", 0))) for h in history]
    compactions = [(h.made_current_at.timestamp() * 1000, float(h.summary.get("total-data-files", 0)))
                   for h in history if h.operation == "replace" and COMPACTION_KEY in h.summary]
    trend = planning_trend(table, samples=samples)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    sections = [
        (f"<h1>{esc(table.name)}</h1><p class=\"muted\">lakefmt {esc(__version__)} report, generated {generated} "
         f"UTC; {esc(meta.location)}</p>"),
        "<p>" + _kpi("live data files", summary.get("total-data-files", 0))
        + _kpi("live bytes", format_bytes(int(summary.get("total-files-size", 0))))
        + _kpi("rows", summary.get("total-records", 0)) + _kpi("snapshots retained", len(meta.snapshots))
        + _kpi("manifests now", trend[-1][3] if trend else 0) + "</p>",
        "<h2>File sizes per partition, before and after the last compaction</h2>",
        _histograms(table, run, max_partitions),
        "<h2>Data files over time</h2>",
        line_chart({"data files": counts}, markers={"compaction commit": compactions}, step=True,
                   x_format=_time, y_label="files"),
        "<h2>Planning time trend</h2>",
        ("<p class=\"muted\">Time to plan a full scan of retained snapshots (sampled), measured now with a cold "
         "manifest cache.</p>"),
        line_chart({"planning ms": [(t, s * 1000) for t, s, _f, _m in trend]}, x_format=_time, y_label="ms"),
        line_chart({"manifests": [(t, float(m)) for t, _s, _f, m in trend]}, x_format=_time, y_label="manifests",
                   height=200),
        "<h2>Service jobs</h2>",
        _jobs(table),
    ]
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(table.name)} — lakefmt "
            f"report</title><style>{STYLE}</style></head><body>" + "\n".join(sections) + "</body></html>\n")


__all__ = ["CompactionRun", "last_compaction", "render_report"]
