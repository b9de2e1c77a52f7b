"""Run the conformance kit against an adapter and print a pass/fail table.

The kit (spec/conformance/) lists its cases in ``kit.json``; each case folder has a
``case.json``. :func:`run_kit` runs the selected kinds and returns one
:class:`~lakefmt.conformance.results.CaseResult` per case; :func:`format_results` prints them with
the spec IDs each case exercises.

Example:
    >>> results = run_kit(load_adapter("lakefmt.conformance.lakefmt_adapter:LakefmtAdapter"), "spec/conformance")
    >>> print(format_results(results))
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lakefmt.conformance.adapter import COMMIT_METHODS, READER_METHODS, WRITER_METHODS, Adapter
from lakefmt.conformance.commits import run_commit_case
from lakefmt.conformance.readers import run_negative_case, run_reader_case
from lakefmt.conformance.results import CaseResult, describe
from lakefmt.conformance.writers import run_writer_case
from lakefmt.errors import ValidationError

KINDS = ("reader", "negative", "writer", "commit")
DEFAULT_ADAPTER = "lakefmt.conformance.lakefmt_adapter:LakefmtAdapter"
RUNNERS: dict[str, Callable[[Adapter, Path, dict[str, Any], CaseResult], None]] = {
    "reader": run_reader_case, "negative": run_negative_case, "writer": run_writer_case, "commit": run_commit_case,
}
NEEDS = {"reader": READER_METHODS, "negative": ("open_table", "scan"), "writer": WRITER_METHODS,
         "commit": COMMIT_METHODS}


def default_kit() -> Path:
    """spec/conformance of the source tree lakefmt runs from, else ./spec/conformance."""
    here = Path(__file__).resolve().parents[2] / "spec" / "conformance"
    return here if (here / "kit.json").exists() else Path("spec/conformance")


def load_adapter(spec: str) -> Any:
    """An adapter instance from ``module:Class`` (or ``module:factory``), called without arguments."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValidationError(f"--adapter must be module:Class, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValidationError(f"cannot import adapter module {module_name!r}: {exc}") from exc
    try:
        factory = getattr(module, attr)
    except AttributeError:
        raise ValidationError(f"module {module_name!r} has no {attr!r}") from None
    return factory()


def load_kit(kit: str | Path) -> tuple[Path, list[dict[str, Any]]]:
    """The kit folder and its case list (``kit.json``)."""
    root = Path(kit)
    index = root / "kit.json"
    if not index.is_file():
        raise ValidationError(f"{root} is not a conformance kit: it has no kit.json (see spec/conformance/README.md)")
    return root, json.loads(index.read_text())["cases"]


def run_kit(adapter: Any, kit: str | Path | None = None, *, only: Iterable[str] | None = None,
            cases: Iterable[str] | None = None) -> list[CaseResult]:
    """Run the kit's cases of the kinds in ``only`` (default all), or just the ``cases`` named."""
    root, listed = load_kit(default_kit() if kit is None else kit)
    kinds = set(KINDS if only is None else only)
    unknown = kinds - set(KINDS)
    if unknown:
        raise ValidationError(f"unknown case kind(s) {sorted(unknown)}; the kinds are {', '.join(KINDS)}")
    wanted = None if cases is None else set(cases)
    results = []
    for entry in listed:
        if entry["kind"] not in kinds or (wanted is not None and entry["id"] not in wanted):
            continue
        results.append(run_case(adapter, root / entry["path"]))
    return results


def run_case(adapter: Any, case_dir: Path) -> CaseResult:
    """Run one case folder; an exception from the adapter makes the case ``error``, never stops the run."""
    case = json.loads((case_dir / "case.json").read_text())
    result = CaseResult(case["id"], case["kind"], list(case["spec"]), case["title"])
    missing = [m for m in NEEDS[case["kind"]] if not callable(getattr(adapter, m, None))]
    started = time.perf_counter()
    if missing:
        result.error = f"the adapter has no {', '.join(missing)} (needed by {case['kind']} cases)"
    else:
        try:
            RUNNERS[case["kind"]](adapter, case_dir, case, result)
        except Exception as exc:  # noqa: BLE001 - one failing case never stops the others
            result.error = describe(exc)
    result.seconds = time.perf_counter() - started
    return result


def format_results(results: list[CaseResult], *, verbose: bool = False) -> str:
    """A table: kind, case, status, spec IDs; then the reasons of every failure."""
    rows = [("KIND", "CASE", "RESULT", "SPEC")]
    rows += [(r.kind, r.case_id, r.status.upper(), " ".join(r.spec_ids)) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
    for r in results:
        details = [f"error: {r.error}"] if r.error else []
        details += [f"{c.name}: {c.detail}" for c in r.checks if not c.ok or (verbose and c.detail)]
        if details:
            lines.append(f"\n{r.case_id} ({r.title}):")
            lines.extend(f"  - {d}" for d in details)
    by_status = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "error")}
    lines.append(f"\n{len(results)} cases: {by_status['pass']} passed, {by_status['fail']} failed, "
                 f"{by_status['error']} errors")
    return "\n".join(lines)
