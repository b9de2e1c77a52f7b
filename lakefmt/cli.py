"""The ``lakefmt`` command line: create, append, scan, inspect and manage tables.

Every command works on one warehouse, given by ``--warehouse`` (default ``warehouse``
or ``$LAKEFMT_WAREHOUSE``), with its DuckDB catalog file at ``--catalog-path``
(default ``<warehouse>/catalog.duckdb`` for a local warehouse; required for S3).
Errors lakefmt raises on purpose (:class:`lakefmt.LakefmtError`) are printed as
``error: <message>`` on stderr with exit code 2, never as a traceback.

Example:
    $ lakefmt create artemis.downlinks --from-parquet day1.parquet --partition-by 'day(ts)' mission_id
    $ lakefmt append artemis.downlinks day1.parquet day2.parquet
    $ lakefmt scan artemis.downlinks --filter "payload_id = 3" --columns ts,value --limit 5
    $ lakefmt inspect artemis.downlinks

The CLI uses only the public API (``lakefmt.Catalog``, ``Table``), plus the spec's
readers for ``inspect``. ``compact`` and ``demo`` come from ``lakefmt.compaction.cli``
and ``lakefmt.demo`` when those modules are installed; their ``run_*(args)`` get
``args.warehouse``, ``args.catalog_path`` and ``args.storage_options`` (a dict) and
may call :func:`open_catalog`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt import __version__
from lakefmt.catalog import CATALOG_FILE, Catalog
from lakefmt.cli_format import FORMATS, print_records, print_rows
from lakefmt.errors import LakefmtError, ValidationError
from lakefmt.io import normalize_location, scheme_of

EXIT_USER_ERROR = 2
EXIT_ENVIRONMENT_ERROR = 1


class CliError(ValidationError):
    """A command-line argument or input file is unusable. Nothing was written."""


# -- helpers shared with the compact and demo commands ----------------------------------------------

def parse_storage_options(items: Sequence[str] | None) -> dict[str, Any]:
    """``["endpoint_url=http://...", "client_kwargs.region_name=us-east-1"]`` -> a nested dict.

    A value that is a JSON object, array, ``true``, ``false`` or ``null`` is decoded;
    anything else stays a string.
    """
    options: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--storage-option expects KEY=VALUE, got {item!r}")
        value: Any = raw
        if raw[:1] in ("{", "[") or raw in ("true", "false", "null"):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise CliError(f"--storage-option {key}: invalid JSON value {raw!r}: {exc}") from None
        target = options
        *parents, leaf = key.strip().split(".")
        for p in parents:
            target = target.setdefault(p, {})
            if not isinstance(target, dict):
                raise CliError(f"--storage-option {key}: {p} is both a value and a group")
        target[leaf] = value
    return options


def open_catalog(args: argparse.Namespace, *, create: bool = False) -> Catalog:
    """The catalog named by the global options; refuses to invent an empty one unless ``create``."""
    warehouse = args.warehouse
    catalog_path = args.catalog_path
    options = args.storage_options if isinstance(args.storage_options, dict) else parse_storage_options(
        args.storage_options)
    if not create:
        path = catalog_path
        if path is None and scheme_of(normalize_location(warehouse)) == "file":
            path = os.path.join(normalize_location(warehouse), CATALOG_FILE)
        if path is not None and not os.path.exists(normalize_location(path)):
            raise CliError(f"no lakefmt catalog at {path} (create a table first, or pass --warehouse "
                           "/ --catalog-path)")
    return Catalog(warehouse, catalog_path=catalog_path, storage_options=options)


def _split_top_level(values: Sequence[str]) -> list[str]:
    """Split ``["day(ts),mission_id", "bucket(16, id)"]`` on commas outside parentheses."""
    out: list[str] = []
    for value in values:
        depth, start = 0, 0
        for i, ch in enumerate(value):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 0:
                out.append(value[start:i])
                start = i + 1
        out.append(value[start:])
    return [v.strip() for v in out if v.strip()]


def _read_parquet(path: str, *, schema_only: bool = False) -> Any:
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


def _parse_time(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--as-of expects an ISO 8601 time such as 2026-01-15T10:00:00Z, got {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


def _ms_to_iso(timestamp_ms: int) -> str:
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def _properties(items: Sequence[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--property expects KEY=VALUE, got {item!r}")
        props[key] = value
    return props


# -- commands --------------------------------------------------------------------------------------

def cmd_create(args: argparse.Namespace) -> int:
    schema = _read_parquet(args.from_parquet, schema_only=True)
    schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])
    data = _read_parquet(args.from_parquet) if args.with_data else None
    catalog = open_catalog(args, create=True)
    table = catalog.create_table(args.table, schema, partition_by=_split_top_level(args.partition_by),
                                 sort_by=_split_top_level(args.sort_by), properties=_properties(args.property))
    print(f"created {table.name} at {table.location}")
    if data is not None:
        snap = table.append(data)
        print(f"appended {snap.summary.get('added-records')} rows in {snap.summary.get('added-data-files')} "
              f"files as snapshot {snap.snapshot_id}")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    tables = [_read_parquet(path) for path in args.files]
    try:
        data = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CliError(f"the input files have incompatible schemas: {exc}") from None
    table = open_catalog(args).load_table(args.table)
    snap = table.append(data)
    print(f"appended {snap.summary.get('added-records')} rows in {snap.summary.get('added-data-files')} files "
          f"to {table.name} as snapshot {snap.snapshot_id} (sequence {snap.sequence_number})")
    return 0


def _limited_rows(batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[tuple[Any, ...]]:
    remaining = limit
    for batch in batches:
        if remaining is not None:
            if remaining <= 0:
                return
            batch = batch.slice(0, remaining)
            remaining -= batch.num_rows
        columns = [c.to_pylist() for c in batch.columns]
        yield from zip(*columns) if columns else ((),) * batch.num_rows


def cmd_scan(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    as_of = _parse_time(args.as_of) if args.as_of else None
    table = open_catalog(args).load_table(args.table)
    scan = table.scan(filter=args.filter, columns=columns, snapshot_id=args.snapshot_id, as_of=as_of)
    names = [f.name for f in scan.projected_schema.fields]
    print_rows(names, _limited_rows(scan.to_batches(), args.limit), fmt=args.format, out=sys.stdout)
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    current = table.metadata.current_snapshot_id
    records = [{
        "snapshot_id": s.snapshot_id,
        "parent_id": s.parent_snapshot_id,
        "sequence": s.sequence_number,
        "committed_at": _ms_to_iso(s.timestamp_ms),
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


def cmd_inspect(args: argparse.Namespace) -> int:
    from lakefmt.cli_inspect import print_tree  # the inspect printer is only needed here

    if args.max_files is not None and args.max_files < 0:
        raise CliError(f"--max-files must be >= 0, got {args.max_files}")
    table = open_catalog(args).load_table(args.table)
    print_tree(table, out=sys.stdout, snapshot_id=args.snapshot_id, stats=not args.no_stats,
               max_files=args.max_files)
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


# -- the parser ------------------------------------------------------------------------------------

def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The warehouse options; sub-commands accept them too (without overriding the top-level ones)."""
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--warehouse", default=default(os.environ.get("LAKEFMT_WAREHOUSE", "warehouse")),
                        help="warehouse location: a folder, s3://bucket/prefix or memory://name "
                             "(default: $LAKEFMT_WAREHOUSE or ./warehouse)")
    parser.add_argument("--catalog-path", default=default(os.environ.get("LAKEFMT_CATALOG_PATH")),
                        help="the DuckDB catalog file (default: <warehouse>/catalog.duckdb; required for S3)")
    parser.add_argument("--storage-option", action="append", dest="storage_option", metavar="KEY=VALUE",
                        default=default([]),
                        help="fsspec storage option, repeatable, e.g. endpoint_url=http://127.0.0.1:9000")


def _add_external(subparsers: Any, module: str, add_name: str, run_name: str) -> None:
    """Wire a sub-command defined in another module, if that module is installed."""
    import importlib  # optional commands: import only when building the parser

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    add: Callable[[Any], Any] | None = getattr(mod, add_name, None)
    run: Callable[[argparse.Namespace], Any] | None = getattr(mod, run_name, None)
    if add is None or run is None:
        return
    before = set(subparsers.choices)
    add(subparsers)
    for name in set(subparsers.choices) - before:
        sub = subparsers.choices[name]
        if sub.get_default("func") is None:
            sub.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakefmt", description="lakefmt: a small, spec-first table format.")
    parser.add_argument("--version", action="version", version=f"lakefmt {__version__}")
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(func=func)
        return p

    p = command("create", cmd_create, "create a table whose schema is taken from a Parquet file")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--from-parquet", required=True, metavar="FILE", help="Parquet file giving the schema")
    p.add_argument("--partition-by", action="extend", nargs="+", default=[], metavar="EXPR",
                   help="partition fields, e.g. 'day(ts)' mission_id 'bucket(16, id)'")
    p.add_argument("--sort-by", action="extend", nargs="+", default=[], metavar="COLUMN",
                   help="sort order of written files, e.g. payload_id 'sensor_kind DESC'")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE", help="table property")
    p.add_argument("--with-data", action="store_true", help="also append the file's rows (first snapshot)")

    p = command("append", cmd_append, "append Parquet files to a table as one snapshot")
    p.add_argument("table", help="namespace.table")
    p.add_argument("files", nargs="+", metavar="FILE", help="Parquet files")

    p = command("scan", cmd_scan, "print the rows of a table")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--filter", "--where", dest="filter", help="e.g. \"payload_id = 3 AND ts >= '2026-01-01'\"")
    p.add_argument("--columns", help="comma-separated column names (default: all)")
    travel = p.add_mutually_exclusive_group()
    travel.add_argument("--snapshot-id", type=int, help="read this snapshot (time travel)")
    travel.add_argument("--as-of", help="read the snapshot current at this ISO 8601 time (naive = UTC)")
    p.add_argument("--limit", type=int, help="print at most N rows")
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")

    for name, func, text in (("snapshots", cmd_snapshots, "list a table's snapshots"),
                             ("history", cmd_history, "when each snapshot became current")):
        p = command(name, func, text)
        p.add_argument("table", help="namespace.table")
        p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")

    p = command("inspect", cmd_inspect,
                "print snapshot -> manifest list -> manifests -> data files with sizes, rows and stats")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--snapshot-id", type=int, help="inspect this snapshot instead of the current one")
    p.add_argument("--no-stats", action="store_true", help="leave out per-column statistics")
    p.add_argument("--max-files", type=int, metavar="N", help="show at most N entries per manifest")

    p = command("tables", cmd_tables, "list tables, all or of one namespace")
    p.add_argument("namespace", nargs="?")

    p = command("drop", cmd_drop, "remove a table from the catalog")
    p.add_argument("table", help="namespace.table")
    p.add_argument("--purge", action="store_true", help="also delete every file under the table location")

    _add_external(sub, "lakefmt.compaction.cli", "add_compact_parser", "run_compact")
    _add_external(sub, "lakefmt.demo", "add_demo_parser", "run_demo")
    _add_external(sub, "lakefmt.maintenance.cli", "add_maintenance_parsers", "run_maintenance")
    _add_external(sub, "lakefmt.service.cli", "add_serve_parser", "run_serve")
    _add_external(sub, "lakefmt.report", "add_report_parser", "run_report")
    return parser


def error_message(exc: BaseException) -> str:
    """The message of an error; KeyError subclasses (NoSuchTableError...) would otherwise print quoted."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 2 bad input or a lakefmt error, 1 storage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage error or the help
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USER_ERROR)
    func = getattr(args, "func", None)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:  # print any value, even on a terminal that cannot show it
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):
            pass
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USER_ERROR
    try:
        args.storage_options = parse_storage_options(args.storage_option)
        return int(func(args) or 0)
    except LakefmtError as exc:
        print(f"error: {error_message(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # e.g. `lakefmt scan ... | head`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as exc:  # storage unreachable, permissions: not a bug, not a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
