"""Commit cases: two writers interleaved by a script, resolved as spec/commits.md says.

The runner copies the case's base table into a fresh warehouse, registers it in a new
catalog (CAT-20), and plays the script: ``["prepare", "A"]`` loads the base and writes
A's files, ``["commit", "A"]`` swaps. Then it checks, with lakefmt, that

* each writer's outcome and the table's rows are one of the results the case allows
  (where the spec says SHOULD, for example "replan after a conflict", both are allowed);
* the history stays linear: the new current snapshot descends from the base's, through
  exactly one new snapshot per committed writer, with the operations they made (COMMIT-4);
* the table passes ``check`` (MAINT-14).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from lakefmt.conformance.adapter import OUTCOMES, Adapter, Step
from lakefmt.conformance.readers import as_filter
from lakefmt.conformance.results import CaseResult, describe, diff_rows
from lakefmt.conformance.writers import new_catalog, validate

OPERATION_OF = {"append": "append", "delete": "delete", "overwrite": "overwrite", "compact": "replace"}


def _step(case_dir: Path, spec: dict[str, Any]) -> Step:
    rows = pq.read_table(case_dir / spec["rows"]) if spec.get("rows") else None
    return Step(spec["op"], rows=rows, filter=as_filter(spec.get("filter")))


def run_commit_case(adapter: Adapter, case_dir: Path, case: dict[str, Any], result: CaseResult) -> None:
    with tempfile.TemporaryDirectory(prefix="lakefmt-conformance-") as tmp:
        catalog, ref = new_catalog(tmp, case["id"])
        folder = Path(ref.warehouse) / ref.namespace / ref.name
        shutil.copytree(case_dir / "table", folder)
        base = catalog.register_table(ref.identifier, str(folder / Path(case["metadata"]).relative_to("table")))
        base_snapshot = base.metadata.current_snapshot_id
        steps = {writer: _step(case_dir, spec) for writer, spec in case["writers"].items()}
        pending: dict[str, Any] = {}
        outcomes: dict[str, str] = {}
        for action, writer in case["script"]:
            try:
                if action == "prepare":
                    pending[writer] = adapter.prepare(ref, steps[writer])
                else:
                    outcomes[writer] = adapter.commit(pending.pop(writer))
            except Exception as exc:  # noqa: BLE001 - the adapter failing a step fails the case
                result.check(f"{action} {writer} ({steps[writer].op})", False, describe(exc))
                return
            if action == "commit":
                result.check(f"commit {writer} returns an outcome", outcomes[writer] in OUTCOMES,
                             f"commit returned {outcomes[writer]!r}; expected one of {OUTCOMES}")
        table = validate(catalog, ref, "after the script", result)
        if table is None:
            return
        actual = table.scan().to_arrow()
        allowed = [r for r in case["results"] if r["outcomes"] == outcomes]
        shown = ", ".join(f"{w} {o}" for w, o in sorted(outcomes.items()))
        if not result.check("outcomes allowed by the spec", bool(allowed), f"{shown}; " + (
                            allowed[0]["because"] if allowed else "the spec allows: " + " | ".join(
                                ", ".join(f"{w} {o}" for w, o in sorted(r["outcomes"].items()))
                                for r in case["results"]))):
            return
        diff = diff_rows(pq.read_table(case_dir / allowed[0]["rows"]), actual)
        result.check(f"rows after {shown}", diff is None, diff or "")
        _check_history(table.metadata, base_snapshot, steps, outcomes, result)


def _check_history(metadata: Any, base_snapshot: int | None, steps: dict[str, Step], outcomes: dict[str, str],
                   result: CaseResult) -> None:
    """One new snapshot per committed writer, in one line of descent from the base (COMMIT-4, SNAP-3)."""
    new = []
    for snap in metadata.ancestors(metadata.current_snapshot_id):
        if snap.snapshot_id == base_snapshot:
            break
        new.append(snap.operation)
    else:
        if base_snapshot is not None:
            result.check("history is linear", False, f"the base snapshot {base_snapshot} is no longer an ancestor "
                         "of the current snapshot: a commit was lost")
            return
    want = Counter(OPERATION_OF[steps[w].op] for w, o in outcomes.items() if o == "committed")
    result.check("one new snapshot per committed writer", Counter(new) == want,
                 f"new snapshots {sorted(new)}, expected {sorted(want.elements())}")
