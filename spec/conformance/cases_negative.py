"""Negative cases: tables damaged after their commits, which a conforming reader must refuse.

Each case builds a sound table, copies it into the kit, damages the copy in one way, and
checks that lakefmt refuses it with the error the spec names. The runner accepts any
exception from another implementation and reports its type.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _build import TableBuild, case, rng_for
from kit_rows import EVENTS_SCHEMA, events

from lakefmt.conformance.lakefmt_adapter import LakefmtAdapter
from lakefmt.io import FileIO
from lakefmt.metadata import read_metadata
from lakefmt.scan import DataScan

Damage = Callable[["Kit"], None]
GAPS: list[str] = []  # refusals by lakefmt with another error than the spec names, reported by generate.py


class Kit:
    """The copied table of a negative case, with the paths a damage needs."""

    def __init__(self, folder: Path, metadata_rel: str) -> None:
        self.folder, self.metadata_path = folder, folder / metadata_rel
        self.meta = read_metadata(FileIO(str(folder / "table")), str(self.metadata_path))
        self.files = DataScan.create(FileIO(self.meta.location), self.meta).plan_files()

    @property
    def table(self) -> Path:
        return self.folder / "table"

    def json(self) -> dict[str, Any]:
        return json.loads(self.metadata_path.read_text())

    def write_json(self, doc: dict[str, Any]) -> None:
        self.metadata_path.write_text(json.dumps(doc))

    def manifest_list(self) -> Path:
        return self.table / self.meta.current_snapshot.manifest_list

    def first_manifest(self) -> Path:
        return self.table / pq.read_table(self.manifest_list()).column("manifest_path")[0].as_py()

    def data_file(self, index: int = 0) -> Path:
        return self.table / self.files[index].path

    def vector_file(self) -> tuple[Path, Any]:
        f = next(f for f in self.files if f.deletion_vector is not None)
        return self.table / f.deletion_vector.path, f


def base_table(b: TableBuild, *, deletes: bool = False) -> None:
    """One data file of 100 rows (with ``deletes``, one deleted by a vector of the positions encoding, DV-3)."""
    b.create(EVENTS_SCHEMA)
    b.append(events(100, rng_for(b.case_id)))
    if deletes:
        b.delete(["=", "id", 45])


def finish_negative(b: TableBuild, damage: Damage, error: str, *, deletes: bool = False) -> dict[str, Any]:
    base_table(b, deletes=deletes)
    metadata_rel = b.copy_table()
    damage(Kit(b.out, metadata_rel))
    return refused(b, metadata_rel, error)


def refused(b: TableBuild, metadata_rel: str, error: str, snapshot_id: int | None = None) -> dict[str, Any]:
    """The case.json of a damaged table, after checking that lakefmt refuses to read it with ``error``."""
    adapter = LakefmtAdapter()
    copy = b.tmp / "relocated"  # a fresh path: nothing of it is in lakefmt's in-process caches
    shutil.copytree(b.out / "table", copy / "table")
    try:
        adapter.scan(adapter.open_table(str(copy / metadata_rel)), snapshot_id=snapshot_id)
    except Exception as exc:  # noqa: BLE001 - lakefmt must refuse, with the named error
        if error not in [c.__name__ for c in type(exc).__mro__]:
            GAPS.append(f"{b.case_id}: lakefmt refuses with {type(exc).__name__}, the spec names {error}")
    else:
        GAPS.append(f"{b.case_id}: lakefmt reads the damaged table instead of failing with {error}")
    return {"metadata": metadata_rel, "read": {"snapshot-id": snapshot_id}, "error": error}


def rewrite_parquet(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    table = pq.read_table(path)
    pq.write_table(change(table), path)


def rewrite_blob(path: Path, offset: int, length: int, change: Callable[[bytearray], None]) -> None:
    data = bytearray(path.read_bytes())
    blob = data[offset:offset + length]
    change(blob)
    struct.pack_into("<I", blob, len(blob) - 4, zlib.crc32(bytes(blob[:-4])))
    data[offset:offset + length] = blob
    path.write_bytes(bytes(data))


def negative(case_id: str, title: str, spec: str, error: str, *, deletes: bool = False) -> Callable[[Damage], Damage]:
    def register(damage: Damage) -> Damage:
        case("negative", case_id, title, spec)(lambda b: finish_negative(b, damage, error, deletes=deletes))
        return damage
    return register


@negative("n-format-version-3", "format-version 3, which no reader implements", "FMT-2 META-1", "CorruptMetadataError")
def _format_version(kit: Kit) -> None:
    kit.write_json({**kit.json(), "format-version": 3})


@negative("n-invalid-json", "a metadata file cut short: not valid JSON", "META-2", "CorruptMetadataError")
def _invalid_json(kit: Kit) -> None:
    text = kit.metadata_path.read_text()
    kit.metadata_path.write_text(text[: len(text) // 2])


@negative("n-missing-field", "metadata without the required field last-column-id", "META-1 META-2",
          "CorruptMetadataError")
def _missing_field(kit: Kit) -> None:
    doc = kit.json()
    del doc["last-column-id"]
    kit.write_json(doc)


@negative("n-unknown-schema", "current-schema-id names no schema", "META-3", "CorruptMetadataError")
def _unknown_schema(kit: Kit) -> None:
    kit.write_json({**kit.json(), "current-schema-id": 99})


@negative("n-unknown-snapshot", "current-snapshot-id names no snapshot", "META-3", "CorruptMetadataError")
def _unknown_snapshot(kit: Kit) -> None:
    kit.write_json({**kit.json(), "current-snapshot-id": 12345})


@negative("n-missing-manifest-list", "the current snapshot's manifest list is gone", "READ-10", "CorruptMetadataError")
def _missing_list(kit: Kit) -> None:
    kit.manifest_list().unlink()


@negative("n-missing-manifest", "a manifest of the current snapshot is gone", "READ-10", "CorruptMetadataError")
def _missing_manifest(kit: Kit) -> None:
    kit.first_manifest().unlink()


@negative("n-missing-data-file", "a live data file is gone", "READ-10", "CorruptDataFileError")
def _missing_data(kit: Kit) -> None:
    kit.data_file().unlink()


@negative("n-truncated-data-file", "a live data file cut short: not a Parquet file any more", "READ-10",
          "CorruptDataFileError")
def _truncated_data(kit: Kit) -> None:
    path = kit.data_file()
    path.write_bytes(path.read_bytes()[:100])


@negative("n-row-count-mismatch", "a data file replaced by one with a row fewer than its record_count",
          "READ-12 WRITE-6", "CorruptDataFileError")
def _row_count(kit: Kit) -> None:
    rewrite_parquet(kit.data_file(), lambda t: t.slice(0, t.num_rows - 1))


@negative("n-no-field-ids", "a data file rewritten without PARQUET:field_id", "READ-12 WRITE-1 READ-6",
          "CorruptDataFileError")
def _no_field_ids(kit: Kit) -> None:
    rewrite_parquet(kit.data_file(), lambda t: pa.table({f.name: t.column(f.name) for f in t.schema}))


@negative("n-type-not-widenable", "a data file stores column n (int) as strings", "READ-6 READ-12",
          "CorruptDataFileError")
def _not_widenable(kit: Kit) -> None:
    def change(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index("n")
        field = pa.field("n", pa.string(), metadata=t.schema.field(i).metadata)
        return t.set_column(i, field, t.column(i).cast(pa.string()))
    rewrite_parquet(kit.data_file(), change)


@negative("n-duplicate-live-file", "the same data files live in two manifests of one snapshot", "READ-9 MAN-10",
          "CorruptMetadataError")
def _duplicate(kit: Kit) -> None:
    manifest = kit.first_manifest()
    copy = manifest.with_name("m-0000000000000000-duplicate0000000.manifest.parquet")
    copy.write_bytes(manifest.read_bytes())
    listing = pq.read_table(kit.manifest_list())
    row = listing.slice(0, 1)
    row = row.set_column(0, listing.schema.field(0), pa.array([f"metadata/{copy.name}"], listing.schema.field(0).type))
    pq.write_table(pa.concat_tables([listing, row]), kit.manifest_list())


@negative("n-dv-bad-crc", "a deletion-vector blob whose CRC-32 does not match", "DV-4 READ-14",
          "CorruptMetadataError", deletes=True)
def _dv_crc(kit: Kit) -> None:
    path, f = kit.vector_file()
    data = bytearray(path.read_bytes())
    data[f.deletion_vector.offset + f.deletion_vector.length - 1] ^= 0xFF
    path.write_bytes(bytes(data))


@negative("n-dv-missing-file", "the deletion-vector file of a live entry is gone", "DV-4 READ-14 READ-10",
          "CorruptMetadataError", deletes=True)
def _dv_missing(kit: Kit) -> None:
    kit.vector_file()[0].unlink()


@negative("n-dv-row-count", "a deletion-vector blob (valid CRC) written for a file of another row count",
          "DV-4 DV-2", "CorruptMetadataError", deletes=True)
def _dv_row_count(kit: Kit) -> None:
    path, f = kit.vector_file()
    rewrite_blob(path, f.deletion_vector.offset, f.deletion_vector.length,
                 lambda blob: struct.pack_into("<Q", blob, 16, f.record_count + 1))


@negative("n-dv-cardinality", "a deletion-vector blob (valid CRC) whose cardinality is not the entry's",
          "DV-4 DV-5", "CorruptMetadataError", deletes=True)
def _dv_cardinality(kit: Kit) -> None:
    path, f = kit.vector_file()
    rewrite_blob(path, f.deletion_vector.offset, f.deletion_vector.length,
                 lambda blob: struct.pack_into("<Q", blob, 8, 2))


@negative("n-dv-position-range", "a deletion vector (valid CRC) deleting a position past the file's rows",
          "DV-4 DV-2", "CorruptMetadataError", deletes=True)
def _dv_range(kit: Kit) -> None:
    path, f = kit.vector_file()
    rewrite_blob(path, f.deletion_vector.offset, f.deletion_vector.length,
                 lambda blob: struct.pack_into("<Q", blob, 24, f.record_count + 5))


@case("negative", "n-history-file-cut", "a history file cut short: reading a snapshot it holds fails",
      "META-15 META-18")
def _history_file_cut(b: TableBuild) -> dict[str, Any]:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, format_version=2, properties={"write.metadata.inline-snapshots-max": "2"})
    first = b.append(events(10, rng))
    for k in range(1, 4):  # from the third append on, the oldest snapshot moves to a history file
        b.append(events(10, rng, first_id=10 * k))
    metadata_rel = b.copy_table()
    holder = min((b.out / "table" / "metadata").glob("history-*.json"))  # the oldest: it holds `first`
    assert str(first) in holder.read_text()
    holder.write_text(holder.read_text()[:60])
    return refused(b, metadata_rel, "CorruptMetadataError", snapshot_id=first)
