"""A reader written from spec/ alone must find and read every row lakefmt wrote.

Nothing from lakefmt is imported to *read*: the catalog file is opened with DuckDB,
the metadata with json, manifest lists, manifests and data files with pyarrow, and
the rules applied are the spec's (CAT-3 pointer, META/SNAP fields, ML-5 live files,
MAN-3 statuses, MAN-5 inheritance, LAYOUT-2 relative paths, READ-6 field ids, and in
format version 2 the deletion vectors of DV-2 and READ-14).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import duckdb
import jsonschema
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks, rows

SPEC = Path(__file__).resolve().parent.parent / "spec"


def deleted_positions(path: str, offset: int, length: int) -> set[int]:
    """The positions of a deletion-vector blob, decoded as DV-2 lays it out."""
    with open(path, "rb") as f:
        f.seek(offset)
        blob = f.read(length)
    magic, encoding, cardinality, row_count = struct.unpack_from("<4sB3xQQ", blob)
    assert magic == b"LFDV" and zlib.crc32(blob[:-4]) == struct.unpack_from("<I", blob, len(blob) - 4)[0]
    payload = blob[24:-4]
    if encoding == 1:
        return set(struct.unpack(f"<{cardinality}Q", payload))
    return {p for p in range(row_count) if payload[p // 8] >> (p % 8) & 1}


def spec_only_read(catalog_file: str, namespace: str, name: str) -> pa.Table:
    con = duckdb.connect(catalog_file, read_only=True)
    (metadata_location,) = con.execute(
        "SELECT metadata_location FROM tables WHERE namespace = ? AND name = ?", [namespace, name]).fetchone()
    con.close()
    meta = json.loads(Path(metadata_location).read_text())
    location = meta["location"]
    schema = next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])
    snapshot = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    manifest_list = pq.read_table(f"{location}/{snapshot['manifest-list']}").to_pylist()
    paths = []
    for m in manifest_list:
        for entry in pq.read_table(f"{location}/{m['manifest_path']}").to_pylist():
            if entry["status"] != 2:  # DELETED entries are not live (ML-5, MAN-3)
                paths.append((entry["file_path"], entry.get("deletion_vector")))
    tables = []
    for rel, vector in paths:
        data = pq.read_table(f"{location}/{rel}")
        if vector is not None:  # READ-14: the rows the vector deletes are not part of the table
            deleted = deleted_positions(f"{location}/{vector['path']}", vector["offset"], vector["length"])
            data = data.filter(pa.array([i not in deleted for i in range(data.num_rows)]))
        by_id = {int(f.metadata[b"PARQUET:field_id"]): f.name for f in data.schema}
        columns = {}
        for field in schema["fields"]:
            file_name = by_id.get(field["id"])
            columns[field["name"]] = data.column(file_name) if file_name else pa.nulls(data.num_rows)
        tables.append(pa.table(columns))
    return pa.concat_tables(tables, promote_options="permissive")


def test_spec_only_reader_sees_every_row(local_catalog):
    t = local_catalog.create_table("spec.reader", schema=DOWNLINKS_SCHEMA,
                                   partition_by=["day(ts)", "bucket(4, payload_id)"], sort_by=["sensor_kind"])
    data = downlinks(2000)
    t.append(data)
    t.append(downlinks(500, seed=5))
    t.delete("payload_id = 2")  # merge-on-read: deletion vectors (DV-2)
    t.delete("payload_id = 3 AND value > 0")
    with t.update_schema() as u:
        u.rename_column("value", "reading")
    expected = t.scan().to_arrow()
    got = spec_only_read(local_catalog.catalog_path, "spec", "reader")
    assert rows(got.select(expected.column_names)) == rows(expected)
    assert t.metadata.format_version == 2
    assert got.num_rows == pa.concat_tables([data, downlinks(500, seed=5)]).filter(
        (pc.field("payload_id") != 2) & ~((pc.field("payload_id") == 3) & (pc.field("value") > 0))).num_rows


def test_metadata_validates_against_the_json_schema(local_catalog):
    t = local_catalog.create_table("spec.schema", schema=DOWNLINKS_SCHEMA, partition_by=["month(ts)"])
    t.append(downlinks(100))
    json_schema = json.loads((SPEC / "table-metadata.schema.json").read_text())
    document = json.loads(Path(t.metadata_location).read_text())
    jsonschema.validate(document, json_schema)
    broken = dict(document)
    broken["format-version"] = 3
    try:
        jsonschema.validate(broken, json_schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the JSON Schema accepted format-version 3")
    t.delete("payload_id = 1")  # the first deletion vector moves the table to version 2 (FMT-4)
    upgraded = json.loads(Path(t.metadata_location).read_text())
    assert upgraded["format-version"] == 2
    jsonschema.validate(upgraded, json_schema)


def test_memory_warehouse(tmp_path):
    cat = lakefmt.Catalog("memory://lakefmt-test", catalog_path=str(tmp_path / "cat.duckdb"), create=True)
    t = cat.create_table("mem.t", schema=pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    assert sorted(cat.load_table("mem.t").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
