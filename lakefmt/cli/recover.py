"""``lakefmt recover | register``: bring tables back into a catalog (spec/catalog.md CAT-20, CAT-21).

Example:
    $ lakefmt recover --warehouse /data/wh
    $ lakefmt register artemis.downlinks /data/wh/artemis/downlinks-3f9a0c21b7d4/metadata/v000042-....metadata.json
"""

from __future__ import annotations

import argparse
from typing import Any

from lakefmt.cli.options import add_command, open_catalog


def cmd_recover(args: argparse.Namespace) -> int:
    from lakefmt.catalog import Catalog  # DuckDB and pyarrow: loaded only when the command runs

    catalog, report = Catalog.recover(args.warehouse or "warehouse", catalog_path=args.catalog_path,
                                      storage_options=args.storage_options or None)
    for table in report.registered:
        print(f"registered {table.identifier} at version {table.version}: {table.metadata_location}")
        for note in table.notes:
            print(f"  note: {note}")
    for skipped in report.skipped:
        print(f"skipped {skipped.table_location}: {skipped.reason}")
    print(f"{report.summary()} in {catalog.catalog_path}")
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    table = open_catalog(args).register_table(args.table, args.metadata_location)
    print(f"registered {table.name} at {table.metadata_location}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``recover`` and ``register``."""
    add_command(subparsers, "recover", cmd_recover,
                description="Register every table found under the warehouse (<namespace>/<table>-<id>/metadata/) "
                            "from its newest usable metadata file, creating the catalog file if it is missing. "
                            "Tables already in the catalog are left alone, so running it twice is safe.")
    p = add_command(subparsers, "register", cmd_register)
    p.add_argument("table", help="namespace.table")
    p.add_argument("metadata_location", help="the table's metadata file (.../metadata/v<version>-<id>.metadata.json)")
