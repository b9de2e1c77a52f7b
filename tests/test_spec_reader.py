"""A reader written from spec/ alone must find and read every row lakefmt wrote.

Nothing from lakefmt is imported to *read*: the catalog file is opened with DuckDB,
the metadata with json, manifest lists, manifests and data files with pyarrow, and
the rules applied are the spec's (CAT-3 pointer, META/SNAP fields, ML-5 live files,
MAN-3 statuses, MAN-5 inheritance, LAYOUT-2 relative paths, READ-6 field ids).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import jsonschema
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks, rows

SPEC = Path(__file__).resolve().parent.parent / "spec"


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
                paths.append(entry["file_path"])
    tables = []
    for rel in paths:
        data = pq.read_table(f"{location}/{rel}")
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
    t.delete("payload_id = 2")
    with t.update_schema() as u:
        u.rename_column("value", "reading")
    expected = t.scan().to_arrow()
    got = spec_only_read(local_catalog.catalog_path, "spec", "reader")
    assert rows(got.select(expected.column_names)) == rows(expected)
    assert got.num_rows == pa.concat_tables([data, downlinks(500, seed=5)]).filter(
        pc.field("payload_id") != 2).num_rows


def test_metadata_validates_against_the_json_schema(local_catalog):
    t = local_catalog.create_table("spec.schema", schema=DOWNLINKS_SCHEMA, partition_by=["month(ts)"])
    t.append(downlinks(100))
    json_schema = json.loads((SPEC / "table-metadata.schema.json").read_text())
    document = json.loads(Path(t.metadata_location).read_text())
    jsonschema.validate(document, json_schema)
    broken = dict(document)
    broken["format-version"] = 2
    try:
        jsonschema.validate(broken, json_schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the JSON Schema accepted format-version 2")


def test_memory_warehouse(tmp_path):
    cat = lakefmt.Catalog("memory://lakefmt-test", catalog_path=str(tmp_path / "cat.duckdb"), create=True)
    t = cat.create_table("mem.t", schema=pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    assert sorted(cat.load_table("mem.t").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
