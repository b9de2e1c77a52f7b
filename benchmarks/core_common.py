"""Helpers shared by the benchmark scripts of this folder.

Each benchmark prints a Markdown table and writes JSON with the machine it ran on
to ``benchmarks/results/<name>-<UTC time>.json`` (:func:`write_results`, or
:func:`publish` for both). The load average is recorded (:func:`loadavg`) because the
numbers are only comparable on an otherwise idle machine. A script's command line is
its own; the options most share come from :func:`add_run_arguments`, its work folder
from :func:`work_dir`, and the Spark benchmarks' session from :func:`local_spark`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def environment() -> dict[str, Any]:
    import duckdb
    import pyarrow

    import lakefmt

    try:
        import deltalake
        delta_version = deltalake.__version__
    except ImportError:
        delta_version = None
    return {
        "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(), "lakefmt": lakefmt.__version__,
        "git_commit": git_commit() or "",
        "pyarrow": pyarrow.__version__, "duckdb": duckdb.__version__, "deltalake": delta_version,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def git_commit() -> str | None:
    """The short hash of the checked-out commit, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def command_line() -> str:
    """How this process was started, as ``python benchmarks/bench_x.py --opt ...``."""
    return " ".join([os.path.basename(sys.executable), *sys.argv])


def loadavg() -> str:
    """``/proc/loadavg`` as text (the 1, 5 and 15 minute load averages and run queue)."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_run_arguments(parser: argparse.ArgumentParser, *, quick: str | None = None, runs: int | None = None,
                      runs_help: str | None = None, work: Literal["keep", "temporary"] | None = "keep",
                      json_out: bool = True) -> None:
    """The options benchmark runs share, each where the script has it.

    ``--quick`` if ``quick`` (its help) is given; ``--runs`` if its default ``runs`` or
    ``runs_help`` is; the work folder ``--dir`` with ``--keep`` (``work="keep"``: deleted
    unless ``--keep``), or alone (``"temporary"``: a folder given is kept, a temporary one
    deleted; see :func:`work_dir`); ``--json`` (the results file) if ``json_out``.
    """
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    if runs is not None or runs_help is not None:
        parser.add_argument("--runs", type=int, default=runs, help=runs_help)
    if work == "keep":
        parser.add_argument("--dir", help="work directory (default: a temporary one)")
        parser.add_argument("--keep", action="store_true", help="keep the work directory")
    elif work == "temporary":
        parser.add_argument("--dir", default=None, help="working folder (default: a temporary one, deleted)")
    if json_out:
        parser.add_argument("--json", help="write results here instead of benchmarks/results/")


@contextmanager
def work_dir(path: str | None, *, prefix: str, keep: bool | None = None) -> Iterator[Path]:
    """The work folder ``path`` (default: a new temporary one), deleted afterwards.

    ``keep``: keep it (``--keep``); None keeps a folder the caller named and deletes a temporary one.
    """
    root = Path(path) if path else Path(tempfile.mkdtemp(prefix=prefix))
    root.mkdir(parents=True, exist_ok=True)
    try:
        yield root
    finally:
        if not (keep if keep is not None else path):
            shutil.rmtree(root, ignore_errors=True)


def publish(name: str, text: str, payload: dict[str, Any], path: str | None = None, *,
            quick: bool = False) -> Path:
    """Print a run's report ``text``, write ``payload`` (:func:`write_results`) and print where it went."""
    print("\n" + text)
    out = write_results(name, payload, path, quick=quick)
    print(f"\nresults: {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return out


class Run:
    """One run of a loop benchmark: the machine and the load when it started, and its published report.

    The JSON of :meth:`publish` holds ``benchmark``, ``environment``, ``args`` (``--json``,
    ``--quick`` among them), any ``extra`` fields, ``results`` and the Markdown ``markdown``.
    """

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name, self.args = name, args
        self.environment = environment()
        self.started_load = loadavg()

    def load_note(self) -> str:
        """The line closing a report: the load average at the start and now."""
        return f"load average at the start: {self.started_load}; at the end: {loadavg()}"

    def publish(self, text: str, results: Any, *, name: str | None = None, quick: bool | None = None,
                **extra: Any) -> Path:
        """Print ``text``, write the run's JSON (under ``name`` if given; ``quick`` overrides ``--quick``)."""
        name = name or self.name
        payload = {"benchmark": name, "environment": self.environment, "args": vars(self.args), **extra,
                   "results": results, "markdown": text}
        return publish(name, text, payload, self.args.json, quick=self.args.quick if quick is None else quick)


def local_spark(app: str, cores: int, *, driver_memory: str, shuffle_partitions: int) -> Any:
    """A ``local[cores]`` SparkSession in UTC, without UI, with lakefmt's data source registered.

    Spark's Python workers find lakefmt through ``PYTHONPATH``, set here before the JVM starts.
    """
    from pyspark.sql import SparkSession  # Spark only for the Spark benchmarks

    import lakefmt.spark

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master(f"local[{cores}]").appName(app)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", driver_memory)
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    lakefmt.spark.register(spark)
    return spark


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
