"""``lakefmt compact``: compact a table's small files from the command line (spec/compaction.md).

Example:
    $ lakefmt compact artemis.downlinks --strategy sort --columns payload_id,sensor_kind
    $ lakefmt compact artemis.downlinks --filter "ts < '2026-03-01'" --dry-run
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakefmt.cli.options import add_command, open_catalog, split_columns

STRATEGIES = ("binpack", "sort", "zorder")  # lakefmt.compaction.options.STRATEGIES, without importing it


def cmd_compact(args: argparse.Namespace) -> int:
    """Run ``lakefmt compact``; exit code 0, or 1 when any group failed."""
    from lakefmt.cli.progress import group_progress, progress_bar  # tqdm: loaded only when the command runs
    from lakefmt.compaction.planner import format_bytes

    table = open_catalog(args).load_table(args.table)
    columns = split_columns(args.columns)
    options: dict[str, Any] = {k: v for k, v in {
        "target_file_size": args.target_file_size, "min_input_files": args.min_input_files,
        "min_age_seconds": args.min_age_seconds, "max_group_size": args.max_group_size,
        "max_concurrent_groups": args.max_concurrent_groups, "read_mb_per_s": args.read_mb_per_s,
        "delete_ratio_threshold": args.delete_ratio_threshold,
    }.items() if v is not None}
    layout: dict[str, Any] = {} if args.strategy == "binpack" else (
        {"sort_by": columns} if args.strategy == "sort" else {"columns": columns})
    if args.dry_run:
        plan = table.compaction.plan(args.strategy, filter=args.filter, **layout, **options)
        print(plan.explain())
        return 0
    bar = None if args.no_progress else progress_bar(0, "groups")
    try:
        result = table.compaction.run(args.strategy, filter=args.filter, respect_windows=args.respect_windows,
                                      progress=group_progress(bar) if bar is not None else None,
                                      **layout, **options)
    finally:
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


def register(subparsers: Any) -> None:
    """Add ``compact``."""
    p = add_command(
        subparsers, "compact", cmd_compact,
        description="Compact a table: plan groups of small files per partition, rewrite each group, verify "
                    "its rows and commit it as a 'replace' snapshot. Options default to the table's "
                    "compaction.* properties.")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--strategy", choices=STRATEGIES, default="binpack", help="default: binpack")
    p.add_argument("--columns", help="comma-separated columns: the sort order (sort) or Z-order columns "
                                     "(zorder); default: the table's sort order")
    p.add_argument("--filter", help="compact only files that may hold rows matching this filter")
    p.add_argument("--dry-run", action="store_true", help="print the plan and why files are left out; write nothing")
    p.add_argument("--target-file-size", type=int, metavar="BYTES")
    p.add_argument("--min-input-files", type=int, metavar="N")
    p.add_argument("--min-age-seconds", type=float, metavar="S", help="0 compacts partitions still being written")
    p.add_argument("--max-group-size", type=int, metavar="BYTES")
    p.add_argument("--delete-ratio-threshold", type=float, metavar="X",
                   help="files with at least this fraction of rows deleted are rewritten even when large (0.3)")
    p.add_argument("--max-concurrent-groups", type=int, metavar="N")
    p.add_argument("--read-mb-per-s", type=float, metavar="MB", help="read budget (0 = unlimited)")
    p.add_argument("--respect-windows", action="store_true",
                   help="do nothing inside the table's compaction.quiet-windows")
    p.add_argument("--rewrite-manifests", action="store_true", help="then merge small manifests")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
