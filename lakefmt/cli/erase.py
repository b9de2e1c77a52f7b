"""``lakefmt erase``: verified erasure of the rows matching a filter (spec/deletes.md, ROWDEL-15 … ROWDEL-18).

Example:
    $ lakefmt erase crm.customers --filter "customer_id = 42" --dry-run
    $ lakefmt erase crm.customers --filter "customer_id = 42"
    $ lakefmt erase crm.customers --filter "customer_id = 42" --older-than 0 --format json

Exit status: 0 when the erasure is proven (no file in storage holds a matching row); 3
when files holding matching rows are pending (leased, or inside the grace period: run the
command again after the time printed); 2 on bad input or a refusal (a retention setting
would keep the rows; nothing was done); 1 when storage is unreachable. A dry run exits 0,
or 3 when the run would leave files pending.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from lakefmt.cli.format import human_bytes
from lakefmt.cli.maintenance import parse_age
from lakefmt.cli.options import CliError, add_command, open_catalog

EXIT_PENDING = 3


def cmd_erase(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    grace = parse_age(args.older_than)
    if not isinstance(grace, dt.timedelta):
        raise CliError("--older-than of erase takes an age such as 3d or 0, not a point in time")
    report = table.maintenance.erase(args.filter, dry_run=args.dry_run, retain_last=args.retain_last,
                                     older_than=grace)
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(report, verbose=args.verbose)
    return 0 if report.complete else EXIT_PENDING


def print_report(report: Any, *, verbose: bool = False) -> None:
    """The report as text: what was done, then the proof, then what is pending."""
    would = report.dry_run
    where = "" if report.snapshot_id is None else f" in snapshot {report.snapshot_id}"
    print(f"{'would erase' if would else 'erased'} {report.matched_rows} live row(s) matching {report.filter!r} "
          f"from {report.table}{where} ({report.stored_rows} matching row(s) found in stored files, "
          "deleted rows and older snapshots included)")
    print(f"{'would rewrite' if would else 'rewrote'} {len(report.files_rewritten)} file(s)"
          + ("" if would else f" into {len(report.files_written)}")
          + f"; {'would expire' if would else 'expired'} {len(report.snapshots_expired)} snapshot(s)"
          + (f" {list(report.snapshots_expired)}" if report.snapshots_expired else "")
          + f"; {'would delete' if would else 'deleted'} {len(report.files_deleted)} file(s), "
          f"{human_bytes(report.bytes_deleted)} ({report.bytes_deleted} bytes)")
    for f in report.files_deleted:
        if verbose or f.kind in ("data", "orphan"):
            print(f"  {'would delete' if would else 'deleted'} {f.kind:15} {f.size:>12}  {f.path}")
    if not would:
        by_check = {c: sum(1 for f in report.checked if f.check == c) for c in ("read", "statistics")}
        print(f"proof: the current snapshot re-scanned with the filter has {report.rescan_rows} matching row(s); "
              f"{len(report.checked)} data file(s) in storage hold none ({by_check['read']} read, "
              f"{by_check['statistics']} by their statistics)")
        if verbose:
            for c in report.checked:
                print(f"  checked {c.check:10} {'referenced' if c.referenced else 'unreferenced':12} {c.path}")
    for p in report.pending:
        when = p.deletable_at.isoformat() if p.deletable_at else "unknown"
        rows = "unreadable" if p.matching_rows is None else f"{p.matching_rows} matching row(s)"
        print(f"  pending {p.reason:12} deletable at {when}  {p.path} ({rows})")
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if report.pending:
        latest = max((p.deletable_at for p in report.pending if p.deletable_at), default=None)
        after = f" after {latest.isoformat()}" if latest else ""
        print(f"not complete: {len(report.pending)} file(s) holding matching rows are pending; "
              f"run the erasure again{after} (ROWDEL-17)", file=sys.stderr)
    elif not would:
        print("erasure proven: no file in storage holds a matching row")


def register(subparsers: Any) -> None:
    """Add ``erase``."""
    p = add_command(subparsers, "erase", cmd_erase)
    p.add_argument("table", help="namespace.table")
    p.add_argument("--filter", required=True, help='the rows to erase, e.g. "customer_id = 42"')
    p.add_argument("--dry-run", action="store_true", help="only report what would be done")
    p.add_argument("--retain-last", type=int, metavar="N",
                   help="override history.expire.min-snapshots-to-keep for this run (erase refuses when the "
                        "snapshots it keeps reach matching rows; 1 lets it expire them)")
    p.add_argument("--older-than", default="3d", metavar="AGE",
                   help="grace period of unreferenced files holding matching rows (default: 3d); younger "
                        "ones stay pending")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--verbose", action="store_true", help="list every file deleted and every file checked")
