"""Data-file checks of ``lakefmt check``: what a file's own footer and rows say against its manifest entry.

For one data file: the columns carry field ids (WRITE-1); ``record_count`` equals the
footer's row count (WRITE-6); value and null counts equal the footer's (MAN-6); the
recorded bounds hold every value the footer's statistics show (MAN-7); and every row
has the recorded partition tuple (PART-9), computed from the file's own rows.

Bounds are compared with the tightest bounds the footer allows after truncation
(TYPE-7), computed by the same function writers use (:func:`lakefmt.footer.data_file_from_footer`):
any valid lower bound is at most that, any valid upper bound at least that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt.conversions import from_bytes, to_physical
from lakefmt.errors import LakefmtError
from lakefmt.footer import data_file_from_footer
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Field, Schema, arrow_field_id


@dataclass(frozen=True)
class Violation:
    """One way a table breaks the spec: the requirement ID, what is wrong, and where."""

    requirement: str
    message: str
    path: str | None = None

    def __str__(self) -> str:
        return f"{self.requirement}: {self.message}" + (f" [{self.path}]" if self.path else "")


def check_data_file(io: FileIO, location: str, f: DataFile, spec: PartitionSpec, schema: Schema
                    ) -> list[Violation]:
    """Footer and row checks of one data file (its existence and size are checked by the caller)."""
    out: list[Violation] = []

    def bad(requirement: str, message: str) -> None:
        out.append(Violation(requirement, message, f.path))

    try:
        with io.open_input(f"{location}/{f.path}") as source:
            parquet = pq.ParquetFile(source)
            footer = parquet.metadata
            file_schema = parquet.schema_arrow
            names_by_id = {}
            for af in file_schema:
                fid = arrow_field_id(af)
                if fid is None:
                    bad("WRITE-1", f"column {af.name!r} carries no PARQUET:field_id")
                else:
                    names_by_id[fid] = af.name
            sources = [pf.source_id for pf in spec.fields if pf.source_id in names_by_id]
            rows = parquet.read(columns=[names_by_id[i] for i in dict.fromkeys(sources)]) if sources else None
    except (OSError, pa.ArrowInvalid) as exc:
        bad("READ-10", f"data file cannot be read as Parquet: {exc}")
        return out
    if footer.num_rows != f.record_count:
        bad("WRITE-6", f"record_count is {f.record_count} but the file holds {footer.num_rows} rows")
    out += [Violation(r, m, f.path) for r, m in _check_stats(f, footer, names_by_id, schema, spec)]
    out += [Violation("PART-9", m, f.path) for m in _check_partition(f, rows, names_by_id, spec, schema)]
    return out


def _check_stats(f: DataFile, footer: pq.FileMetaData, names_by_id: dict[int, str], schema: Schema,
                 spec: PartitionSpec) -> list[tuple[str, str]]:
    """MAN-6 counts and MAN-7 bounds against the footer's statistics."""
    # The footer's columns under the file's own names, typed as the table types them now (widening, SCHEMA-6).
    fields = [Field(fid, name, current.type) for fid, name in names_by_id.items()
              if (current := schema.field_by_id(fid)) is not None]
    try:
        expected = data_file_from_footer(f.path, f.partition, f.file_size_bytes, footer,
                                         Schema(tuple(fields)), spec, None)
    except (LakefmtError, ValueError, TypeError) as exc:
        return [("WRITE-1", f"the footer's columns cannot be matched to the schema: {exc}")]
    out: list[tuple[str, str]] = []
    for name, recorded, actual in (("value_counts", f.value_counts, expected.value_counts),
                                   ("null_value_counts", f.null_value_counts, expected.null_value_counts)):
        for fid, count in recorded.items():
            if fid in actual and actual[fid] != count:
                out.append(("MAN-6", f"{name}[{fid}] is {count} but the footer says {actual[fid]}"))
    for fid, raw in f.lower_bounds.items():
        out += _bound_violation("lower", fid, raw, expected.lower_bounds.get(fid), expected, schema)
    for fid, raw in f.upper_bounds.items():
        out += _bound_violation("upper", fid, raw, expected.upper_bounds.get(fid), expected, schema)
    return out


def _bound_violation(kind: str, fid: int, raw: bytes, tightest: bytes | None, expected: DataFile,
                     schema: Schema) -> list[tuple[str, str]]:
    field = schema.field_by_id(fid)
    if field is None:
        return []  # a dropped column: readers ignore it (MAN-6)
    try:
        recorded = from_bytes(field.type, raw)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        return [("TYPE-6", f"{kind} bound of field {fid} cannot be decoded as {field.type}: {exc}")]
    if tightest is None:
        values, nulls = expected.value_counts.get(fid), expected.null_value_counts.get(fid)
        if values is not None and nulls is not None and values == nulls:
            return [("MAN-7", f"{kind} bound of field {fid} is recorded but the column holds only nulls")]
        return []  # the footer has no statistics to compare with
    actual = from_bytes(field.type, tightest)
    try:
        wrong = recorded > actual if kind == "lower" else recorded < actual
    except TypeError:
        return []
    if wrong:
        side = "above the smallest" if kind == "lower" else "below the largest"
        return [("MAN-7", (f"{kind} bound {recorded!r} of field {fid} ({field.name}) is {side} value "
                          f"in the file ({actual!r})"))]
    return []


def _check_partition(f: DataFile, rows: pa.Table | None, names_by_id: dict[int, str], spec: PartitionSpec,
                     schema: Schema) -> list[str]:
    """Every row's partition tuple, computed from the file's own values, is the recorded one (PART-9)."""
    if len(f.partition) != len(spec.fields):
        return [(f"recorded partition {f.partition!r} has {len(f.partition)} values; spec {spec.spec_id} "
                f"has {len(spec.fields)} fields")]
    out = []
    for pf, recorded in zip(spec.fields, f.partition):
        source = schema.field_by_id(pf.source_id)
        if source is None:
            continue
        if rows is None or pf.source_id not in names_by_id:
            if recorded is not None and f.record_count:
                out.append(f"partition field {pf.name} is {recorded!r} but the file has no column "
                           f"{source.name} (all its rows are null)")
            continue
        result_type = pf.transform.result_type(source.type)
        try:
            values = pc.unique(pf.transform.apply(rows.column(names_by_id[pf.source_id]), source.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, LakefmtError) as exc:
            out.append(f"partition field {pf.name} cannot be computed from column {source.name}: {exc}")
            continue
        found: list[Any] = [to_physical(result_type, v) for v in values.to_pylist()]
        wrong = [v for v in found if v != recorded]
        if wrong:
            out.append(f"partition field {pf.name} is recorded as {recorded!r} but rows of the file give "
                       f"{wrong[:3]!r}")
    return out
