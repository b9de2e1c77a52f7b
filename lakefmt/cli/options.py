"""The options every ``lakefmt`` command shares, and opening the catalog they name.

``--warehouse``, ``--catalog-path``, ``--storage-option`` and ``--token`` are accepted before or
after the command name (a value after it wins). A catalog server's URL as ``--warehouse`` (or
``--catalog``) opens the catalog over HTTP with ``--token`` or ``$LAKEFMT_CATALOG_TOKEN``. Nothing here imports pyarrow or DuckDB: the
catalog is imported when a command opens it, so building the parser stays cheap.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakefmt.cli.commands import COMMANDS
from lakefmt.errors import ValidationError

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog

EXIT_USER_ERROR = 2
EXIT_ENVIRONMENT_ERROR = 1
EXIT_INTERRUPTED = 130


class CliError(ValidationError):
    """A command-line argument or input file is unusable. Nothing was written."""


def add_global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Add the warehouse options; with ``suppress`` (sub-commands) an absent option keeps the top-level value."""
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--warehouse", default=default(os.environ.get("LAKEFMT_WAREHOUSE", "warehouse")),
                        help="warehouse location: a folder, s3://bucket/prefix or memory://name, or a catalog "
                             "server's URL http://host:8765 (default: $LAKEFMT_WAREHOUSE or ./warehouse)")
    parser.add_argument("--catalog-path", "--catalog", default=default(os.environ.get("LAKEFMT_CATALOG_PATH")),
                        help="the DuckDB catalog file (default: <warehouse>/catalog.duckdb; required for S3), "
                             "or a catalog server's URL")
    parser.add_argument("--token", default=default(os.environ.get("LAKEFMT_CATALOG_TOKEN")),
                        help="bearer token of a catalog server (default: $LAKEFMT_CATALOG_TOKEN; prefer the "
                             "variable: a command line is visible to other users)")
    parser.add_argument("--storage-option", action="append", dest="storage_option", metavar="KEY=VALUE",
                        default=default([]),
                        help="fsspec storage option, repeatable, e.g. endpoint_url=http://127.0.0.1:9000")


def common_parser() -> argparse.ArgumentParser:
    """A parent parser holding the global options for a sub-command (see :func:`add_global_options`)."""
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, suppress=True)
    return common


def add_command(subparsers: Any, name: str, func: Any, *, description: str | None = None) -> argparse.ArgumentParser:
    """Add sub-command ``name`` running ``func(args)``, with the global options and its help from the table."""
    help = COMMANDS[name].help
    p = subparsers.add_parser(name, parents=[common_parser()], help=help, description=description or help)
    p.set_defaults(func=func)
    return p


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


def open_catalog(args: argparse.Namespace, *, create: bool = False, session_linger: float = 0.0) -> Catalog:
    """The catalog named by the global options; refuses to invent an empty one unless ``create``.
    ``session_linger`` applies to a catalog file opened here (CAT-23).

    A missing catalog raises :class:`lakefmt.NoSuchWarehouseError`, or
    :class:`lakefmt.CatalogMissingError` when the warehouse still holds tables (CAT-14, CAT-19).
    """
    from lakefmt.catalog import Catalog  # DuckDB and pyarrow: load them only to open one

    warehouse = getattr(args, "warehouse", None) or "warehouse"
    catalog_path = getattr(args, "catalog_path", None)
    options = getattr(args, "storage_options", None)
    if not isinstance(options, dict):
        options = parse_storage_options(getattr(args, "storage_option", None))
    if isinstance(catalog_path, str) and catalog_path.lower().startswith(("http://", "https://")):
        warehouse, catalog_path = catalog_path, None  # --catalog http://...: the server names the warehouse
    if warehouse.lower().startswith(("http://", "https://")):
        return Catalog(warehouse, catalog_path=catalog_path, storage_options=options, create=create,
                       token=getattr(args, "token", None) or os.environ.get("LAKEFMT_CATALOG_TOKEN"))
    return Catalog(warehouse, catalog_path=catalog_path, storage_options=options, create=create,
                   session_linger=session_linger)


def split_top_level(values: Sequence[str]) -> list[str]:
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


def split_columns(text: str | None) -> list[str] | None:
    """``"a, b"`` -> ``["a", "b"]``; ``None`` or empty -> ``None`` (all columns / the default)."""
    columns = [c.strip() for c in text.split(",") if c.strip()] if text else []
    return columns or None


def parse_time(text: str, option: str = "--as-of") -> dt.datetime:
    """An ISO 8601 time; a naive one is UTC."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"{option} expects an ISO 8601 time such as 2026-01-15T10:00:00Z, got {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


def ms_to_iso(timestamp_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with millisecond precision."""
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
