"""The tree ``lakefmt inspect`` prints: the file tree of one snapshot (spec/manifests.md, spec/metadata.md).

The tree follows the spec's structure exactly: the snapshot names a manifest list,
its rows name manifests, and their entries name data files with partition values,
sizes, row counts and per-column statistics (bounds decoded per TYPE-6). A data file
with a deletion vector (format version 2, DV-5) shows it: the rows it deletes, the live
rows left (DV-6) and where its blob is. Only metadata is read; data files and
deletion-vector files are never opened (READ-5).

Example output (abridged)::

    table     artemis.downlinks
    snapshot  3012657381952 (sequence 2, append, parent 7110459)
    +-- manifest list  metadata/snap-3012657381952-....manifest-list.parquet  (2 manifests)
        +-- manifest  metadata/m-....manifest.parquet  2.1 KiB (2150 bytes)
            |   files: 3 added, 0 existing, 0 deleted   rows: 3000 added, 0 existing, 0 deleted
            +-- ADDED  data/ts_day=2026-01-01/mission_id=0/part-...-00000.parquet
                  21.3 KiB (21842 bytes), 1000 rows, partition ts_day=2026-01-01/mission_id=0
                  deletion vector  12 deleted, 988 live rows  data/deletes/dv-....bin @ 0 (64 bytes)
                  column       id  values  nulls  lower                      upper
                  ts           1   1000    0      2026-01-01T00:00:00+00:00  2026-01-01T23:59:00+00:00
"""

from __future__ import annotations

import datetime as dt
import struct
from typing import IO, Any
from urllib.parse import unquote

from lakefmt.cli.format import human_bytes, show_value
from lakefmt.conversions import from_bytes, to_python
from lakefmt.manifest import DataFile, EntryStatus, ManifestFile
from lakefmt.manifest_io import read_manifest, read_manifest_list
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Field, Schema
from lakefmt.table import Table
from lakefmt.types import LakeType

MAX_BOUND_CHARS = 40


def decode_bound(ltype: LakeType, data: bytes | None) -> Any:
    """A bound as a friendly Python value, tolerating bounds written before a widening (SCHEMA-6)."""
    if data is None:
        return None
    try:
        if ltype.name == "long" and len(data) == 4:  # written while the column was an int
            return struct.unpack("<i", data)[0]
        if ltype.name == "double" and len(data) == 4:  # written while the column was a float
            return struct.unpack("<f", data)[0]
        return to_python(ltype, from_bytes(ltype, data))
    except (struct.error, UnicodeDecodeError, ValueError, OverflowError):
        return "0x" + bytes(data).hex()


def _show(value: Any) -> str:
    if value is None:
        return "-"
    text = show_value(value)
    return text if len(text) <= MAX_BOUND_CHARS else text[:MAX_BOUND_CHARS - 3] + "..."


def _ms(timestamp_ms: int) -> str:
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def _field_for(metadata: TableMetadata, schema: Schema, field_id: int) -> Field | None:
    """The field in ``schema``, else in the newest schema that has it (for dropped columns)."""
    found = schema.field_by_id(field_id)
    if found is not None:
        return found
    for other in sorted(metadata.schemas, key=lambda s: -s.schema_id):
        found = other.field_by_id(field_id)
        if found is not None:
            return found
    return None


def _partition_text(spec: PartitionSpec, values: tuple[Any, ...], schema: Schema) -> str:
    if spec.is_unpartitioned:
        return "(unpartitioned)"
    return unquote(spec.partition_path(values, schema))


def _summary_text(spec: PartitionSpec, manifest: ManifestFile, schema: Schema) -> str:
    parts = []
    types = spec.partition_type(schema)
    for pf, (name, ptype), summary in zip(spec.fields, types, manifest.partitions):
        src = spec.source_field(pf, schema)
        low, high = (None if b is None else from_bytes(ptype, b)
                     for b in (summary.lower_bound, summary.upper_bound))
        shown = [unquote(pf.transform.human_string(v, src.type)) if v is not None else "-" for v in (low, high)]
        parts.append(f"{name} in [{shown[0]}, {shown[1]}]" + (" +null" if summary.contains_null else ""))
    return "; ".join(parts)


def _stats_lines(f: DataFile, metadata: TableMetadata, schema: Schema) -> list[str]:
    ids = sorted(set(f.value_counts) | set(f.null_value_counts) | set(f.lower_bounds) | set(f.upper_bounds))
    rows = [("column", "id", "values", "nulls", "lower", "upper")]
    for fid in ids:
        field = _field_for(metadata, schema, fid)
        name = field.name if field is not None else "?"
        lower = decode_bound(field.type, f.lower_bounds.get(fid)) if field else f.lower_bounds.get(fid)
        upper = decode_bound(field.type, f.upper_bounds.get(fid)) if field else f.upper_bounds.get(fid)
        rows.append((name, str(fid), _show(f.value_counts.get(fid)), _show(f.null_value_counts.get(fid)),
                     _show(lower), _show(upper)))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def print_tree(table: Table, *, out: IO[str], snapshot_id: int | None = None, stats: bool = True,
               max_files: int | None = None) -> None:
    """Print snapshot -> manifest list -> manifests -> data files for ``table``."""
    metadata = table.metadata
    io = table.io
    snap: Snapshot | None = (metadata.snapshot_by_id(snapshot_id, table=table.name) if snapshot_id is not None
                             else metadata.current_snapshot)
    w = out.write
    w(f"table     {table.name} (format version {metadata.format_version})\n")
    w(f"location  {metadata.location}\n")
    w(f"metadata  {table.metadata_location}\n")
    schema = metadata.schema_by_id(snap.schema_id) if snap is not None else metadata.schema
    w(f"schema    {schema.schema_id}: " + ", ".join(
        f"{f.name} {f.type}{' required' if f.required else ''} (id {f.id})" for f in schema.fields) + "\n")
    spec = metadata.spec
    if not spec.is_unpartitioned:
        w(f"partition spec {spec.spec_id}: " + ", ".join(
            f"{pf.name}={pf.transform}({spec.source_field(pf, schema).name})" for pf in spec.fields) + "\n")
    if snap is None:
        w("snapshot  none (the table is empty)\n")
        return
    parent = f", parent {snap.parent_snapshot_id}" if snap.parent_snapshot_id is not None else ""
    w(f"snapshot  {snap.snapshot_id} (sequence {snap.sequence_number}, {snap.operation}, "
      f"{_ms(snap.timestamp_ms)}{parent})\n")
    if snap.summary:
        w("summary   " + " ".join(f"{k}={v}" for k, v in snap.summary.items()) + "\n")
    manifests = read_manifest_list(io, f"{metadata.location}/{snap.manifest_list}")
    w(f"+-- manifest list  {snap.manifest_list}  ({len(manifests)} manifest{'s' if len(manifests) != 1 else ''})\n")
    total_files = total_rows = total_bytes = total_deleted = total_vectors = 0
    for mi, m in enumerate(manifests):
        last_m = mi == len(manifests) - 1
        branch, pad = ("    +-- ", "        ") if last_m else ("    +-- ", "    |   ")
        mspec = metadata.spec_by_id(m.spec_id)
        w(f"{branch}manifest  {m.path}  {human_bytes(m.length)} ({m.length} bytes)\n")
        w(f"{pad}|   spec {m.spec_id}, added by snapshot {m.added_snapshot_id}, sequence {m.sequence_number}\n")
        w(f"{pad}|   files: {m.added_files_count} added, {m.existing_files_count} existing, "
          f"{m.deleted_files_count} deleted   rows: {m.added_rows_count} added, "
          f"{m.existing_rows_count} existing, {m.deleted_rows_count} deleted\n")
        if not mspec.is_unpartitioned and m.partitions:
            w(f"{pad}|   partitions: {_summary_text(mspec, m, schema)}\n")
        entries = read_manifest(io, f"{metadata.location}/{m.path}", m, mspec, schema)
        shown = entries if max_files is None else entries[:max_files]
        for ei, e in enumerate(shown):
            last_e = ei == len(shown) - 1 and len(shown) == len(entries)
            f = e.data_file
            if e.is_live:
                total_files += 1
                total_rows += f.record_count
                total_bytes += f.file_size_bytes
                total_deleted += f.deleted_record_count
                total_vectors += f.deletion_vector is not None
            epad = pad + ("      " if last_e else "|     ")
            w(f"{pad}+-- {EntryStatus(e.status).name}  {f.path}\n")
            w(f"{epad}{human_bytes(f.file_size_bytes)} ({f.file_size_bytes} bytes), {f.record_count} rows, "
              f"partition {_partition_text(mspec, f.partition, schema)}, snapshot {e.snapshot_id}, "
              f"sequence {e.sequence_number}\n")
            if f.deletion_vector is not None:
                ref = f.deletion_vector
                w(f"{epad}deletion vector  {ref.cardinality} deleted, {f.live_record_count} live rows  "
                  f"{ref.path} @ {ref.offset} ({ref.length} bytes)\n")
            if stats:
                for line in _stats_lines(f, metadata, schema):
                    w(f"{epad}{line}\n")
        if len(shown) < len(entries):
            rest = entries[len(shown):]
            for e in rest:
                if e.is_live:
                    total_files += 1
                    total_rows += e.data_file.record_count
                    total_bytes += e.data_file.file_size_bytes
                    total_deleted += e.data_file.deleted_record_count
                    total_vectors += e.data_file.deletion_vector is not None
            w(f"{pad}+-- ... {len(rest)} more entries (use --max-files to show them)\n")
    deleted = (f" ({total_rows} written, {total_deleted} deleted by {total_vectors} deletion vectors)"
               if total_vectors else "")
    w(f"total     {total_files} live data files, {total_rows - total_deleted} rows{deleted}, "
      f"{human_bytes(total_bytes)} ({total_bytes} bytes)\n")
