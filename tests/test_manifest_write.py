"""The manifest writer builds its columns a list at a time, from buffers (spec/manifests.md MAN-2, MAN-4, DV-5).

Each case writes a real manifest with :func:`write_manifest` and compares the Parquet
table read back with the reference: one dict per entry, as MAN-2 tables the columns,
turned into Arrow by ``pa.Table.from_pylist``. The Arrow builders of :mod:`lakefmt.arrow_values`
are compared with ``pa.array`` on the kinds of values metadata holds.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakefmt import arrow_values
from lakefmt.deletion_vectors import DeletionVector
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile, EntryStatus, ManifestEntry
from lakefmt.manifest_io import DELETION_VECTOR_TYPE, manifest_schema, read_manifest_contents, write_manifest
from lakefmt.partitioning import parse_partition_by
from tests.test_manifest_columns import SCHEMA, VALUES, files_for, write


def reference(entries: list[ManifestEntry], spec: Any, format_version: int) -> pa.Table:
    """The manifest's rows built one dict per entry (MAN-2), the partition as a dict by field name (MAN-4)."""
    rows = []
    for e in entries:
        f = e.data_file
        row: dict[str, Any] = {
            "status": int(e.status), "snapshot_id": e.snapshot_id, "sequence_number": e.sequence_number,
            "file_path": f.path, "file_format": f.file_format,
            "partition": {pf.name: v for pf, v in zip(spec.fields, f.partition)},
            "record_count": f.record_count, "file_size_bytes": f.file_size_bytes,
            "value_counts": list(f.value_counts.items()), "null_value_counts": list(f.null_value_counts.items()),
            "lower_bounds": list(f.lower_bounds.items()), "upper_bounds": list(f.upper_bounds.items()),
            "sort_order_id": f.sort_order_id,
        }
        if format_version >= 2:
            dv = f.deletion_vector
            row["deletion_vector"] = None if dv is None else {
                "path": dv.path, "offset": dv.offset, "length": dv.length, "cardinality": dv.cardinality}
        rows.append(row)
    schema = manifest_schema(spec, SCHEMA, format_version)
    return pa.Table.from_pylist(rows, schema=schema)


def written(tmp_path: Path, entries: list[ManifestEntry], partition_by: list[str], format_version: int = 2
            ) -> tuple[pa.Table, pa.Table]:
    spec = parse_partition_by(partition_by, SCHEMA)
    location = f"{tmp_path}/m-{len(list(tmp_path.iterdir()))}.parquet"
    write_manifest(FileIO(str(tmp_path)), location, "m.parquet", entries, spec, SCHEMA, snapshot_id=9,
                   sequence_number=4, format_version=format_version)
    table = pq.read_table(location)
    return table.replace_schema_metadata(None), reference(entries, spec, format_version)


def same(got: pa.Table, want: pa.Table) -> bool:
    """Equal schemas and values; NaN equal to NaN, -0.0 told from 0.0 (``Table.equals`` has NaN unequal)."""
    return got.schema == want.schema and repr(got.to_pylist()) == repr(want.to_pylist())


def entries_of(files: list[DataFile]) -> list[ManifestEntry]:
    statuses = list(EntryStatus)
    return [ManifestEntry(statuses[i % 3], f, None if i % 2 else 11 + i, None if i % 4 else 2)
            for i, f in enumerate(files)]


@pytest.mark.parametrize("column", sorted(VALUES))
def test_each_partition_type_is_written_as_the_row_by_row_reference(tmp_path: Path, column: str) -> None:
    got, want = written(tmp_path, entries_of(files_for([column], [column], times=3)), [column])
    assert same(got, want)


def test_several_fields_statistics_sort_orders_and_vectors_as_the_reference(tmp_path: Path) -> None:
    files = files_for([], ["s", "i", "b", "bin"], times=2, sort_order_id=[None, 1, 2, None, 0, 1],
                      value_counts={1: 5, 2: 7}, lower_bounds={1: b"a"}, upper_bounds={1: b"z", 2: b"\x01"})
    files = [DataFile(f.path, f.partition, f.record_count, f.file_size_bytes, f.spec_id, f.file_format,
                      f.value_counts, f.null_value_counts, f.lower_bounds, f.upper_bounds, f.sort_order_id,
                      DeletionVector(f"dv/{k}.bin", 4 * k, 40, k + 1) if k % 3 == 0 else None)
             for k, f in enumerate(files)]
    got, want = written(tmp_path, entries_of(files), ["s", "bucket(4, i)", "b", "truncate(1, bin)"])
    assert same(got, want)
    assert got.column("deletion_vector").null_count == len(files) - len(files[::3])


def test_a_short_partition_tuple_leaves_the_missing_fields_null(tmp_path: Path) -> None:
    files = [DataFile("data/a.parquet", ("x",), 1, 10), DataFile("data/b.parquet", ("y", 3), 1, 10)]
    got, want = written(tmp_path, entries_of(files), ["s", "i"])
    assert same(got, want)
    assert got.column("partition").to_pylist() == [{"s": "x", "i": None}, {"s": "y", "i": 3}]


def test_every_entry_deleted_from_a_read_manifest_copies_its_statistics(tmp_path: Path) -> None:
    """A replace commit's rewrite: every entry of a manifest it read becomes DELETED, the statistics copied."""
    io, location, spec = write(tmp_path, ["s"], files_for(["s"], ["s"], times=11, value_counts={1: 3},
                                                          lower_bounds={1: b"a"}, upper_bounds={1: b"q"}))
    contents = read_manifest_contents(io, location, spec, SCHEMA)
    deleted = [ManifestEntry(EntryStatus.DELETED, f, 99, 3) for f in contents.data_files]
    assert all("_stats" in f.__dict__ for f in contents.data_files)  # not decoded: copied as stored
    got, want = written(tmp_path, deleted, ["s"])
    assert same(got, want)
    assert set(got.column("status").to_pylist()) == {int(EntryStatus.DELETED)}


def test_a_vector_in_a_version_1_manifest_is_refused(tmp_path: Path) -> None:
    files = [DataFile("data/a.parquet", ("x",), 1, 10),
             DataFile("data/b.parquet", ("y",), 1, 10, deletion_vector=DeletionVector("dv/b.bin", 0, 8, 1))]
    with pytest.raises(ValueError, match="data/b.parquet has a deletion vector"):
        written(tmp_path, entries_of(files), ["s"], format_version=1)


class _Kind(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(("values", "arrow_type"), [
    ([1, None, 3], pa.int64()),
    ([_Kind.ONE, 2], pa.int32()),
    ([True, None, False], pa.bool_()),
    ([None, None], pa.int32()),
    (["a", None, "é"], pa.string()),
    ([b"x", None, bytearray(b"y"), memoryview(b"z")], pa.binary()),
    ([1.5, None, -0.0], pa.float64()),
    ([None, {"path": "p", "offset": 1, "length": 2, "cardinality": 3}], DELETION_VECTOR_TYPE),
    ([None] * 5, DELETION_VECTOR_TYPE),
    ([[(1, 2)], None, []], pa.map_(pa.int32(), pa.int64())),
    ([{"a": 1, "b": None}, {"a": None, "b": "x"}], pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ([], pa.string()),
])
def test_arrow_builders_equal_pa_array(values: list[Any], arrow_type: pa.DataType) -> None:
    built = arrow_values.array(values, arrow_type)
    assert built.equals(pa.array(values, arrow_type))
    assert built.to_pylist() == pa.array(values, arrow_type).to_pylist()
