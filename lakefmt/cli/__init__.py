"""The ``lakefmt`` command line: create, append, scan, inspect and manage tables.

Every command works on one warehouse, given by ``--warehouse`` (default ``warehouse``
or ``$LAKEFMT_WAREHOUSE``), with its DuckDB catalog file at ``--catalog-path``
(default ``<warehouse>/catalog.duckdb`` for a local warehouse; required for S3). These
global options go before or after the command name. Errors lakefmt raises on purpose
(:class:`lakefmt.LakefmtError`) are printed as ``error: <message>`` on stderr with exit
code 2, never as a traceback; Ctrl-C prints ``interrupted`` and exits with 130.

Example:
    $ lakefmt create artemis.downlinks --from-parquet day1.parquet --partition-by 'day(ts)' mission_id
    $ lakefmt append artemis.downlinks day1.parquet day2.parquet
    $ lakefmt scan artemis.downlinks --filter "payload_id = 3" --columns ts,value --limit 5
    $ lakefmt inspect artemis.downlinks

One module per command group (:mod:`lakefmt.cli.commands` lists them). ``main`` parses
the command line twice: first against a parser that only lists the commands, to learn
which one runs, then against a parser in which that command's module defines it in
full. So ``lakefmt --help`` imports no command module, and a command imports only its
own (and pyarrow, DuckDB or pandas only when it needs them). The CLI uses only the
public API (``lakefmt.Catalog``, ``Table``), plus the spec's readers for ``inspect``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Sequence

from lakefmt import __version__
from lakefmt.cli.commands import COMMANDS
from lakefmt.cli.options import (
    EXIT_ENVIRONMENT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    CliError,
    add_global_options,
    open_catalog,
    parse_storage_options,
)
from lakefmt.errors import LakefmtError

__all__ = [
    "EXIT_ENVIRONMENT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USER_ERROR",
    "CliError",
    "build_parser",
    "error_message",
    "main",
    "open_catalog",
    "parse_storage_options",
]


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``lakefmt`` parser, with ``commands`` (default: all) defined in full and the others only listed.

    A listed command parses nothing but its name; defining a command imports its module.
    """
    parser = argparse.ArgumentParser(prog="lakefmt", description="lakefmt: a small, spec-first table format.")
    parser.add_argument("--version", action="version", version=f"lakefmt {__version__}")
    add_global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    full = {COMMANDS[name].module for name in (COMMANDS if commands is None else commands) if name in COMMANDS}
    defined: set[str] = set()
    for name, command in COMMANDS.items():
        if command.module not in full:
            sub.add_parser(name, help=command.help, add_help=False)
            continue
        if command.module in defined:
            continue
        defined.add(command.module)
        module = importlib.import_module(command.module)
        before = set(sub.choices)
        getattr(module, command.register)(sub)
        if command.run is not None:
            for new in set(sub.choices) - before:
                if sub.choices[new].get_default("func") is None:
                    sub.choices[new].set_defaults(func=getattr(module, command.run))
    return parser


def error_message(exc: BaseException) -> str:
    """The message of an error; KeyError subclasses (NoSuchTableError...) would otherwise print quoted."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


def _exit_code(exc: SystemExit) -> int:
    """argparse's exit (help, version, usage error) as a return code."""
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USER_ERROR)


def _run(argv: list[str]) -> int:
    try:
        known, _ = build_parser(()).parse_known_args(argv)  # which command? (handles --help, --version)
        parser = build_parser([known.command] if known.command in COMMANDS else ())
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage error or the help
        return _exit_code(exc)
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


def _interrupted(*, exit_now: bool) -> int:
    """Report Ctrl-C in one line; as a program, exit at once rather than wait for worker threads.

    Rows still buffered for stdout are dropped: flushing them could block on a full pipe.
    """
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if exit_now:
        os._exit(EXIT_INTERRUPTED)
    return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 2 bad input or a lakefmt error, 1 storage error, 130 Ctrl-C).

    Without ``argv`` (the ``lakefmt`` program) the command line is ``sys.argv`` and Ctrl-C
    ends the process with status 130 at once; with ``argv`` it returns 130.
    """
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        return _interrupted(exit_now=argv is None)
