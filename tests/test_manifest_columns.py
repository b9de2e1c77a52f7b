"""The column-wise manifest decoder on every kind of partition value and per-file column (MAN-2, MAN-4);
the codecs and encodings manifests are written with and read in (MAN-12).

Planning decodes a manifest's partition tuples through dictionary-encoded columns and
passes a column that holds one value for every row as that value. Each case writes a real
manifest file with :func:`write_manifest` and compares what :func:`read_manifest_contents`
decodes with a row-by-row decoding of the same Parquet rows.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakefmt.conversions import to_physical
from lakefmt.deletion_vectors import DeletionVector
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile, EntryStatus, ManifestEntry
from lakefmt.manifest_io import (
    _read_parquet,
    read_manifest_contents,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from lakefmt.partitioning import parse_partition_by
from lakefmt.schema import Schema

SCHEMA = Schema.from_arrow(pa.schema([
    ("s", pa.string()), ("i", pa.int64()), ("f", pa.float64()), ("b", pa.bool_()), ("d", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")), ("dec", pa.decimal128(9, 2)), ("bin", pa.binary()),
]))
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

# Partition values of the rows, per source column (physical form, TYPE-2): repeats, nulls, -0.0 and NaN.
VALUES: dict[str, list[Any]] = {
    "s": ["a", "b", "a", None, "b", "a"],
    "i": [1, 2, 1, None, 2, 1],
    "f": [0.0, -0.0, math.nan, None, 1.5, 0.0],
    "b": [True, False, True, None, False, True],
    "d": [20454, 20455, 20454, None, 20455, 20454],
    "ts": [20454 * 86_400_000_000, 1, 20454 * 86_400_000_000, None, 2, 1],
    "dec": [Decimal("1.25"), Decimal("-3.00"), Decimal("1.25"), None, Decimal("1.25"), Decimal("-3.00")],
    "bin": [b"\x00", b"\x01\x02", b"\x00", None, b"", b"\x00"],
}


def write(tmp_path: Path, partition_by: list[str], files: list[DataFile], *, spec_id: int = 0,
          format_version: int = 2) -> tuple[FileIO, str, Any]:
    spec = parse_partition_by(partition_by, SCHEMA, spec_id=spec_id)
    io = FileIO(str(tmp_path))
    location = f"{tmp_path}/m.parquet"
    entries = [ManifestEntry(EntryStatus.ADDED if i % 3 else EntryStatus.EXISTING, f, 7 if i % 3 == 0 else None,
                             3 if i % 3 == 0 else None) for i, f in enumerate(files)]
    write_manifest(io, location, "m.parquet", entries, spec, SCHEMA, snapshot_id=9, sequence_number=4,
                   format_version=format_version)
    return io, location, spec


def files_for(partition_by: list[str], columns: list[str], *, times: int = 1, **fields: Any) -> list[DataFile]:
    """A file per row of VALUES (``times`` over: a few rows decode a row at a time, 64 or more by column)."""
    n = len(VALUES["s"])
    return [DataFile(f"data/f{k}.parquet", tuple(VALUES[c][k % n] for c in columns), 10 + k, 100 + k,
                     **{name: value[k % n] if isinstance(value, list) else value for name, value in fields.items()})
            for k in range(n * times)]


def row_wise(io: FileIO, location: str, spec: Any) -> list[tuple[Any, ...]]:
    """The reference: one dict per row (``to_pylist``), as MAN-2 describes the columns."""
    types = [t for _, t in spec.partition_type(SCHEMA)]
    out = []
    for r in _read_parquet(io, location, "manifest").to_pylist():
        part = r.get("partition") or {}
        out.append((r["status"], r["snapshot_id"], r["sequence_number"], DataFile(
            r["file_path"], tuple(to_physical(t, part.get(pf.name)) for pf, t in zip(spec.fields, types)),
            r["record_count"], r["file_size_bytes"], spec.spec_id, r["file_format"],
            dict(r["value_counts"] or ()), dict(r["null_value_counts"] or ()), dict(r["lower_bounds"] or ()),
            dict(r["upper_bounds"] or ()), r.get("sort_order_id"),
            DeletionVector(**r["deletion_vector"]) if r.get("deletion_vector") else None)))
    return out


def described(status: int, snapshot_id: Any, sequence: Any, f: DataFile) -> tuple[Any, ...]:
    """Every field of an entry, with NaN and the sign of a float zero made comparable."""
    def same(v: Any) -> Any:
        if isinstance(v, float):
            return ("nan",) if math.isnan(v) else (v, math.copysign(1.0, v))
        if isinstance(v, tuple):
            return tuple(same(x) for x in v)
        return v

    return (status, snapshot_id, sequence, type(f), [same(getattr(f, x.name)) for x in dataclasses.fields(f)])


def decoded(io: FileIO, location: str, spec: Any) -> list[tuple[Any, ...]]:
    c = read_manifest_contents(io, location, spec, SCHEMA)
    return [described(*row) for row in zip(c.statuses, c.snapshot_ids, c.sequence_numbers, c.data_files)]


@pytest.mark.parametrize("times", [1, 11])
@pytest.mark.parametrize("column", sorted(VALUES))
def test_identity_partition_of_each_type_decodes_row_by_row(tmp_path: Path, column: str, times: int) -> None:
    io, location, spec = write(tmp_path, [column], files_for([column], [column], times=times))
    assert decoded(io, location, spec) == [described(*r) for r in row_wise(io, location, spec)]


@pytest.mark.parametrize("times", [1, 11])
def test_float_partition_keeps_the_sign_of_zero_and_nan_of_each_row(tmp_path: Path, times: int) -> None:
    io, location, spec = write(tmp_path, ["f"], files_for(["f"], ["f"], times=times))
    got = [f.partition[0] for f in read_manifest_contents(io, location, spec, SCHEMA).data_files][-6:]
    assert [math.copysign(1.0, v) if v == 0 else v for v in got[:2]] == [1.0, -1.0]
    assert math.isnan(got[2]) and got[3] is None and got[4:] == [1.5, 0.0]


@pytest.mark.parametrize("times", [1, 11])
def test_several_partition_fields_and_transforms(tmp_path: Path, times: int) -> None:
    io, location, spec = write(tmp_path, ["s", "bucket(4, i)", "b", "truncate(1, bin)"],
                               files_for([], ["s", "i", "b", "bin"], times=times))
    contents = read_manifest_contents(io, location, spec, SCHEMA)
    assert decoded(io, location, spec) == [described(*r) for r in row_wise(io, location, spec)]
    if times > 1:  # decoded by column: one tuple per distinct partition, shared by its files
        assert len({id(f.partition) for f in contents.data_files}) == len({f.partition for f in contents.data_files})


@pytest.mark.parametrize("times", [1, 11])
def test_unpartitioned_manifest(tmp_path: Path, times: int) -> None:
    io, location, spec = write(tmp_path, [], files_for([], [], times=times))
    assert decoded(io, location, spec) == [described(*r) for r in row_wise(io, location, spec)]
    assert all(f.partition == () for f in read_manifest_contents(io, location, spec, SCHEMA).data_files)


@pytest.mark.parametrize("fields", [
    {"sort_order_id": 3, "file_format": "orc"},                      # one value for every row, not the defaults
    {"sort_order_id": [None, 1, None, 2, 1, None]},                  # differs per row
    {"file_format": ["parquet", "orc", "parquet", "parquet", "avro", "parquet"]},
    {"deletion_vector": [None, DeletionVector("dv/a.bin", 4, 20, 2), None, None, None, None]},
])
@pytest.mark.parametrize("times", [1, 11])
def test_per_file_columns_the_same_or_per_row(tmp_path: Path, fields: dict[str, Any], times: int) -> None:
    io, location, spec = write(tmp_path, ["s"], files_for(["s"], ["s"], times=times, **fields), spec_id=2)
    got = read_manifest_contents(io, location, spec, SCHEMA).data_files
    assert decoded(io, location, spec) == [described(*r) for r in row_wise(io, location, spec)]
    assert {f.spec_id for f in got} == {2}


def test_files_read_from_a_manifest_copy_pickle_and_replace_with_every_field(tmp_path: Path) -> None:
    io, location, spec = write(tmp_path, ["s"], files_for(["s"], ["s"]))
    f = read_manifest_contents(io, location, spec, SCHEMA).data_files[1]
    want = [getattr(f, x.name) for x in dataclasses.fields(f)]
    assert [getattr(pickle.loads(pickle.dumps(f)), x.name) for x in dataclasses.fields(f)] == want
    moved = dataclasses.replace(f, path="data/other.parquet")
    assert (moved.path, moved.partition, moved.spec_id, moved.file_format, moved.sort_order_id,
            moved.deletion_vector) == ("data/other.parquet", ("b",), 0, "parquet", None, None)


def test_empty_manifest(tmp_path: Path) -> None:
    io, location, spec = write(tmp_path, ["s"], [])
    contents = read_manifest_contents(io, location, spec, SCHEMA)
    assert len(contents) == 0 and contents.live_files == []


def test_date_and_timestamp_values_are_physical(tmp_path: Path) -> None:
    io, location, spec = write(tmp_path, ["d", "ts"], files_for([], ["d", "ts"]))
    first = read_manifest_contents(io, location, spec, SCHEMA).data_files[0].partition
    assert first == (20454, 20454 * 86_400_000_000)
    assert date(1970, 1, 1).toordinal() + first[0] == date(2026, 1, 1).toordinal()
    assert T0.timestamp() * 1_000_000 == first[1]


def codecs_and_dictionaries(location: str) -> tuple[set[str], bool]:
    meta = pq.ParquetFile(location).metadata
    chunks = [meta.row_group(g).column(c) for g in range(meta.num_row_groups) for c in range(meta.num_columns)]
    return ({c.compression for c in chunks},
            any(c.has_dictionary_page or "RLE_DICTIONARY" in c.encodings for c in chunks))


@pytest.mark.parametrize(("n", "codec"), [(1, "SNAPPY"), (2047, "SNAPPY"), (2048, "ZSTD")])
def test_manifests_and_lists_are_written_without_dictionaries_codec_by_size(tmp_path: Path, n: int,
                                                                            codec: str) -> None:
    """MAN-12: Snappy below 2,048 rows, ZSTD from 2,048 on, no dictionary pages, no footer statistics."""
    files = [DataFile(f"data/f{k}.parquet", (f"p{k % 3}",), 1, 10, lower_bounds={1: b"a"}) for k in range(n)]
    io, location, spec = write(tmp_path, ["s"], files)
    assert codecs_and_dictionaries(location) == ({codec}, False)
    meta = pq.ParquetFile(location).metadata
    assert not any(meta.row_group(0).column(c).is_stats_set for c in range(meta.num_columns))
    assert [f.path for f in read_manifest_contents(io, location, spec, SCHEMA).data_files] == [f.path for f in files]
    manifest = write_manifest(io, f"{tmp_path}/again.parquet", "again.parquet",
                              [ManifestEntry(EntryStatus.ADDED, f) for f in files], spec, SCHEMA, snapshot_id=1,
                              sequence_number=1)
    write_manifest_list(io, f"{tmp_path}/list.parquet", [manifest] * n)
    assert codecs_and_dictionaries(f"{tmp_path}/list.parquet") == ({codec}, False)
    assert len(read_manifest_list(io, f"{tmp_path}/list.parquet")) == n


@pytest.mark.parametrize("options", [{"compression": "gzip"}, {"compression": "none", "use_dictionary": True},
                                     {"compression": "zstd", "write_statistics": True}])
def test_manifests_of_any_codec_and_encoding_are_read(tmp_path: Path, options: dict[str, Any]) -> None:
    """MAN-12: readers accept any codec and encoding, with or without footer statistics."""
    io, location, spec = write(tmp_path, ["s", "i"], files_for([], ["s", "i"]))
    other = f"{tmp_path}/other.parquet"
    pq.write_table(pq.read_table(location), other, **options)
    assert decoded(io, other, spec) == decoded(io, location, spec)


@pytest.mark.parametrize("pick", ["all-in-order", "subset-of-two-manifests", "with-a-new-file"])
def test_rewriting_files_read_from_manifests_writes_the_bytes_of_decoded_files(tmp_path: Path, pick: str) -> None:
    """Statistics nobody decoded are copied from the manifest they were read from (MAN-6, MAN-7): the
    rewritten manifest is byte for byte the one written from the same files with every map decoded."""
    stats = {"value_counts": {1: 6, 2: 6}, "null_value_counts": [{1: 0}, {}, {1: 2, 2: 1}] * 2,
             "lower_bounds": [{1: b"a", 2: b"\x01"}, {}, {2: b"\x00\x00"}] * 2,
             "upper_bounds": [{1: b"z"}, {1: b"q", 2: b"\xff"}, {}] * 2}
    sources = []
    for k in range(2):
        (tmp_path / f"src{k}").mkdir()
        sources.append(write(tmp_path / f"src{k}", ["s"], files_for(["s"], ["s"], times=11, **stats)))
    spec = sources[0][2]

    def entries() -> list[ManifestEntry]:
        files = [read_manifest_contents(io, location, spec, SCHEMA).data_files for io, location, _ in sources]
        chosen = {"all-in-order": files[0], "subset-of-two-manifests": files[1][5::3] + files[0][::-2],
                  "with-a-new-file": files[0][:4] + [DataFile("data/new.parquet", ("a",), 1, 2,
                                                              value_counts={1: 1})]}[pick]
        return [ManifestEntry(EntryStatus.DELETED if i % 2 else EntryStatus.EXISTING, f, 5, 3)
                for i, f in enumerate(chosen)]

    io = FileIO(str(tmp_path))
    lazy, eager = entries(), entries()
    for e in eager:
        e.data_file.value_counts  # noqa: B018 - decodes the four maps of the row
    out = []
    for name, rows in (("lazy", lazy), ("eager", eager)):
        out.append(write_manifest(io, f"{tmp_path}/{name}.parquet", "m.parquet", rows, spec, SCHEMA,
                                  snapshot_id=9, sequence_number=4, format_version=2))
    assert out[0] == out[1]
    assert (tmp_path / "lazy.parquet").read_bytes() == (tmp_path / "eager.parquet").read_bytes()
    assert decoded(io, f"{tmp_path}/lazy.parquet", spec) == [described(int(e.status), e.snapshot_id, e.sequence_number,
                                                                       e.data_file) for e in eager]
