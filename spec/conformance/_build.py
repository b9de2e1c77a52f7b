"""The generator's machinery: building tables with lakefmt while keeping an independent model of their rows.

Every reader, negative and commit case starts from a table built here. ``TableBuild``
writes through lakefmt's public API and, next to it, keeps a *model*: the rows the table
must hold after each commit, computed with plain pyarrow from the data appended and the
filters applied. ``finish_reader`` checks that lakefmt reads exactly the model before it
records anything as expected, so the kit's expectations never just echo lakefmt's reader.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakefmt
from lakefmt.conformance.filters import make, to_arrow
from lakefmt.conformance.lakefmt_adapter import LakefmtAdapter
from lakefmt.conformance.results import diff_rows
from lakefmt.expressions import ALWAYS_TRUE, bind, to_expression
from lakefmt.io import FileIO
from lakefmt.metadata import read_metadata
from lakefmt.scan import DataScan, read_data_file

SEED = 20260115
NOWHERE = "/nonexistent/lakefmt-conformance"  # the recorded `location` of every kit table (LAYOUT-3)


@dataclass(frozen=True)
class Case:
    kind: str
    id: str
    title: str
    spec: tuple[str, ...]
    build: Callable[..., dict[str, Any]]


CASES: dict[str, Case] = {}


def case(kind: str, case_id: str, title: str, spec: str) -> Callable[[Callable[..., dict[str, Any]]], Any]:
    """Register a case builder: ``build(ctx) -> case.json fields`` (spec IDs separated by spaces)."""
    def register(build: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        assert case_id not in CASES, case_id
        CASES[case_id] = Case(kind, case_id, title, tuple(spec.split()), build)
        return build
    return register


@contextmanager
def seeded_uuids(case_id: str) -> Iterator[None]:
    """uuid4 drawn from a generator seeded by the case id, so that names and ids repeat run after run."""
    rng, lock, original = random.Random(f"{SEED}:{case_id}"), threading.Lock(), uuid.uuid4

    def uuid4() -> uuid.UUID:
        with lock:
            return uuid.UUID(int=rng.getrandbits(128), version=4)

    uuid.uuid4 = uuid4  # type: ignore[assignment]
    try:
        yield
    finally:
        uuid.uuid4 = original  # type: ignore[assignment]


def write_parquet(path: Path, table: pa.Table) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return str(path)


def without_rows(model: pa.Table, tree: list[Any]) -> pa.Table:
    """The model after deleting the rows for which ``tree`` is TRUE (NULL and FALSE stay, EXPR-5)."""
    expr = to_arrow(tree, model.schema)
    return model.filter(~expr | expr.is_null())


def matching(model: pa.Table, tree: list[Any] | None) -> pa.Table:
    return model if tree is None else model.filter(to_arrow(tree, model.schema))


@dataclass
class Read:
    name: str
    snapshot_id: int | None
    tree: list[Any] | None
    columns: list[str] | None


@dataclass
class TableBuild:
    """One case's warehouse, table and model; ``out`` is the case folder in the kit."""

    case_id: str
    out: Path
    tmp: Path
    catalog: lakefmt.Catalog = field(init=False)
    table: lakefmt.Table = field(init=False)
    model: pa.Table | None = None  # the rows of the current snapshot, in the current schema
    models: dict[int, pa.Table] = field(default_factory=dict)  # snapshot id -> its rows, in its schema
    reads: list[Read] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.catalog = lakefmt.Catalog(str(self.tmp / "warehouse"), create=True)

    def create(self, schema: pa.Schema, **options: Any) -> lakefmt.Table:
        options.setdefault("format_version", 1)  # the kit's cases are version 1 unless they ask for 2
        self.table = self.catalog.create_table(f"conformance.{self.case_id.replace('-', '_')}", schema=schema,
                                               **options)
        self.model = self.table.arrow_schema().empty_table()
        return self.table

    def snap(self) -> int:
        """Record the model as the rows of the snapshot just committed."""
        self.table.refresh()
        sid = self.table.metadata.current_snapshot_id
        assert sid is not None and self.model is not None
        self.models[sid] = self.model
        return sid

    def append(self, rows: pa.Table) -> int:
        self.table.append(rows)
        self.model = pa.concat_tables([self.model, rows.select(self.model.column_names).cast(self.model.schema)])
        return self.snap()

    def delete(self, tree: list[Any]) -> int:
        self.table.delete(make(tree).text)
        self.model = without_rows(self.model, tree)
        return self.snap()

    def overwrite(self, rows: pa.Table, tree: list[Any] | None) -> int:
        self.table.overwrite(rows, None if tree is None else make(tree).text)
        kept = self.model.slice(0, 0) if tree is None else without_rows(self.model, tree)
        self.model = pa.concat_tables([kept, rows.select(kept.column_names).cast(kept.schema)])
        return self.snap()

    def same_rows(self) -> int:
        """Record a commit that changes files but not rows (compaction, manifest rewrite)."""
        return self.snap()

    def read(self, name: str, tree: list[Any] | None = None, *, columns: list[str] | None = None,
             snapshot_id: int | None = None) -> None:
        """A read the kit checks: of the current snapshot as it is at the end, or of ``snapshot_id``.

        The expected rows come from the model of that snapshot (:meth:`expected`).
        """
        self.reads.append(Read(name, snapshot_id, tree, columns))

    def expected(self, read: Read) -> pa.Table:
        current = self.table.metadata.current_snapshot_id
        base = self.model if read.snapshot_id in (None, current) else self.models[read.snapshot_id]
        rows = matching(base, read.tree)
        return rows if read.columns is None else rows.select(read.columns)

    # -- writing the case ------------------------------------------------------------
    def copy_table(self) -> str:
        """Copy the table into ``out/table`` with `location` pointing nowhere; the metadata path in the kit."""
        self.table.refresh()
        source = Path(self.table.location)
        target = self.out / "table"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
        for path in (target / "metadata").glob("*.metadata.json"):
            text = path.read_text()
            path.write_text(text.replace(json.dumps(str(source)), json.dumps(f"{NOWHERE}/{self.case_id}")))
        return f"table/metadata/{Path(self.table.metadata_location).name}"


def finish_reader(build: TableBuild, *, as_of: bool = False, missing: list[int] | None = None) -> dict[str, Any]:
    """The case.json of a reader case: every retained snapshot read whole, plus the build's reads."""
    metadata_rel = build.copy_table()
    meta = read_metadata(FileIO(str(build.out)), str(build.out / metadata_rel))
    current = meta.current_snapshot_id
    reads = [Read(f"snapshot {s.sequence_number}" + (" (current)" if s.snapshot_id == current else ""),
                  s.snapshot_id, None, None) for s in meta.snapshots]
    reads.insert(0, Read("current snapshot", None, None, None))
    written: list[tuple[pa.Table, str]] = []
    entries = [_expected_read(build, meta, number, read, written) for number, read in enumerate([*reads, *build.reads])]
    io = FileIO(meta.location)
    doc: dict[str, Any] = {
        "metadata": metadata_rel,
        "current-snapshot-id": current,
        "snapshots": [{k: v for k, v in s.to_json().items() if k not in ("summary", "manifest-list", "timestamp-ms")}
                      for s in meta.snapshots],
        "live-files": {str(s.snapshot_id): sorted(f.path for f in DataScan.create(
            io, meta, snapshot_id=s.snapshot_id).plan_files()) for s in meta.snapshots},
        "reads": entries,
    }
    if as_of:
        probes = [{"timestamp-ms": meta.snapshot_log[0].timestamp_ms - 1, "snapshot-id": None}]
        for entry in meta.snapshot_log:
            last = [e for e in meta.snapshot_log if e.timestamp_ms <= entry.timestamp_ms][-1]
            probes.append({"timestamp-ms": entry.timestamp_ms,
                           "snapshot-id": last.value if meta.has_snapshot(last.value) else None})
        doc["as-of"] = probes
    if missing:
        doc["missing-snapshots"] = missing
    return doc


def _expected_read(build: TableBuild, meta: Any, number: int, read: Read,
                   written: list[tuple[pa.Table, str]]) -> dict[str, Any]:
    """Check lakefmt against the model on the copied table, then record rows (once per distinct result)
    and files."""
    adapter = LakefmtAdapter()
    flt = make(read.tree)
    actual = adapter.scan(meta, snapshot_id=read.snapshot_id, filter=flt, columns=read.columns)
    diff = diff_rows(build.expected(read), actual)
    if diff is not None:
        raise AssertionError(f"{build.case_id}, read {read.name!r}: lakefmt disagrees with the model: {diff}")
    rows_rel = next((path for rows, path in written if rows.equals(actual)), f"expected/read-{number:02d}.parquet")
    if not any(path == rows_rel for _, path in written):
        write_parquet(build.out / rows_rel, actual)
        written.append((actual, rows_rel))
    entry: dict[str, Any] = {"name": read.name, "snapshot-id": read.snapshot_id,
                             "filter": None if flt is None else {"text": flt.text, "tree": flt.tree},
                             "columns": read.columns, "rows": rows_rel}
    if read.columns is None:
        entry["files"] = _files(meta, read.snapshot_id, flt)
    return entry


def _files(meta: Any, snapshot_id: int | None, flt: Any) -> dict[str, list[str]]:
    """The live files of the snapshot that hold a live row that matches, and what lakefmt plans."""
    io = FileIO(meta.location)
    everything = DataScan.create(io, meta, snapshot_id=snapshot_id)
    filtered = DataScan.create(io, meta, snapshot_id=snapshot_id, filter=None if flt is None else flt.text)
    live = everything.plan_files()
    bound = bind(ALWAYS_TRUE if flt is None else to_expression(flt.text), everything.schema)
    hits = [f.path for f in live if read_data_file(
        io, f"{meta.location}/{f.path}", everything.schema, everything.schema, bound, data_file=f,
        expected_rows=f.record_count, table_location=meta.location).num_rows]
    return {"matching": sorted(hits), "lakefmt": sorted(f.path for f in filtered.plan_files())}


def rng_for(case_id: str) -> random.Random:
    return random.Random(f"{SEED}:data:{case_id}")


def rows_where(table: pa.Table, column: str, values: list[Any]) -> pa.Table:
    return table.filter(pc.is_in(table[column], pa.array(values, table.schema.field(column).type)))
