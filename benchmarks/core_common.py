"""Helpers shared by the core benchmarks (bench_append, bench_catalog, bench_planning).

Each benchmark prints a Markdown table and writes JSON with the machine it ran on
to ``benchmarks/results/<name>-<UTC time>.json``. The load average is recorded
because the numbers are only comparable on an otherwise idle machine.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def environment() -> dict[str, Any]:
    import duckdb
    import pyarrow

    import lakefmt

    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    try:
        import deltalake
        delta_version = deltalake.__version__
    except ImportError:
        delta_version = None
    return {
        "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(), "lakefmt": lakefmt.__version__, "git_commit": commit,
        "pyarrow": pyarrow.__version__, "duckdb": duckdb.__version__, "deltalake": delta_version,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_results(name: str, payload: dict[str, Any], path: str | None = None, *, quick: bool = False) -> Path:
    """Write ``payload`` to ``path``, or ``results/<name>-<UTC time>.json`` (``<name>-quick-latest.json``)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(path) if path else RESULTS / (f"{name}-quick-latest.json" if quick else f"{name}-{stamp}.json")
    payload = {**payload, "load_average_at_end": os.getloadavg()}
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return out


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines)


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Breakdown:
    """Accumulates wall time per named part of the commit path (benchmark-only instrumentation).

    Functions are wrapped by patching the attribute where callers look them up;
    ``Breakdown.take()`` returns and resets the totals.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._patches: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:  # the commit path changed shape: measure what is still there
            return
        totals, calls = self.totals, self.calls

        def timed(*args: Any, **kwargs: Any) -> Any:
            calls[label] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                totals[label] += time.perf_counter() - start

        self._patches.append((owner, attr, original))
        setattr(owner, attr, timed)

    def wrap_context(self, owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return
        totals = self.totals

        @contextmanager
        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            start = time.perf_counter()
            try:
                with original(*args, **kwargs) as value:
                    yield value
            finally:
                totals[label] += time.perf_counter() - start

        self._patches.append((owner, attr, original))
        setattr(owner, attr, timed)

    def take(self) -> dict[str, float]:
        out = dict(self.totals)
        self.totals.clear()
        return out

    def take_calls(self) -> dict[str, int]:
        out = dict(self.calls)
        self.calls.clear()
        return out

    def restore(self) -> None:
        for owner, attr, original in reversed(self._patches):
            setattr(owner, attr, original)
        self._patches.clear()


def commit_path_breakdown() -> Breakdown:
    """Wrap the parts of an append commit whose cost could grow with the table's history."""
    from lakefmt import catalog, catalog_lock, commit, metadata, table

    b = Breakdown()
    data_files = "_write_conformed" if hasattr(table.Table, "_write_conformed") else "write_data_files"
    b.wrap(table.Table, data_files, "data files")
    b.wrap(commit.SnapshotProducer, "build", "manifests + manifest list")
    b.wrap_context(catalog.Catalog, "session", "catalog session (lock+open+work+close)")
    b.wrap(catalog_lock.LockFile, "_acquire", "  waiting for the catalog lock")
    b.wrap(catalog.Catalog, "_attach", "  attach the catalog file")
    b.wrap(catalog.CatalogSession, "compare_and_swap", "  CAS transaction")
    b.wrap(commit, "apply_updates", "  apply updates")
    b.wrap(metadata.TableMetadata, "dump_bytes", "  metadata JSON serialize")
    return b


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
