"""``lakefmt compact``: compact a table's small files from the command line (spec/compaction.md).

Wired into :mod:`lakefmt.cli` through :func:`add_compact_parser` and :func:`run_compact`.

Example:
    $ lakefmt compact artemis.downlinks --strategy sort --columns payload_id,sensor_kind
    $ lakefmt compact artemis.downlinks --filter "ts < '2026-03-01'" --dry-run
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from lakefmt.catalog import Catalog
from lakefmt.compaction.options import STRATEGIES
from lakefmt.compaction.planner import format_bytes
from lakefmt.compaction.results import GroupResult


class ProgressBar:
    """A plain-text progress bar on a stream (stderr), redrawn in place on a terminal."""

    def __init__(self, total: int, unit: str, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(0, total)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.started = time.perf_counter()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_line = ""
        self._last_draw = 0.0

    def update(self, done: int, total: int | None = None, detail: str = "") -> None:
        if total is not None:
            self.total = total
        now = time.perf_counter()
        final = done >= self.total
        if not final and now - self._last_draw < (0.1 if self._tty else 2.0):
            return
        self._last_draw = now
        share = done / self.total if self.total else 1.0
        filled = int(self.width * share)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} {self.unit} "
                f"{now - self.started:5.1f} s {detail}").rstrip()
        if self._tty:
            self.stream.write("\r" + line.ljust(len(self._last_line)))
        else:
            self.stream.write(line + "\n")
        self._last_line = line
        self.stream.flush()

    def groups(self, done: int, total: int, group: GroupResult) -> None:
        """A ``progress`` callback for ``Compaction.run``."""
        self.update(done, total, f"{group.partition} {group.status}")

    def close(self) -> None:
        if self._tty and self._last_line:
            self.stream.write("\n")
            self.stream.flush()


def add_compact_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compact`` sub-command to an ``argparse`` sub-parsers object."""
    p = subparsers.add_parser(
        "compact", help="rewrite small data files into target-sized ones (bin-pack, sort or Z-order)",
        description="Compact a table: plan groups of small files per partition, rewrite each group, verify "
                    "its rows and commit it as a 'replace' snapshot. Options default to the table's "
                    "compaction.* properties.")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--warehouse", default=argparse.SUPPRESS, help="warehouse location")
    p.add_argument("--catalog-path", default=argparse.SUPPRESS, help="the DuckDB catalog file")
    p.add_argument("--strategy", choices=STRATEGIES, default="binpack", help="default: binpack")
    p.add_argument("--columns", help="comma-separated columns: the sort order (sort) or Z-order columns "
                                     "(zorder); default: the table's sort order")
    p.add_argument("--filter", help="compact only files that may hold rows matching this filter")
    p.add_argument("--dry-run", action="store_true", help="print the plan and why files are left out; write nothing")
    p.add_argument("--target-file-size", type=int, metavar="BYTES")
    p.add_argument("--min-input-files", type=int, metavar="N")
    p.add_argument("--min-age-seconds", type=float, metavar="S", help="0 compacts partitions still being written")
    p.add_argument("--max-group-size", type=int, metavar="BYTES")
    p.add_argument("--max-concurrent-groups", type=int, metavar="N")
    p.add_argument("--read-mb-per-s", type=float, metavar="MB", help="read budget (0 = unlimited)")
    p.add_argument("--respect-windows", action="store_true",
                   help="do nothing inside the table's compaction.quiet-windows")
    p.add_argument("--rewrite-manifests", action="store_true", help="then merge small manifests")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def _open_catalog(args: argparse.Namespace) -> Catalog:
    from lakefmt.cli import open_catalog  # the CLI module sits above this one; import it only when run

    if not hasattr(args, "warehouse"):
        args.warehouse = "warehouse"
    if not hasattr(args, "catalog_path"):
        args.catalog_path = None
    if not hasattr(args, "storage_options"):
        args.storage_options = {}
    return open_catalog(args)


def run_compact(args: argparse.Namespace) -> int:
    """Run ``lakefmt compact``; exit code 0, or 1 when any group failed."""
    table = _open_catalog(args).load_table(args.table)
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    options: dict[str, Any] = {k: v for k, v in {
        "target_file_size": args.target_file_size, "min_input_files": args.min_input_files,
        "min_age_seconds": args.min_age_seconds, "max_group_size": args.max_group_size,
        "max_concurrent_groups": args.max_concurrent_groups, "read_mb_per_s": args.read_mb_per_s,
    }.items() if v is not None}
    layout: dict[str, Any] = {} if args.strategy == "binpack" else (
        {"sort_by": columns} if args.strategy == "sort" else {"columns": columns})
    if args.dry_run:
        plan = table.compaction.plan(args.strategy, filter=args.filter, **layout, **options)
        print(plan.explain())
        return 0
    bar = None if args.no_progress else ProgressBar(0, "groups")
    result = table.compaction.run(args.strategy, filter=args.filter, respect_windows=args.respect_windows,
                                  progress=bar.groups if bar else None, **layout, **options)
    if bar is not None:
        bar.close()
    print(result.summary())
    if args.rewrite_manifests:
        print(table.compaction.rewrite_manifests().summary())
    if result.status == "quiet-window":
        print("inside a quiet window: nothing was done", file=sys.stderr)
    elif result.groups_committed:
        print(f"{result.files_rewritten} files ({format_bytes(result.bytes_rewritten)}) compacted into "
              f"{result.files_written}")
    return 1 if result.groups_failed else 0
