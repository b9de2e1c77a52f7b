"""lakefmt's own conformance adapter: the kit's interface on lakefmt's public API.

``lakefmt conformance`` uses it by default (``--adapter lakefmt.conformance.lakefmt_adapter:LakefmtAdapter``).
Reads open the metadata file directly (LAYOUT-3), with no catalog. Writer cases use
``Catalog``/``Table``. In commit cases, ``prepare`` loads a :class:`~lakefmt.Table` handle, which
keeps the base it loaded until its commit: appends write their data files at once,
deletes and overwrites are planned on that handle's base when ``commit`` runs them, and
compaction runs in a thread that ``prepare`` stops just before its commit (the
``before-commit`` hook of :meth:`Compaction.run`) and ``commit`` lets go on.

Example:
    >>> from lakefmt.conformance import run_kit
    >>> results = run_kit(LakefmtAdapter(), "spec/conformance")
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakefmt.catalog import Catalog
from lakefmt.commit import FileChange
from lakefmt.conformance.adapter import Filter, Outcome, Step, TableRef
from lakefmt.errors import CommitConflictError
from lakefmt.io import FileIO
from lakefmt.metadata import TableMetadata, read_metadata
from lakefmt.scan import DataScan
from lakefmt.schema import Schema
from lakefmt.table import Table

HOOK_TIMEOUT_S = 120.0


@dataclass
class _Compaction:
    """A compaction running in a thread, held at its ``before-commit`` hook until released."""

    table: Table
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def hook(self, point: str, info: dict[str, Any]) -> None:
        if point == "before-commit":
            self.reached.set()
            if not self.release.wait(HOOK_TIMEOUT_S):
                raise TimeoutError("the conformance runner never released the compaction")

    def run(self) -> None:
        try:
            self.result = self.table.compaction.run(
                "binpack", min_age_seconds=0, min_input_files=1, max_concurrent_groups=1, use_leases=False,
                hook=self.hook)
        except BaseException as exc:  # noqa: BLE001 - re-raised by commit()
            self.error = exc
        finally:
            self.reached.set()


@dataclass
class _Pending:
    table: Table
    step: Step
    files: list[Any] = field(default_factory=list)
    compaction: _Compaction | None = None


class LakefmtAdapter:
    """The conformance adapter of lakefmt itself (see :mod:`lakefmt.conformance.adapter`)."""

    # -- reading -----------------------------------------------------------------------
    def open_table(self, metadata_path: str) -> TableMetadata:
        return read_metadata(FileIO(os.path.dirname(os.path.dirname(metadata_path))), metadata_path)

    def current_snapshot_id(self, handle: TableMetadata) -> int | None:
        return handle.current_snapshot_id

    def snapshots(self, handle: TableMetadata) -> list[dict[str, Any]]:
        return [s.to_json() for s in handle.snapshots]

    def snapshot_as_of(self, handle: TableMetadata, timestamp_ms: int) -> int:
        return handle.snapshot_as_of(timestamp_ms).snapshot_id

    def _scan(self, handle: TableMetadata, snapshot_id: int | None, filter: Filter | None,
              columns: list[str] | None = None) -> DataScan:
        return DataScan.create(FileIO(handle.location), handle, filter=None if filter is None else filter.text,
                               columns=columns, snapshot_id=snapshot_id)

    def scan(self, handle: TableMetadata, snapshot_id: int | None = None, filter: Filter | None = None,
             columns: list[str] | None = None) -> pa.Table:
        return self._scan(handle, snapshot_id, filter, columns).to_arrow()

    def plan_files(self, handle: TableMetadata, snapshot_id: int | None = None,
                   filter: Filter | None = None) -> list[str]:
        return [f.path for f in self._scan(handle, snapshot_id, filter).plan_files()]

    # -- writing -----------------------------------------------------------------------
    @staticmethod
    def _catalog(table: TableRef) -> Catalog:
        return Catalog(table.warehouse, catalog_path=table.catalog_path)

    def _load(self, table: TableRef) -> Table:
        return self._catalog(table).load_table(table.identifier)

    def create_table(self, table: TableRef, schema: dict[str, Any], partition_by: list[dict[str, Any]],
                     sort_by: list[dict[str, Any]], properties: dict[str, str], format_version: int = 1) -> None:
        def partition(p: dict[str, Any]) -> str:
            name, _, param = p["transform"].rstrip("]").partition("[")
            if name == "identity":
                return p["source"]
            return f"{name}({param}, {p['source']})" if param else f"{name}({p['source']})"

        def order(s: dict[str, Any]) -> str:
            return f"{s['source']} {s.get('direction', 'asc')} {s.get('null-order', 'nulls-first').replace('-', ' ')}"

        self._catalog(table).create_table(
            table.identifier, Schema.from_json(schema), partition_by=[partition(p) for p in partition_by],
            sort_by=[order(s) for s in sort_by], properties=properties, format_version=format_version)

    def append(self, table: TableRef, rows: pa.Table) -> None:
        self._load(table).append(rows)

    def delete(self, table: TableRef, filter: Filter) -> None:
        self._load(table).delete(filter.text)

    def overwrite(self, table: TableRef, filter: Filter, rows: pa.Table) -> None:
        self._load(table).overwrite(rows, filter.text)

    # -- interleaved commits -----------------------------------------------------------
    def prepare(self, table: TableRef, step: Step) -> _Pending:
        handle = self._load(table)
        pending = _Pending(handle, step)
        if step.op == "append":
            pending.files = handle.write_data_files(step.rows)
        elif step.op == "compact":
            pending.compaction = _Compaction(handle)
            pending.compaction.thread = threading.Thread(target=pending.compaction.run, daemon=True)
            pending.compaction.thread.start()
            if not pending.compaction.reached.wait(HOOK_TIMEOUT_S):
                raise TimeoutError("compaction did not reach its commit")
        return pending

    def commit(self, pending: _Pending) -> Outcome:
        t, step = pending.table, pending.step
        try:
            if step.op == "append":
                t.commit_change(FileChange("append", added=pending.files), cleanup_on_failure=pending.files)
            elif step.op == "delete":
                assert step.filter is not None
                t.delete(step.filter.text)
            elif step.op == "overwrite":
                assert step.filter is not None
                t.overwrite(step.rows, step.filter.text)
            elif step.op == "compact":
                return self._finish_compaction(pending.compaction)
            else:
                raise ValueError(f"unknown step {step.op!r}")
        except CommitConflictError:
            return "conflict"
        return "committed"

    @staticmethod
    def _finish_compaction(compaction: _Compaction | None) -> Outcome:
        assert compaction is not None and compaction.thread is not None
        compaction.release.set()
        compaction.thread.join(HOOK_TIMEOUT_S)
        if compaction.error is not None:
            raise compaction.error
        statuses = {g.status for g in compaction.result.groups}
        if "committed" in statuses:
            return "committed"
        if statuses == {"conflict"}:
            return "conflict"
        raise RuntimeError(f"compaction committed nothing: {compaction.result.summary()}")
