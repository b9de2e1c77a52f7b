"""Reader and negative cases: read a relocated table and compare with what the kit expects.

Each case's ``table/`` folder is first copied to a fresh temporary folder, so a reader
that resolves paths from the recorded ``location`` instead of the metadata file's own
location (LAYOUT-3) fails. Planned files are checked against READ-4 and READ-5: every
file holding a matching live row is planned, and nothing but live files of the snapshot;
pruning more or less than lakefmt does is not a failure.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from lakefmt.conformance.adapter import Adapter, Filter
from lakefmt.conformance.results import CaseResult, describe, diff_rows

SNAPSHOT_KEYS = ("snapshot-id", "parent-snapshot-id", "sequence-number", "operation", "schema-id")


def as_filter(obj: dict[str, Any] | None) -> Filter | None:
    return None if obj is None else Filter(obj["text"], obj["tree"])


def relocated(case_dir: Path, case: dict[str, Any], tmp: str) -> str:
    """Copy the case's table to ``tmp`` and return its metadata file there."""
    target = Path(tmp) / "relocated" / "table"
    shutil.copytree(case_dir / "table", target)
    return str(target.parent / case["metadata"])


def run_reader_case(adapter: Adapter, case_dir: Path, case: dict[str, Any], result: CaseResult) -> None:
    with tempfile.TemporaryDirectory(prefix="lakefmt-conformance-") as tmp:
        handle = adapter.open_table(relocated(case_dir, case, tmp))
        current = adapter.current_snapshot_id(handle)
        result.check("current snapshot (META-1)", current == case["current-snapshot-id"],
                     f"current-snapshot-id {current}, expected {case['current-snapshot-id']}")
        _check_snapshots(adapter, handle, case, result)
        for read in case["reads"]:
            _check_read(adapter, handle, case_dir, case, read, result)
        for probe in case.get("as-of", []):
            _check_as_of(adapter, handle, probe, result)
        for snapshot_id in case.get("missing-snapshots", []):
            try:
                rows = adapter.scan(handle, snapshot_id=snapshot_id)
            except Exception as exc:  # noqa: BLE001 - any refusal passes; its type is reported
                result.check(f"snapshot {snapshot_id} is gone (READ-2)", True, f"raised {describe(exc)}")
            else:
                result.check(f"snapshot {snapshot_id} is gone (READ-2)", False,
                             f"reading expired snapshot {snapshot_id} returned {rows.num_rows} rows instead of "
                             "failing with NoSuchSnapshotError")


def _check_snapshots(adapter: Adapter, handle: Any, case: dict[str, Any], result: CaseResult) -> None:
    got = [{k: s.get(k) for k in SNAPSHOT_KEYS} for s in adapter.snapshots(handle)]
    want = [{k: s[k] for k in SNAPSHOT_KEYS} for s in case["snapshots"]]
    result.check("snapshots (SNAP-1)", got == want, f"snapshots {got}, expected {want}")


def _check_read(adapter: Adapter, handle: Any, case_dir: Path, case: dict[str, Any], read: dict[str, Any],
                result: CaseResult) -> None:
    name = read["name"]
    flt = as_filter(read.get("filter"))
    expected = pq.read_table(case_dir / read["rows"])
    try:
        actual = adapter.scan(handle, snapshot_id=read.get("snapshot-id"), filter=flt, columns=read.get("columns"))
    except Exception as exc:  # noqa: BLE001 - the adapter's failure is this check's failure
        result.check(f"rows: {name}", False, f"scan raised {describe(exc)}")
    else:
        diff = diff_rows(expected, actual)
        result.check(f"rows: {name}", diff is None, diff or "")
    if read.get("columns") is not None:
        return  # planning does not depend on the projection
    files = read["files"]
    try:
        planned = adapter.plan_files(handle, snapshot_id=read.get("snapshot-id"), filter=flt)
    except Exception as exc:  # noqa: BLE001
        result.check(f"plan: {name}", False, f"plan_files raised {describe(exc)}")
        return
    snapshot_id = read.get("snapshot-id") or case["current-snapshot-id"]
    live = set(case["live-files"].get(str(snapshot_id), []))
    planned_set, matching = set(planned), set(files["matching"])
    problems = []
    if len(planned_set) != len(planned):
        problems.append("a file is planned twice")
    if planned_set - live:
        problems.append(f"planned files that are not live (READ-9, ML-5): {sorted(planned_set - live)[:3]}")
    if matching - planned_set:
        problems.append(f"pruned files holding matching rows (READ-4): {sorted(matching - planned_set)[:3]}")
    result.check(f"plan: {name}", not problems, "; ".join(problems))


def _check_as_of(adapter: Adapter, handle: Any, probe: dict[str, Any], result: CaseResult) -> None:
    when, want = probe["timestamp-ms"], probe["snapshot-id"]
    label = f"as of {when} (READ-2)"
    try:
        got = adapter.snapshot_as_of(handle, when)
    except Exception as exc:  # noqa: BLE001
        result.check(label, want is None, f"raised {describe(exc)}, expected snapshot {want}")
        return
    result.check(label, got == want, f"snapshot {got}, expected " + ("an error" if want is None else str(want)))


def run_negative_case(adapter: Adapter, case_dir: Path, case: dict[str, Any], result: CaseResult) -> None:
    """The adapter must refuse the table: raise while opening, planning or scanning it."""
    label = f"refuses ({', '.join(case['spec'])})"
    snapshot_id = case.get("read", {}).get("snapshot-id")
    with tempfile.TemporaryDirectory(prefix="lakefmt-conformance-") as tmp:
        try:
            handle = adapter.open_table(relocated(case_dir, case, tmp))
            rows = adapter.scan(handle, snapshot_id=snapshot_id)
        except Exception as exc:  # noqa: BLE001 - refusing is the expected outcome
            result.raised = tuple(c.__name__ for c in type(exc).__mro__)
            result.check(label, True, f"raised {describe(exc)}")
            return
    result.check(label, False, f"returned {rows.num_rows} rows instead of failing with {case['error']}")
