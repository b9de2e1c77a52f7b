"""Read a table's files as the spec describes them, with json, pyarrow and DuckDB only.

The tests of tests/spec_ids check rules on the files themselves (metadata JSON, manifest
lists, manifests, data files, the catalog file), not on lakefmt's in-memory objects.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import lakefmt


def metadata_json(table: lakefmt.Table, location: str | None = None) -> dict[str, Any]:
    """The current (or the given) metadata file of ``table`` as parsed JSON."""
    return json.loads(table.io.read_bytes(location or table.metadata_location))


def parquet(table: lakefmt.Table, rel: str) -> pq.ParquetFile:
    """A file of the table, by its path relative to the table location (LAYOUT-2)."""
    return pq.ParquetFile(io.BytesIO(table.io.read_bytes(f"{table.location}/{rel}")))


def key_values(table: lakefmt.Table, rel: str) -> dict[str, str]:
    """The Parquet footer's key-value metadata of a table file (MAN-9, ML-7)."""
    raw = parquet(table, rel).metadata.metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items() if not k.startswith(b"ARROW:")}


def read_rows(table: lakefmt.Table, rel: str) -> list[dict[str, Any]]:
    return parquet(table, rel).read().to_pylist()


def snapshot_json(table: lakefmt.Table, snapshot_id: int | None = None) -> dict[str, Any]:
    meta = metadata_json(table)
    wanted = meta["current-snapshot-id"] if snapshot_id is None else snapshot_id
    return next(s for s in meta["snapshots"] if s["snapshot-id"] == wanted)


def manifest_list(table: lakefmt.Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """The rows of a snapshot's manifest list (ML-2); the current snapshot by default."""
    return read_rows(table, snapshot_json(table, snapshot_id)["manifest-list"])


def entries(table: lakefmt.Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """Every manifest entry of a snapshot, each with the manifest path it came from."""
    out = []
    for m in manifest_list(table, snapshot_id):
        for e in read_rows(table, m["manifest_path"]):
            out.append({**e, "manifest": m["manifest_path"]})
    return out


def live_entries(table: lakefmt.Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    return [e for e in entries(table, snapshot_id) if e["status"] in (0, 1)]  # ML-5


def files_under(table: lakefmt.Table) -> dict[str, int]:
    """Every file under the table location: relative path -> size."""
    prefix = table.location + "/"
    return {f.path[len(prefix):]: f.size for f in table.io.list_files(table.location)}


def catalog_rows(catalog: lakefmt.Catalog, sql: str, params: list[Any] | None = None) -> list[tuple]:
    """Rows of the catalog file, read under the catalog lock (CAT-6)."""
    with catalog.session() as s:
        return s.con.execute(sql, params or []).fetchall()


def field_ids(schema: pa.Schema) -> dict[str, int]:
    """Top-level column name -> PARQUET:field_id of a data file's Arrow schema (WRITE-1)."""
    return {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema if f.metadata}


def metadata_files(table: lakefmt.Table) -> list[dict[str, Any]]:
    """Every metadata file the table has written, oldest first."""
    names = sorted(p for p in files_under(table) if p.startswith("metadata/v"))
    return [metadata_json(table, f"{table.location}/{p}") for p in names]


def swap_in_metadata(catalog: lakefmt.Catalog, table: lakefmt.Table, document: dict[str, Any]) -> str:
    """Write ``document`` as the table's next metadata file and swap the catalog pointer to it, as another
    writer (a newer implementation, or one with a clock ahead) would; returns its location."""
    version = int(re.search(r"/v(\d+)-[^/]*$", table.metadata_location).group(1)) + 1
    location = f"{table.location}/metadata/v{version:06d}-{uuid.uuid4()}.metadata.json"
    table.io.write_bytes(location, json.dumps(document).encode())
    with catalog.session() as s:
        assert s.compare_and_swap(*table.identifier, table.metadata_location, location, operation="external",
                                  snapshot_id=None, summary={})
    return location
