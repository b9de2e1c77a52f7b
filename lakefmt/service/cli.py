"""``lakefmt serve``: run the compaction service (spec/service.md).

Wired into :mod:`lakefmt.cli` (loaded only for ``lakefmt serve``) through :func:`add_serve_parser` and
:func:`run_serve`.
The service's dependencies (FastAPI, uvicorn, croniter, prometheus_client, swagger-ui-bundle:
``pip install 'lakefmt[service]'``) are imported only when the command runs, so
``lakefmt --help`` works without them.

Example:
    $ lakefmt serve --warehouse warehouse                       # hourly at :05, API on 127.0.0.1:8765
    $ LAKEFMT_SERVICE_TOKEN=s3cret lakefmt serve --config lakefmt.toml --port 9000
    $ lakefmt serve --demo                                      # + a streaming writer, compaction every 20 s
    $ LAKEFMT_SERVICE_TOKEN=s3cret lakefmt serve --host 0.0.0.0 # another address needs a token (or --insecure)
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from lakefmt.cli.options import CliError, common_parser, open_catalog

DEFAULT_CONFIG = "lakefmt.toml"


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` sub-command to an ``argparse`` sub-parsers object."""
    p = subparsers.add_parser(
        "serve", parents=[common_parser()], help="run the compaction service: schedules, HTTP API, metrics",
        description="Compact every table of the warehouse on a cron schedule (default hourly at :05 UTC), "
                    "optionally compact manifests, expire snapshots and remove orphans, and serve an HTTP API "
                    "(/docs), Prometheus metrics (/metrics) and JSON logs (stderr). Settings: --config TOML "
                    "file, then LAKEFMT_<SECTION>_<KEY> environment variables, then these options.")
    p.add_argument("--config", metavar="FILE",
                   help=f"TOML configuration (default: $LAKEFMT_CONFIG, else ./{DEFAULT_CONFIG} if it exists)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="TCP port (default 8765; 0 picks a free one)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--no-schedule", action="store_true", help="run jobs only when triggered over HTTP")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow serving without a token on a non-loopback --host (anyone who can reach it can "
                        "trigger jobs, expire snapshots and remove orphans)")
    p.add_argument("--demo", action="store_true",
                   help="create demo.events, append small files to it every second, compact every 20 s; "
                        "snapshot expiry and orphan removal keep its history bounded")
    return p


def config_path(args: argparse.Namespace) -> str | None:
    path = args.config or os.environ.get("LAKEFMT_CONFIG")
    if path is None and os.path.exists(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    return path


def refuse_catalog_server(warehouse: str, catalog_path: str | None) -> None:
    """Refuse a catalog server's URL as the served catalog (CATHTTP-15), before anything is opened.

    The server is the one process that opens its catalog file (CATHTTP-1): its service's job
    tables live in that file, and a server relaying to another server would answer for a catalog
    whose sessions it cannot hold.
    """
    from lakefmt.catalog_http import is_catalog_url  # the standard library only

    for what, value in (("catalog file", catalog_path), ("warehouse", warehouse)):
        if is_catalog_url(value):
            raise CliError(
                f"lakefmt serve was given the catalog server {value} as its {what}: the server owns a catalog "
                "file and cannot itself use a catalog server (CATHTTP-15). Run lakefmt serve on the machine "
                "that holds the catalog file, with --warehouse <warehouse location> and --catalog-path "
                "<catalog file>; nothing was started or written")


def run_serve(args: argparse.Namespace) -> int:
    """Run ``lakefmt serve`` until SIGTERM; exit status 0 after a clean stop."""
    try:
        from lakefmt.service import server  # the web stack is an optional extra: import it only to serve
    except ImportError as exc:
        raise CliError(f"lakefmt serve needs the service extra ({exc.name} is missing): "
                       "pip install 'lakefmt[service]'") from None
    from lakefmt.service.config import check_exposure, load_config  # croniter: also the service extra
    from lakefmt.service.daemon import SESSION_LINGER
    path = config_path(args)
    file_config = load_config(path, environ={}) if path else None
    warehouse = args.warehouse
    if file_config is not None and "LAKEFMT_WAREHOUSE" not in os.environ and warehouse == "warehouse":
        warehouse = file_config.warehouse  # the config file names the warehouse unless the command line does
    catalog_path = args.catalog_path or (file_config.catalog_path if file_config else None)
    overrides: dict[str, Any] = {"warehouse": warehouse, "catalog_path": catalog_path, "host": args.host,
                                 "port": args.port, "log_level": args.log_level, "insecure": args.insecure}
    if args.storage_options:
        overrides["storage_options"] = args.storage_options
    environ = dict(os.environ)
    if args.demo:
        from lakefmt.service.demo import DEMO_ENVIRON  # only the demo needs it

        environ = {**DEMO_ENVIRON, **environ}
    config = load_config(path, environ=environ, **overrides)
    refuse_catalog_server(config.warehouse, config.catalog_path)
    check_exposure(config)  # before the catalog is opened: a refused start changes nothing
    args.warehouse, args.catalog_path, args.storage_options = config.warehouse, config.catalog_path, dict(
        config.storage_options)
    catalog = open_catalog(args, create=args.demo,  # refuses a warehouse without a catalog, unless --demo
                           session_linger=SESSION_LINGER)
    extra = None
    if args.demo:
        from lakefmt.service.demo import start_demo_writer

        extra = start_demo_writer
    return server.serve(config, catalog=catalog, schedule=not args.no_schedule, extra_threads=extra)

