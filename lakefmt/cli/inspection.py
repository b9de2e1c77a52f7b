"""``lakefmt inspect``: print snapshot -> manifest list -> manifests -> data files of a table.

The printer lives in :mod:`lakefmt.cli.inspect_tree` and is loaded only when the command runs.

Example:
    $ lakefmt inspect artemis.downlinks --max-files 3 --no-stats
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakefmt.cli.options import CliError, add_command, open_catalog


def cmd_inspect(args: argparse.Namespace) -> int:
    from lakefmt.cli.inspect_tree import print_tree  # reads manifests: loaded only when the command runs

    if args.max_files is not None and args.max_files < 0:
        raise CliError(f"--max-files must be >= 0, got {args.max_files}")
    table = open_catalog(args).load_table(args.table)
    print_tree(table, out=sys.stdout, snapshot_id=args.snapshot_id, stats=not args.no_stats,
               max_files=args.max_files)
    return 0


def register(subparsers: Any) -> None:
    """Add ``inspect``."""
    p = add_command(subparsers, "inspect", cmd_inspect)
    p.add_argument("table", help="namespace.table")
    p.add_argument("--snapshot-id", type=int, help="inspect this snapshot instead of the current one")
    p.add_argument("--no-stats", action="store_true", help="leave out per-column statistics")
    p.add_argument("--max-files", type=int, metavar="N", help="show at most N entries per manifest")
