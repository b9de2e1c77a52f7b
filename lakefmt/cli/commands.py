"""Every ``lakefmt`` command: the module that defines it and its one-line help.

The top-level parser lists the commands from this table without importing their
modules; a command's module is imported only when that command is parsed or run.
A module defines its commands in ``register(subparsers)`` (``lakefmt serve`` keeps its
own in :mod:`lakefmt.service.cli`).
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """Where a command is defined, and what ``lakefmt --help`` says about it."""

    module: str
    help: str
    register: str = "register"
    run: str | None = None  # the handler, for a module whose parser does not set ``func``


COMMANDS: dict[str, Command] = {
    "create": Command("lakefmt.cli.tables", "create a table whose schema is taken from a Parquet file"),
    "append": Command("lakefmt.cli.tables", "append Parquet files to a table as one snapshot"),
    "delete": Command("lakefmt.cli.rows", "delete the rows matching a filter (as write.delete.mode says)"),
    "upsert": Command("lakefmt.cli.rows", "update rows by key from Parquet files and insert the rest, as one snapshot"),
    "scan": Command("lakefmt.cli.scan", "print the rows of a table"),
    "snapshots": Command("lakefmt.cli.scan", "list a table's snapshots"),
    "history": Command("lakefmt.cli.scan", "when each snapshot became current"),
    "inspect": Command("lakefmt.cli.inspection",
                       "print snapshot -> manifest list -> manifests -> data files with sizes, rows and stats"),
    "tables": Command("lakefmt.cli.tables", "list tables, all or of one namespace"),
    "drop": Command("lakefmt.cli.tables", "remove a table from the catalog"),
    "recover": Command("lakefmt.cli.recover",
                       "rebuild a lost catalog: register every table of the warehouse from its newest metadata"),
    "register": Command("lakefmt.cli.recover", "add an existing table to the catalog from one of its metadata files"),
    "compact": Command("lakefmt.cli.compact",
                       "rewrite small data files into target-sized ones (bin-pack, sort or Z-order)"),
    "demo": Command("lakefmt.cli.demo", "simulate Artemis ingest into thousands of small files, then compact them"),
    "expire": Command("lakefmt.cli.maintenance", "remove old snapshots, then delete the files only they reached"),
    "orphans": Command("lakefmt.cli.maintenance", "list (or with --delete, remove) files nothing references"),
    "rollback": Command("lakefmt.cli.maintenance",
                        "make an earlier snapshot of the current history current again"),
    "stats": Command("lakefmt.cli.maintenance", "live, historical and orphan storage, and per-partition file sizes"),
    "check": Command("lakefmt.cli.maintenance", "validate a table against the spec; exit status 3 on any violation"),
    "erase": Command("lakefmt.cli.erase", "erase the rows matching a filter from every stored file, with a proof; "
                     "exit status 3 while files are pending"),
    "serve": Command("lakefmt.service.cli", "run the compaction service: schedules, HTTP API, metrics",
                     register="add_serve_parser", run="run_serve"),
    "report": Command("lakefmt.cli.report", "write an HTML report with file-size charts"),
    "conformance": Command("lakefmt.cli.conformance", "run the conformance kit (spec/conformance) against an adapter"),
}
