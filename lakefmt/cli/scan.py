"""``lakefmt scan | snapshots | history``: read a table's rows and its snapshot history.

Example:
    $ lakefmt scan artemis.downlinks --filter "payload_id = 3" --columns ts,value --limit 5
    $ lakefmt scan artemis.downlinks --as-of 2026-01-15T10:00:00Z --format csv > rows.csv
    $ lakefmt snapshots artemis.downlinks --format json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from lakefmt.cli.format import FORMATS, print_records, print_rows
from lakefmt.cli.options import CliError, add_command, ms_to_iso, open_catalog, parse_time, split_columns

TERMINAL_LIMIT = 100  # rows `scan` prints to a terminal without --limit or --all
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "+00:00"})


class _Counted:
    """Rows from an iterator, at most ``limit`` of them; ``more`` tells whether any was held back."""

    def __init__(self, rows: Iterator[tuple[Any, ...]], limit: int) -> None:
        self.rows, self.limit, self.shown, self.more = rows, limit, 0, False

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for row in self.rows:
            if self.shown >= self.limit:
                self.more = True
                return
            self.shown += 1
            yield row


def limited_rows(batches: Iterable[Any], limit: int | None) -> Iterator[tuple[Any, ...]]:
    """The rows of record batches as tuples, at most ``limit`` of them."""
    remaining = limit
    for batch in batches:
        if remaining is not None:
            if remaining <= 0:
                return
            batch = batch.slice(0, remaining)
            remaining -= batch.num_rows
        columns = [python_values(c) for c in batch.columns]
        yield from zip(*columns) if columns else ((),) * batch.num_rows


def python_values(column: Any) -> list[Any]:
    """``column.to_pylist()``, a ``timestamptz`` column's (microseconds in UTC, TYPE-3) converted here:
    pyarrow converts a zoned timestamp through pandas, whose import cost 0.15-0.4 s of the scan."""
    dtype = column.type
    if getattr(dtype, "tz", None) in UTC_NAMES and dtype.unit == "us":
        from lakefmt.conversions import to_python  # loads pyarrow: not at the CLI's start
        from lakefmt.types import TIMESTAMPTZ

        return [to_python(TIMESTAMPTZ, v) for v in column.cast("int64").to_pylist()]
    return column.to_pylist()  # type: ignore[no-any-return]


def cmd_scan(args: argparse.Namespace) -> int:
    """Print the rows; on a terminal, without ``--limit`` or ``--all``, only the first ``TERMINAL_LIMIT``."""
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    if args.limit is not None and args.all:
        raise CliError("--limit and --all exclude each other")
    as_of = parse_time(args.as_of) if args.as_of else None
    table = open_catalog(args).load_table(args.table)
    scan = table.scan(filter=args.filter, columns=split_columns(args.columns), snapshot_id=args.snapshot_id,
                      as_of=as_of)
    names = [f.name for f in scan.projected_schema.fields]
    terminal = args.limit is None and not args.all and sys.stdout.isatty()
    if not terminal:  # a pipe or a file gets every row (or --limit)
        print_rows(names, limited_rows(scan.to_batches(), args.limit), fmt=args.format, out=sys.stdout)
        return 0
    rows = _Counted(limited_rows(scan.to_batches(), None), TERMINAL_LIMIT)
    print_rows(names, rows, fmt=args.format, out=sys.stdout, footer=False)
    if rows.more:  # in the footer of a text table, else on stderr so that CSV and JSON stay parseable
        print(f"(showing the first {rows.shown} rows; more match: use --limit N or --all to print more; "
              "output to a pipe or file is complete)", file=sys.stdout if args.format == "table" else sys.stderr)
    elif args.format == "table":
        print(f"({rows.shown} row{'s' if rows.shown != 1 else ''})")
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    current = table.metadata.current_snapshot_id
    records = [{
        "snapshot_id": s.snapshot_id,
        "parent_id": s.parent_snapshot_id,
        "sequence": s.sequence_number,
        "committed_at": ms_to_iso(s.timestamp_ms),
        "operation": s.operation,
        "added_files": s.summary.get("added-data-files"),
        "deleted_files": s.summary.get("deleted-data-files"),
        "added_records": s.summary.get("added-records"),
        "deleted_records": s.summary.get("deleted-records"),
        "total_files": s.summary.get("total-data-files"),
        "total_records": s.summary.get("total-records"),
        "current": s.snapshot_id == current,
    } for s in table.snapshots()]
    print_records(records, fmt=args.format, out=sys.stdout)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    records = [{
        "made_current_at": h.made_current_at.isoformat(timespec="milliseconds"),
        "snapshot_id": h.snapshot_id,
        "parent_id": h.parent_snapshot_id,
        "operation": h.operation,
        "is_current_ancestor": h.is_current_ancestor,
        "added_records": h.summary.get("added-records"),
        "total_records": h.summary.get("total-records"),
    } for h in table.history()]
    print_records(records, fmt=args.format, out=sys.stdout)
    return 0


def register(subparsers: Any) -> None:
    """Add ``scan``, ``snapshots`` and ``history``."""
    p = add_command(subparsers, "scan", cmd_scan)
    p.add_argument("table", help="namespace.table")
    p.add_argument("--filter", "--where", dest="filter", help="e.g. \"payload_id = 3 AND ts >= '2026-01-01'\"")
    p.add_argument("--columns", help="comma-separated column names (default: all)")
    travel = p.add_mutually_exclusive_group()
    travel.add_argument("--snapshot-id", type=int, help="read this snapshot (time travel)")
    travel.add_argument("--as-of", help="read the snapshot current at this ISO 8601 time (naive = UTC)")
    p.add_argument("--limit", type=int, help=f"print at most N rows (default: all; on a terminal the first "
                                             f"{TERMINAL_LIMIT})")
    p.add_argument("--all", action="store_true", help="print every row, also on a terminal")
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")

    for name, func in (("snapshots", cmd_snapshots), ("history", cmd_history)):
        p = add_command(subparsers, name, func)
        p.add_argument("table", help="namespace.table")
        p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
