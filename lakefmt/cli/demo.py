"""``lakefmt demo``: the small-files problem and its fix, end to end (the simulation is :mod:`lakefmt.demo`).

Example:
    $ lakefmt demo --commits 300 --strategy zorder
"""

from __future__ import annotations

import argparse
from typing import Any

from lakefmt.cli.options import add_command


def cmd_demo(args: argparse.Namespace) -> int:
    from lakefmt.demo import run_demo  # pyarrow.compute and pandas: loaded only when the demo runs

    return run_demo(args)


def register(subparsers: Any) -> None:
    """Add ``demo``."""
    p = add_command(
        subparsers, "demo", cmd_demo,
        description="Simulate a downlink pipeline committing every 30 simulated seconds (one small file per "
                    "partition per commit), measure planning and a selective query, compact with sort or "
                    "Z-order and compact manifests, and measure again.")
    p.add_argument("--table", default="artemis.downlinks_demo", help="table to (re)create")
    p.add_argument("--commits", type=int, default=300, help="ingest commits, 30 simulated seconds apart")
    p.add_argument("--missions", type=int, default=8, help="missions (one partition each per day)")
    p.add_argument("--payloads", type=int, default=12, help="payloads per mission")
    p.add_argument("--rows-per-commit", type=int, default=8000, help="rows per commit, over all missions")
    p.add_argument("--strategy", choices=("sort", "zorder"), default="sort", help="compaction strategy")
    p.add_argument("--seed", type=int, default=7)
