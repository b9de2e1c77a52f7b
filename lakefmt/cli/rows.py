"""``lakefmt delete | upsert``: row-level changes (spec/deletes.md ROWDEL-1, ROWDEL-2, ROWDEL-6).

Both follow the table's ``write.delete.mode``: ``merge-on-read`` (the default) writes
deletion vectors, ``copy-on-write`` rewrites the files holding the rows.

Example:
    $ lakefmt delete artemis.downlinks --filter "payload_id = 7"
    $ lakefmt upsert artemis.customers changes.parquet --on customer_id
    $ lakefmt upsert artemis.readings fixes.parquet --on sensor,ts
"""

from __future__ import annotations

import argparse
from typing import Any

from lakefmt.cli.options import CliError, add_command, open_catalog
from lakefmt.cli.tables import read_parquet


def _net_deleted(summary: dict[str, str]) -> int:
    """Rows a delete removed: a copy-on-write delete re-adds the other rows of the files it rewrote."""
    return int(summary.get("deleted-records", "0")) - int(summary.get("added-records", "0"))


def cmd_delete(args: argparse.Namespace) -> int:
    if not args.filter.strip():
        raise CliError("--filter must not be empty: name the rows to delete")
    table = open_catalog(args).load_table(args.table)
    snap = table.delete(args.filter)
    if snap is None:
        print(f"no row of {table.name} matches {args.filter!r}; nothing was committed")
        return 0
    summary = snap.summary
    parts = []
    if summary.get("added-position-deletes", "0") != "0":
        parts.append(f"{summary['added-position-deletes']} by deletion vectors")
    if summary.get("deleted-data-files", "0") != "0":
        parts.append(f"{summary['deleted-data-files']} file(s) removed, {summary.get('added-data-files', '0')} "
                     "written")
    print(f"deleted {_net_deleted(summary)} rows from {table.name} as snapshot {snap.snapshot_id} "
          f"({'; '.join(parts)})")
    return 0


def cmd_upsert(args: argparse.Namespace) -> int:
    import pyarrow as pa  # loaded only when the command runs

    keys = [k.strip() for item in args.on for k in item.split(",") if k.strip()]
    if not keys:
        raise CliError("--on needs at least one key column, e.g. --on id or --on sensor,ts")
    tables = [read_parquet(path) for path in args.files]
    try:
        data = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CliError(f"the input files have incompatible schemas: {exc}") from None
    table = open_catalog(args).load_table(args.table)
    snap = table.upsert(data, on=keys)
    if snap is None:
        print(f"the input holds no rows; nothing was committed to {table.name}")
        return 0
    summary = snap.summary
    print(f"upserted {data.num_rows} rows into {table.name} on {', '.join(keys)}: "
          f"{summary.get('lakefmt.rows-updated', '?')} updated, {summary.get('lakefmt.rows-inserted', '?')} "
          f"inserted, as snapshot {snap.snapshot_id}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``delete`` and ``upsert``."""
    p = add_command(subparsers, "delete", cmd_delete)
    p.add_argument("table", help="namespace.table")
    p.add_argument("--filter", required=True, metavar="EXPR",
                   help="the rows to delete, e.g. \"payload_id = 7 AND ts < '2026-01-02'\"")

    p = add_command(subparsers, "upsert", cmd_upsert)
    p.add_argument("table", help="namespace.table")
    p.add_argument("files", nargs="+", metavar="FILE", help="Parquet files holding the new rows")
    p.add_argument("--on", action="append", required=True, metavar="KEY[,KEY...]",
                   help="key columns: a row replaces the rows with an equal key, e.g. --on sensor,ts")
