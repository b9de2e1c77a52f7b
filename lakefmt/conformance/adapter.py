"""The interface an implementation offers the conformance kit (spec/conformance/README.md).

An **adapter** is a plain Python class; the runner calls the methods below and never
imports anything else of the implementation. Reader methods are enough for the reader
and negative cases; writer and commit cases need the writer and commit methods.
Every argument and result is Python data, ``pyarrow.Table`` for rows, or a handle the
adapter itself returned.

Filters reach the adapter as :class:`Filter`: the text of spec/expressions.md (EXPR-2)
and the same filter as a small JSON tree, for implementations without a text parser.

Commit cases interleave two writers deterministically with two steps per operation:
``prepare`` loads the table from the catalog (COMMIT-1), plans the operation on that
base and writes its files (COMMIT-2); ``commit`` swaps the pointer (COMMIT-6) and, when
the swap loses, does what COMMIT-7 … COMMIT-10 and ROWDEL-3 … ROWDEL-5 say: rebase and
retry, or give up with a conflict. The runner calls, for example, ``prepare(A)``,
``prepare(B)``, ``commit(A)``, ``commit(B)``: B's base is then stale when it swaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import pyarrow as pa

Outcome = Literal["committed", "conflict"]
OUTCOMES: tuple[Outcome, ...] = ("committed", "conflict")
READER_METHODS = ("open_table", "current_snapshot_id", "snapshots", "snapshot_as_of", "scan", "plan_files")
WRITER_METHODS = ("create_table", "append", "delete", "overwrite")
COMMIT_METHODS = ("prepare", "commit")


@dataclass(frozen=True)
class Filter:
    """A row filter: ``text`` in the syntax of EXPR-2, ``tree`` the same filter as JSON.

    Tree nodes (lists): ``["and", a, b, …]``, ``["or", a, b, …]``, ``["not", a]``,
    ``[op, column, literal]`` with op one of ``= != < <= > >=``, ``["in", column, [literals]]``,
    ``["not_in", column, [literals]]``, ``["is_null", column]``, ``["not_null", column]``,
    ``["starts_with", column, "prefix"]``. A literal is a JSON number, string or boolean,
    or ``{"date": "YYYY-MM-DD"}``, ``{"time": "HH:MM:SS[.ffffff]"}``,
    ``{"timestamp": "…"}`` (wall clock), ``{"timestamptz": "…"}`` (UTC),
    ``{"decimal": "12.34"}``.
    """

    text: str
    tree: list[Any]


@dataclass(frozen=True)
class TableRef:
    """A table in a catalog the runner created: the DuckDB catalog file (CAT-3) and the warehouse."""

    warehouse: str
    catalog_path: str
    namespace: str
    name: str

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class Step:
    """One operation of a commit case: ``append`` (``rows``), ``delete`` (``filter``),
    ``overwrite`` (``filter`` and ``rows``) or ``compact`` (replace every live file of the
    base by files holding the same live rows, COMMIT-17)."""

    op: Literal["append", "delete", "overwrite", "compact"]
    rows: pa.Table | None = None
    filter: Filter | None = None


@runtime_checkable
class Adapter(Protocol):
    """What the runner calls. Raise any exception to refuse; the runner reports its type and message."""

    # -- reader and negative cases --------------------------------------------------
    def open_table(self, metadata_path: str) -> Any:
        """Open the table whose current metadata file is ``metadata_path`` (an absolute local path).

        No catalog: paths resolve against the metadata file's location (LAYOUT-3), not the
        ``location`` it records. Returns a handle passed to the methods below.
        """

    def current_snapshot_id(self, handle: Any) -> int | None:
        """``current-snapshot-id`` (META-1)."""

    def snapshots(self, handle: Any) -> list[dict[str, Any]]:
        """The retained snapshots in metadata order, each a dict with at least ``snapshot-id``,
        ``parent-snapshot-id``, ``sequence-number``, ``operation`` and ``schema-id`` (SNAP-1)."""

    def snapshot_as_of(self, handle: Any, timestamp_ms: int) -> int:
        """The id of the snapshot current at ``timestamp_ms`` (READ-2); raise if there is none."""

    def scan(self, handle: Any, snapshot_id: int | None = None, filter: Filter | None = None,
             columns: list[str] | None = None) -> pa.Table:
        """The live rows of the snapshot (current when None) matching ``filter``, with the read
        schema's columns (READ-3) or ``columns`` in that order. Raise for an unknown snapshot."""

    def plan_files(self, handle: Any, snapshot_id: int | None = None, filter: Filter | None = None) -> list[str]:
        """The data files a scan would read, as paths relative to the table location (READ-5)."""

    # -- writer cases ---------------------------------------------------------------
    def create_table(self, table: TableRef, schema: dict[str, Any], partition_by: list[dict[str, Any]],
                     sort_by: list[dict[str, Any]], properties: dict[str, str], format_version: int) -> None:
        """Create the table in the catalog (CAT-12): ``schema`` as SCHEMA-2 JSON; ``partition_by``
        items ``{"source": column, "transform": "day" | "bucket[4]" | …}``; ``sort_by`` items
        ``{"source": column, "direction": "asc" | "desc", "null-order": "nulls-first" | "nulls-last"}``."""

    def append(self, table: TableRef, rows: pa.Table) -> None:
        """Append ``rows`` as one snapshot (COMMIT-1 … COMMIT-6)."""

    def delete(self, table: TableRef, filter: Filter) -> None:
        """Delete the matching rows as ``write.delete.mode`` says (COMMIT-12, ROWDEL-2)."""

    def overwrite(self, table: TableRef, filter: Filter, rows: pa.Table) -> None:
        """Replace the matching rows by ``rows`` in one snapshot (COMMIT-12, ROWDEL-2)."""

    # -- commit cases ---------------------------------------------------------------
    def prepare(self, table: TableRef, step: Step) -> Any:
        """Load the base from the catalog and plan and write ``step``, without swapping. Returns a
        pending commit passed to :meth:`commit`."""

    def commit(self, pending: Any) -> Outcome:
        """Swap; on a lost swap follow COMMIT-7. ``"committed"`` if the operation's snapshot is
        now in the table, ``"conflict"`` if it gave up with a conflict and committed nothing."""
