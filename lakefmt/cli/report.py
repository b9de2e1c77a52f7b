"""``lakefmt report TABLE --out report.html``: write a table's HTML report (the page is :mod:`lakefmt.report`).

Example:
    $ lakefmt report artemis.downlinks --out report.html
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lakefmt.cli.options import CliError, add_command, open_catalog


def cmd_report(args: argparse.Namespace) -> int:
    from lakefmt.report import render_report  # charts and manifest reads: loaded only when the command runs

    if args.samples < 2:
        raise CliError(f"--samples must be at least 2, got {args.samples}")
    if not args.out.lower().endswith((".html", ".htm")):
        raise CliError("--out must name an .html file (PNG output is not supported)")
    table = open_catalog(args).load_table(args.table)
    Path(args.out).write_text(render_report(table, samples=args.samples), encoding="utf-8")
    print(f"wrote {args.out} ({table.name})")
    return 0


def register(subparsers: Any) -> None:
    """Add ``report``."""
    p = add_command(subparsers, "report", cmd_report,
                    description="Write a self-contained HTML page: file-size histograms per partition before "
                                "and after the last compaction, file counts over time, the planning time trend "
                                "and the service's jobs.")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--out", default="report.html", metavar="FILE", help="output file (default: report.html)")
    p.add_argument("--samples", type=int, default=24, metavar="N", help="snapshots timed for the planning trend")
