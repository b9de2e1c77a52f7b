"""``lakefmt create | append | tables | drop``: make, fill, list and remove tables.

Example:
    $ lakefmt create artemis.downlinks --from-parquet day1.parquet --partition-by 'day(ts)' mission_id
    $ lakefmt append artemis.downlinks day1.parquet day2.parquet
    $ lakefmt tables artemis
    $ lakefmt drop artemis.downlinks --purge
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from lakefmt.cli.options import CliError, add_command, open_catalog, split_top_level


def read_parquet(path: str, *, schema_only: bool = False) -> Any:
    """The rows (or only the schema) of a Parquet input file, without schema or field metadata."""
    import pyarrow as pa  # loaded only by the commands that read input files
    import pyarrow.parquet as pq

    try:
        if schema_only:
            return pq.read_schema(path)
        table = pq.read_table(path)
    except FileNotFoundError:
        raise CliError(f"input file {path} does not exist") from None
    except IsADirectoryError:
        raise CliError(f"input {path} is a directory; pass Parquet files") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise CliError(f"cannot read {path} as Parquet: {exc}") from None
    # Drop schema-level and field-level metadata (pandas, other formats' field ids).
    return pa.Table.from_arrays(table.columns, names=table.column_names)


def _properties(items: Sequence[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--property expects KEY=VALUE, got {item!r}")
        props[key] = value
    return props


def cmd_create(args: argparse.Namespace) -> int:
    import pyarrow as pa  # loaded only when the command runs

    schema = read_parquet(args.from_parquet, schema_only=True)
    schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])
    data = read_parquet(args.from_parquet) if args.with_data else None
    catalog = open_catalog(args, create=True)
    table = catalog.create_table(args.table, schema, partition_by=split_top_level(args.partition_by),
                                 sort_by=split_top_level(args.sort_by), properties=_properties(args.property))
    print(f"created {table.name} at {table.location}")
    if data is not None:
        snap = table.append(data)
        print(f"appended {snap.summary.get('added-records')} rows in {snap.summary.get('added-data-files')} "
              f"files as snapshot {snap.snapshot_id}")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    import pyarrow as pa  # loaded only when the command runs

    tables = [read_parquet(path) for path in args.files]
    try:
        data = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CliError(f"the input files have incompatible schemas: {exc}") from None
    table = open_catalog(args).load_table(args.table)
    snap = table.append(data)
    print(f"appended {snap.summary.get('added-records')} rows in {snap.summary.get('added-data-files')} files "
          f"to {table.name} as snapshot {snap.snapshot_id} (sequence {snap.sequence_number})")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    for name in open_catalog(args).list_tables(args.namespace):
        print(name)
    return 0


def cmd_drop(args: argparse.Namespace) -> int:
    catalog = open_catalog(args)
    catalog.drop_table(args.table, purge=args.purge)
    print(f"dropped {args.table}" + (" and deleted its files" if args.purge else
                                     " (its files were kept; use --purge to delete them)"))
    return 0


def register(subparsers: Any) -> None:
    """Add ``create``, ``append``, ``tables`` and ``drop``."""
    p = add_command(subparsers, "create", cmd_create)
    p.add_argument("table", help="namespace.table")
    p.add_argument("--from-parquet", required=True, metavar="FILE", help="Parquet file giving the schema")
    p.add_argument("--partition-by", action="extend", nargs="+", default=[], metavar="EXPR",
                   help="partition fields, e.g. 'day(ts)' mission_id 'bucket(16, id)'")
    p.add_argument("--sort-by", action="extend", nargs="+", default=[], metavar="COLUMN",
                   help="sort order of written files, e.g. payload_id 'sensor_kind DESC'")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE", help="table property")
    p.add_argument("--with-data", action="store_true", help="also append the file's rows (first snapshot)")

    p = add_command(subparsers, "append", cmd_append)
    p.add_argument("table", help="namespace.table")
    p.add_argument("files", nargs="+", metavar="FILE", help="Parquet files")

    p = add_command(subparsers, "tables", cmd_tables)
    p.add_argument("namespace", nargs="?")

    p = add_command(subparsers, "drop", cmd_drop)
    p.add_argument("table", help="namespace.table")
    p.add_argument("--purge", action="store_true", help="also delete every file under the table location")
