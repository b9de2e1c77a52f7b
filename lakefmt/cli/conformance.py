"""``lakefmt conformance``: run the conformance kit (spec/conformance) against an implementation's adapter.

Exits 0 when every selected case passes and 3 when any fails (2 stays "bad input").

Example:
    $ lakefmt conformance                                          # lakefmt's own adapter, every case
    $ lakefmt conformance --adapter my_impl.adapter:Adapter --only reader --only negative
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakefmt.cli.options import add_command

EXIT_FAILURES = 3


def cmd_conformance(args: argparse.Namespace) -> int:
    from lakefmt.conformance import DEFAULT_ADAPTER, format_results, load_adapter, run_kit

    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, ".")  # an adapter module in the current folder imports as it would with `python -m`
    adapter = load_adapter(args.adapter or DEFAULT_ADAPTER)
    results = run_kit(adapter, args.kit, only=args.only, cases=args.case)
    print(format_results(results, verbose=args.verbose))
    return 0 if results and all(r.passed for r in results) else EXIT_FAILURES


def register(subparsers: Any) -> None:
    """Add ``conformance``."""
    p = add_command(subparsers, "conformance", cmd_conformance,
                    description="Run the conformance kit's reader, negative, writer and commit cases through "
                                "an adapter (spec/conformance/README.md) and print a pass/fail table with the "
                                "spec IDs of each case. Exit status 0 only when every case passes, 3 otherwise.")
    p.add_argument("--adapter", metavar="MODULE:CLASS",
                   help="the implementation's adapter (default: lakefmt's own, "
                        "lakefmt.conformance.lakefmt_adapter:LakefmtAdapter)")
    p.add_argument("--kit", metavar="DIR", help="the kit folder (default: spec/conformance)")
    p.add_argument("--only", action="append", choices=("reader", "negative", "writer", "commit"),
                   help="run only cases of this kind (repeatable)")
    p.add_argument("--case", action="append", metavar="ID", help="run only this case (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true", help="also show what each passing check saw")
