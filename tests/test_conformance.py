"""The conformance kit (spec/conformance): lakefmt passes it, a reader written from the spec alone passes its
reader and negative cases, and the generator reproduces what is committed.

``SpecOnlyReader`` below imports nothing from lakefmt: it reads metadata with json and
manifests, manifest lists, data files and deletion vectors with pyarrow, struct and zlib,
applying the spec's rules (LAYOUT-3, META-1 … META-3, META-13 … META-15, ML-5, MAN-3, READ-2 … READ-14,
DV-2, DV-4). That it passes proves the kit checks the format, not lakefmt's internals.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

KIT = Path(__file__).resolve().parent.parent / "spec" / "conformance"
CASES = json.loads((KIT / "kit.json").read_text())["cases"]
META_FIELDS = ("format-version", "table-uuid", "location", "last-sequence-number", "last-updated-ms",
               "last-column-id", "current-schema-id", "schemas", "default-spec-id", "partition-specs",
               "last-partition-id", "default-sort-order-id", "sort-orders", "properties", "current-snapshot-id",
               "snapshots", "snapshot-log", "metadata-log")
TYPES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
         "double": pa.float64(), "date": pa.date32(), "time": pa.time64("us"), "timestamp": pa.timestamp("us"),
         "timestamptz": pa.timestamp("us", tz="UTC"), "string": pa.large_string(), "binary": pa.large_binary()}
WIDENINGS = {("int", "long"), ("float", "double")}


def arrow_type(spelling: str) -> pa.DataType:
    """TYPE-1: a type's JSON spelling to its Arrow type."""
    match = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", spelling)
    if match:
        p, s = int(match.group(1)), int(match.group(2))
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    return TYPES[spelling]


def spelling(t: pa.DataType) -> str:
    """The lakefmt type an Arrow type of a data file stores (TYPE-1, READ-7)."""
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    return next(name for name, arrow in TYPES.items() if arrow == t)


def widens(stored: str, read: str) -> bool:
    """SCHEMA-6: the same type, or an allowed widening."""
    if stored == read or (stored, read) in WIDENINGS:
        return True
    s, r = re.fullmatch(r"decimal\((\d+),(\d+)\)", stored), re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", read)
    return bool(s and r and s.group(2) == r.group(2) and int(r.group(1)) >= int(s.group(1)))


def deleted_positions(blob: bytes, record_count: int, cardinality: int) -> set[int]:
    """DV-2 decoding with the checks of DV-4."""
    if len(blob) < 28 or blob[:4] != b"LFDV":
        raise ValueError("DV-4: no LFDV magic")
    if zlib.crc32(blob[:-4]) != struct.unpack_from("<I", blob, len(blob) - 4)[0]:
        raise ValueError("DV-4: CRC-32 mismatch")
    _, encoding, count, rows = struct.unpack_from("<4sB3xQQ", blob)
    payload = blob[24:-4]
    if count != cardinality or count < 1 or rows != record_count:
        raise ValueError("DV-4: cardinality or row count differs from the manifest entry")
    if encoding == 1 and len(payload) == 8 * count:
        positions = list(struct.unpack(f"<{count}Q", payload))
        if positions != sorted(set(positions)) or positions[-1] >= rows:
            raise ValueError("DV-4: positions not ascending or out of range")
        return set(positions)
    if encoding == 2 and len(payload) == (rows + 7) // 8:
        positions = [p for p in range(len(payload) * 8) if payload[p // 8] >> (p % 8) & 1]
        if len(positions) != count or (positions and positions[-1] >= rows):
            raise ValueError("DV-4: bitmap bits past row_count or wrong count")
        return set(positions)
    raise ValueError("DV-4: unknown encoding or payload size")


def literal(value: Any, t: pa.DataType) -> pa.Scalar:
    import datetime as dt
    from decimal import Decimal

    if isinstance(value, dict):
        [(kind, text)] = value.items()
        value = {"date": dt.date.fromisoformat, "time": dt.time.fromisoformat, "decimal": Decimal,
                 "timestamp": dt.datetime.fromisoformat,
                 "timestamptz": lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00"))}[kind](text)
    elif isinstance(value, str) and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        value = value.encode()  # EXPR-4: strings for binary columns are UTF-8
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = Decimal(str(value)) if pa.types.is_decimal(t) else float(value) if pa.types.is_floating(t) else value
    return pa.scalar(value, type=t)


def expression(tree: list[Any], schema: pa.Schema) -> pc.Expression:
    """A filter tree as an Arrow expression: Arrow's Kleene AND/OR/NOT give EXPR-5's three-valued logic."""
    op, args = tree[0], tree[1:]
    if op in ("and", "or"):
        parts = [expression(a, schema) for a in args]
        return functools.reduce(lambda a, b: (a & b) if op == "and" else (a | b), parts)
    if op == "not":
        return ~expression(args[0], schema)
    column, t = pc.field(args[0]), schema.field(args[0]).type
    compare = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}
    if op in compare:
        return getattr(pc, compare[op])(column, literal(args[1], t))
    if op in ("in", "not_in"):
        if not args[1]:
            return pc.scalar(op == "not_in")
        if op == "in":
            return functools.reduce(lambda a, b: a | b, [column == literal(v, t) for v in args[1]])
        return functools.reduce(lambda a, b: a & b, [column != literal(v, t) for v in args[1]])
    if op == "is_null":
        return column.is_null()
    if op == "not_null":
        return column.is_valid()
    assert op == "starts_with"
    return pc.starts_with(column, pattern=args[1])


class SpecOnlyReader:
    """A conformance adapter for reading, written from spec/ alone (no lakefmt import)."""

    def open_table(self, metadata_path: str) -> dict[str, Any]:
        meta = json.loads(Path(metadata_path).read_text())  # META-2: invalid JSON raises
        missing = [f for f in META_FIELDS if f not in meta]
        if missing:
            raise ValueError(f"META-1: missing {missing}")
        if meta["format-version"] not in (1, 2):
            raise ValueError(f"FMT-2: format-version {meta['format-version']}")
        inline = {s["snapshot-id"] for s in meta["snapshots"]}
        if meta["current-snapshot-id"] is not None and meta["current-snapshot-id"] not in inline:
            raise ValueError("META-3, META-16: the current snapshot is not in the metadata file")
        meta = self._with_history(meta, Path(metadata_path).parent.parent)
        schema_ids = {s["schema-id"] for s in meta["schemas"]}
        snapshot_ids = {s["snapshot-id"] for s in meta["snapshots"]}
        if meta["current-schema-id"] not in schema_ids or any(s["schema-id"] not in schema_ids
                                                             for s in meta["snapshots"]):
            raise ValueError("META-3: unknown schema")
        if meta["current-snapshot-id"] is not None and meta["current-snapshot-id"] not in snapshot_ids:
            raise ValueError("META-3: unknown current snapshot")
        return {"meta": meta, "location": str(Path(metadata_path).parent.parent)}  # LAYOUT-3

    @staticmethod
    def _with_history(meta: dict[str, Any], location: Path) -> dict[str, Any]:
        """META-13 … META-15: the snapshots and log entries of the history files come first, in order."""
        history = meta.get("snapshot-history", [])
        if history and meta["format-version"] != 2:
            raise ValueError("META-13: snapshot-history in a version 1 metadata file")
        snapshots, log = [], []
        for ref in history:
            doc = json.loads((location / ref["path"]).read_text())  # missing or not JSON: raises
            if sorted(doc) != ["format-version", "snapshot-log", "snapshots", "table-uuid"] \
                    or doc["format-version"] != 2 or doc["table-uuid"] != meta["table-uuid"] \
                    or len(doc["snapshots"]) != ref["snapshot-count"] \
                    or len(doc["snapshot-log"]) != ref["log-entry-count"]:
                raise ValueError(f"META-15: history file {ref['path']} does not match its reference")
            snapshots += doc["snapshots"]
            log += doc["snapshot-log"]
        return {**meta, "snapshots": snapshots + meta["snapshots"], "snapshot-log": log + meta["snapshot-log"]}

    def current_snapshot_id(self, h: dict[str, Any]) -> int | None:
        return h["meta"]["current-snapshot-id"]

    def snapshots(self, h: dict[str, Any]) -> list[dict[str, Any]]:
        return h["meta"]["snapshots"]

    def snapshot_as_of(self, h: dict[str, Any], timestamp_ms: int) -> int:
        entries = [e for e in h["meta"]["snapshot-log"] if e["timestamp-ms"] <= timestamp_ms]
        self._snapshot(h, entries[-1]["snapshot-id"])  # READ-2: raises when none, or expired
        return entries[-1]["snapshot-id"]

    def _snapshot(self, h: dict[str, Any], snapshot_id: int | None) -> dict[str, Any] | None:
        wanted = h["meta"]["current-snapshot-id"] if snapshot_id is None else snapshot_id
        if wanted is None:
            return None
        return next(s for s in h["meta"]["snapshots"] if s["snapshot-id"] == wanted)  # StopIteration: no such

    def _read_schema(self, h: dict[str, Any], snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
        meta = h["meta"]
        schema_id = meta["current-schema-id"] if snapshot is None or \
            snapshot["snapshot-id"] == meta["current-snapshot-id"] else snapshot["schema-id"]  # READ-3
        return next(s for s in meta["schemas"] if s["schema-id"] == schema_id)["fields"]

    def _live(self, h: dict[str, Any], snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
        if snapshot is None:
            return []
        loc = h["location"]
        entries = []
        for m in pq.read_table(f"{loc}/{snapshot['manifest-list']}").to_pylist():
            entries += [e for e in pq.read_table(f"{loc}/{m['manifest_path']}").to_pylist() if e["status"] != 2]
        paths = [e["file_path"] for e in entries]
        if len(set(paths)) != len(paths):
            raise ValueError("READ-9: a data file is live twice")
        return entries

    def plan_files(self, h: dict[str, Any], snapshot_id: int | None = None, filter: Any = None) -> list[str]:
        return [e["file_path"] for e in self._live(h, self._snapshot(h, snapshot_id))]  # no pruning (READ-4)

    def scan(self, h: dict[str, Any], snapshot_id: int | None = None, filter: Any = None,
             columns: list[str] | None = None) -> pa.Table:
        snapshot = self._snapshot(h, snapshot_id)
        fields = self._read_schema(h, snapshot)
        schema = pa.schema([pa.field(f["name"], arrow_type(f["type"])) for f in fields])
        tables = [self._read_file(h, e, fields, schema) for e in self._live(h, snapshot)]
        table = pa.concat_tables(tables) if tables else schema.empty_table()
        if filter is not None:
            table = table.filter(expression(filter.tree, schema))  # READ-8: only TRUE rows
        return table.select(columns) if columns is not None else table

    def _read_file(self, h: dict[str, Any], entry: dict[str, Any], fields: list[dict[str, Any]],
                   schema: pa.Schema) -> pa.Table:
        data = pq.read_table(f"{h['location']}/{entry['file_path']}")
        ids = [int(f.metadata[b"PARQUET:field_id"]) for f in data.schema if f.metadata and
               b"PARQUET:field_id" in f.metadata]
        if not ids or len(set(ids)) != len(ids) or data.num_rows != entry["record_count"]:
            raise ValueError("READ-12: field ids or row count do not match the manifest entry")
        by_id = {int(f.metadata[b"PARQUET:field_id"]): i for i, f in enumerate(data.schema)
                 if f.metadata and b"PARQUET:field_id" in f.metadata}
        columns = []
        for field, target in zip(fields, schema):
            if field["id"] not in by_id:
                columns.append(pa.nulls(data.num_rows, target.type))  # READ-6: added later
                continue
            column = data.column(by_id[field["id"]])
            if not widens(spelling(column.type), field["type"]):
                raise ValueError(f"READ-6: {column.type} does not widen to {field['type']}")
            columns.append(column.cast(target.type))
        table = pa.Table.from_arrays(columns, schema=schema)
        vector = entry.get("deletion_vector")
        if vector is not None:  # READ-14
            with open(f"{h['location']}/{vector['path']}", "rb") as f:
                f.seek(vector["offset"])
                blob = f.read(vector["length"])
            deleted = deleted_positions(blob, entry["record_count"], vector["cardinality"])
            table = table.filter(pa.array([p not in deleted for p in range(table.num_rows)]))
        return table


def ids(kind: str) -> list[str]:
    return [c["id"] for c in CASES if c["kind"] == kind]


# Where lakefmt itself does not yet do what the spec says (the kit found these).
LAKEFMT_GAPS: dict[str, str] = {}  # case id -> why lakefmt fails it (strict xfail); empty: lakefmt passes all
LAKEFMT_ERROR_GAPS: dict[str, str] = {}


def _marked(case_ids: list[str], gaps: dict[str, str]) -> list[Any]:
    return [pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=gaps[i])) if i in gaps else i
            for i in case_ids]


@pytest.fixture(scope="module")
def lakefmt_results() -> dict[str, Any]:
    from lakefmt.conformance import run_kit
    from lakefmt.conformance.lakefmt_adapter import LakefmtAdapter

    return {r.case_id: r for r in run_kit(LakefmtAdapter(), KIT)}


@pytest.mark.parametrize("case_id", _marked([c["id"] for c in CASES], LAKEFMT_GAPS))
def test_lakefmt_passes_every_case(lakefmt_results: dict[str, Any], case_id: str) -> None:
    result = lakefmt_results[case_id]
    assert result.passed, [f"{c.name}: {c.detail}" for c in result.failures()] or result.error


@pytest.mark.parametrize("case_id", _marked(ids("negative"), {**LAKEFMT_GAPS, **LAKEFMT_ERROR_GAPS}))
def test_lakefmt_refuses_with_the_named_error(lakefmt_results: dict[str, Any], case_id: str) -> None:
    case = json.loads((KIT / "negative" / case_id / "case.json").read_text())
    assert case["error"] in lakefmt_results[case_id].raised


@pytest.mark.parametrize("case_id", ids("reader") + ids("negative"))
def test_a_spec_only_reader_passes(case_id: str) -> None:
    from lakefmt.conformance.runner import run_case

    result = run_case(SpecOnlyReader(), KIT / next(c["path"] for c in CASES if c["id"] == case_id))
    assert result.passed, [f"{c.name}: {c.detail}" for c in result.failures()] or result.error


class ReaderWithoutVectors(SpecOnlyReader):
    """A version 1 reader that wrongly reads version 2 tables: it ignores deletion vectors."""

    def _read_file(self, h: dict[str, Any], entry: dict[str, Any], fields: list[dict[str, Any]],
                   schema: pa.Schema) -> pa.Table:
        return super()._read_file(h, {**entry, "deletion_vector": None}, fields, schema)


def test_the_kit_catches_a_reader_that_returns_deleted_rows() -> None:
    from lakefmt.conformance.runner import run_case

    result = run_case(ReaderWithoutVectors(), KIT / "reader" / "r-delete-mor")
    assert result.status == "fail"
    failed = {c.name: c.detail for c in result.failures()}
    assert failed["rows: current snapshot"] == "100 rows, expected 91"
    assert "rows: snapshot 1" not in failed  # the snapshot before any delete reads the same
    assert not run_case(ReaderWithoutVectors(), KIT / "negative" / "n-dv-bad-crc").passed


def test_kit_counts_and_size() -> None:
    kinds = [c["kind"] for c in CASES]
    assert (kinds.count("reader"), kinds.count("negative")) >= (20, 12)
    assert (kinds.count("writer"), kinds.count("commit")) >= (5, 10)
    assert all(c["spec"] for c in CASES)
    size = sum(p.stat().st_size for p in KIT.rglob("*") if p.is_file())
    assert size < 4_000_000, f"the kit holds {size} bytes; keep it small"


def _generator() -> Any:
    """spec/conformance/generate.py as a module (it puts its folder on sys.path; taken off again here)."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("conformance_generate", KIT / "generate.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


def test_generator_reproduces_the_committed_kit(tmp_path: Path) -> None:
    generate = _generator()
    assert generate.case_list() == CASES  # the same cases, titles and spec IDs
    for c in CASES:
        assert (KIT / c["path"] / "case.json").is_file(), c["id"]
    # Names, ids and rows come from seeds: a regenerated case is the committed one, file for file.
    for case_id in ("r-schema-rename", "c-delete-delete", "n-dv-row-count"):
        folder = generate.generate_case(case_id, tmp_path)
        committed = KIT / folder.relative_to(tmp_path)
        assert (folder / "case.json").read_text() == (committed / "case.json").read_text()
        names = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
        assert names == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
        for name in names:
            if name.suffix == ".parquet" and "metadata" not in name.parts:  # data, inputs, expected rows
                assert (folder / name).read_bytes() == (committed / name).read_bytes(), name


def test_cli_prints_the_table_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    from lakefmt.cli import main

    assert main(["conformance", "--kit", str(KIT), "--case", "r-empty", "--case", "n-format-version-3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"reader\s+r-empty\s+PASS\s+READ-1", out)
    assert re.search(r"negative\s+n-format-version-3\s+PASS\s+FMT-2 META-1", out)
    assert "2 cases: 2 passed, 0 failed, 0 errors" in out
    # The spec-only reader has no writer methods: writer cases are errors, and the exit status says so.
    assert main(["conformance", "--kit", str(KIT), "--adapter", f"{__name__}:SpecOnlyReader",
                 "--case", "w-append"]) == 3
    out = capsys.readouterr().out
    assert "w-append" in out and "ERROR" in out and "the adapter has no create_table" in out
    assert main(["conformance", "--adapter", "no_such_module:Adapter", "--kit", str(KIT)]) == 2
    assert "cannot import adapter module 'no_such_module'" in capsys.readouterr().err
