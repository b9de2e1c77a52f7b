"""Writer cases: the implementation under test writes a scenario; lakefmt validates every step.

The runner creates an empty catalog (CAT-3) in a fresh warehouse and hands the adapter
a :class:`~lakefmt.conformance.adapter.TableRef`. After each step lakefmt loads the table
from that catalog, runs ``check`` at level ``full`` (MAINT-14: metadata, manifests, data
files, deletion vectors), and reads the current snapshot back. At the end lakefmt itself
appends to the table and compacts it, as a second implementation sharing the table would.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from lakefmt.catalog import Catalog
from lakefmt.conformance.adapter import Adapter, TableRef
from lakefmt.conformance.readers import as_filter
from lakefmt.conformance.results import CaseResult, describe, diff_rows
from lakefmt.table import Table

NAMESPACE = "conformance"


def table_name(case_id: str) -> str:
    """A catalog name for a case (CAT-2 allows letters, digits and ``_``)."""
    return case_id.replace("-", "_")


def new_catalog(tmp: str, case_id: str) -> tuple[Catalog, TableRef]:
    """An empty catalog in a fresh warehouse, and the name the case's table gets in it."""
    warehouse, catalog_path = str(Path(tmp) / "warehouse"), str(Path(tmp) / "catalog.duckdb")
    catalog = Catalog(warehouse, catalog_path=catalog_path, create=True)
    return catalog, TableRef(warehouse, catalog_path, NAMESPACE, table_name(case_id))


def validate(catalog: Catalog, ref: TableRef, label: str, result: CaseResult) -> Table | None:
    """Load the table with lakefmt and check it at rest (MAINT-14); None if it cannot be loaded."""
    try:
        table = catalog.load_table(ref.identifier)
        report = table.check()
    except Exception as exc:  # noqa: BLE001 - a table lakefmt cannot load is a failed case
        result.check(f"{label}: lakefmt loads and checks the table", False, describe(exc))
        return None
    violations = "; ".join(str(v) for v in report.violations[:3])
    result.check(f"{label}: lakefmt check", report.ok, f"{len(report.violations)} violation(s): {violations}")
    return table


def run_writer_case(adapter: Adapter, case_dir: Path, case: dict[str, Any], result: CaseResult) -> None:
    with tempfile.TemporaryDirectory(prefix="lakefmt-conformance-") as tmp:
        catalog, ref = new_catalog(tmp, case["id"])
        snapshots = 0
        for number, step in enumerate(case["steps"]):
            label = f"step {number} {step['op']}"
            _apply(adapter, case_dir, ref, step)
            table = validate(catalog, ref, label, result)
            if table is None:
                return
            if step["op"] == "create":
                result.check(f"{label}: no snapshot yet (META-11)", table.metadata.current_snapshot_id is None,
                             f"current snapshot {table.metadata.current_snapshot_id}")
            else:
                snapshots += 1
                current = table.current_snapshot()
                result.check(f"{label}: one new snapshot", len(table.snapshots()) == snapshots,
                             f"{len(table.snapshots())} snapshots, expected {snapshots}")
                result.check(f"{label}: operation (SNAP-4)", current is not None
                             and current.operation == step["operation"],
                             f"operation {current.operation if current else None}, expected {step['operation']}")
            diff = diff_rows(pq.read_table(case_dir / step["expect"]), table.scan().to_arrow())
            result.check(f"{label}: rows read back", diff is None, diff or "")
        _continue_with_lakefmt(catalog, ref, case_dir, case, result)


def _apply(adapter: Adapter, case_dir: Path, ref: TableRef, step: dict[str, Any]) -> None:
    op = step["op"]
    if op == "create":
        adapter.create_table(ref, step["schema"], step.get("partition-by", []), step.get("sort-by", []),
                             step.get("properties", {}), step.get("format-version", 1))
    elif op == "append":
        adapter.append(ref, pq.read_table(case_dir / step["rows"]))
    elif op == "delete":
        adapter.delete(ref, as_filter(step["filter"]))  # type: ignore[arg-type]
    elif op == "overwrite":
        adapter.overwrite(ref, as_filter(step["filter"]), pq.read_table(case_dir / step["rows"]))  # type: ignore[arg-type]
    else:
        raise ValueError(f"unknown writer step {op!r}")


def _continue_with_lakefmt(catalog: Catalog, ref: TableRef, case_dir: Path, case: dict[str, Any],
                           result: CaseResult) -> None:
    """lakefmt appends to the table the adapter wrote, compacts it, and reads it back."""
    more = case.get("continue")
    if more is None:
        return
    try:
        table = catalog.load_table(ref.identifier)
        table.append(pq.read_table(case_dir / more["rows"]))
        table.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    except Exception as exc:  # noqa: BLE001
        result.check("lakefmt appends and compacts", False, describe(exc))
        return
    table = validate(catalog, ref, "after lakefmt appended and compacted", result)
    if table is not None:
        diff = diff_rows(pq.read_table(case_dir / more["expect"]), table.scan().to_arrow())
        result.check("after lakefmt appended and compacted: rows", diff is None, diff or "")
