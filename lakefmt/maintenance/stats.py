"""Storage accounting: where a table's bytes are (spec/maintenance.md, MAINT-1).

* **live**: data files of the current snapshot;
* **historical**: data files only older retained snapshots reach — what snapshot expiry
  would free once those snapshots are expired (compaction leaves its sources here);
* **metadata**: referenced metadata files, manifest lists and manifests;
* **deletion vectors** (format version 2, ROWDEL-13): the deletion-vector files the current
  snapshot's live entries point into (live), and those only older retained snapshots
  reach (historical), each file counted once at its size in storage however many
  entries point into it;
* **orphan**: files under the table location that nothing references, split into
  those a live write lease protects (**in flight**: written by a write that has not
  committed yet) and the rest. Among the rest, **superseded metadata** files are old
  metadata files that fell out of the metadata-log after
  ``write.metadata.previous-versions-max`` commits (META-7): no swap can make them current
  again (MAINT-6), so they are never in flight, even while their writer's token is leased.

Per partition of the current snapshot: file count, bytes, live records (rows written
less the rows deletion vectors delete, DV-6), deleted records, average file size, a
histogram of file sizes relative to ``write.target-file-size-bytes``, and the number of
manifests holding the partition's files.

Example:
    >>> s = t.stats()
    >>> s.live_bytes, s.historical_bytes, s.orphan_bytes
    >>> s.live_records, s.written_records, s.deleted_records, s.live_delete_vector_files
    >>> [(p.partition, p.files, p.small_files) for p in s.partitions]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakefmt.maintenance.orphans import scan_storage
from lakefmt.maintenance.reachability import relativize
from lakefmt.manifest_cache import read_entries, read_list
from lakefmt.properties import TARGET_FILE_SIZE, int_property

if TYPE_CHECKING:
    from lakefmt.table import Table

# Histogram edges as fractions of the target file size; the last bucket is "at least the target".
SIZE_FRACTIONS = (1 / 64, 1 / 16, 1 / 4, 1.0)
SMALL_FRACTION = 1 / 4  # a file below a quarter of the target counts as small


@dataclass(frozen=True)
class PartitionStats:
    """Live files of one partition tuple of the current snapshot."""

    partition: str  # partition path (PART-7); "" for an unpartitioned spec
    spec_id: int
    files: int
    bytes: int
    records: int  # live rows: rows written less the deleted ones (DV-6)
    small_files: int
    size_histogram: tuple[tuple[int | None, int], ...]  # (files below this many bytes, count); None: the rest
    manifests: int
    deleted_records: int = 0  # rows of the partition's live files their deletion vectors delete
    delete_vectors: int = 0  # live files that have a deletion vector

    @property
    def average_file_size(self) -> float:
        return self.bytes / self.files if self.files else 0.0


@dataclass(frozen=True)
class TableStats:
    """Where the bytes of a table are (see the module docstring).

    ``live_records`` are the live rows of the current snapshot (DV-6): ``written_records``
    (the row counts of its live data files) less ``deleted_records`` (the positions their
    deletion vectors delete). ``live_delete_vectors`` counts live files with a vector.
    """

    table: str
    snapshot_id: int | None
    snapshots: int
    target_file_size: int
    live_files: int
    live_bytes: int
    live_records: int
    historical_files: int
    historical_bytes: int
    metadata_files: int
    metadata_bytes: int
    orphan_files: int
    orphan_bytes: int
    in_flight_files: int
    in_flight_bytes: int
    partitions: tuple[PartitionStats, ...]
    superseded_metadata_files: int = 0  # of the orphans: old metadata files out of the metadata-log
    superseded_metadata_bytes: int = 0
    written_records: int = 0
    deleted_records: int = 0
    live_delete_vectors: int = 0
    live_delete_vector_files: int = 0
    live_delete_vector_bytes: int = 0
    historical_delete_vector_files: int = 0
    historical_delete_vector_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "partitions"}
        out["partitions"] = [{**p.__dict__, "average_file_size": p.average_file_size,
                              "size_histogram": [list(b) for b in p.size_histogram]} for p in self.partitions]
        return out


def table_stats(table: Table) -> TableStats:
    """Storage accounting of ``table`` (one listing, one reachability pass, the current manifests)."""
    scan = scan_storage(table)
    meta = table.metadata
    target = int_property(meta.properties, TARGET_FILE_SIZE)
    edges = [int(target * f) for f in SIZE_FRACTIONS]
    uppers: list[int | None] = [*edges, None]
    parts: dict[tuple[int, tuple[Any, ...]], dict[str, Any]] = {}
    live: dict[str, int] = {}
    live_vectors: set[str] = set()
    written = deleted = vectors = 0
    snap = meta.current_snapshot
    if snap is not None:
        for m in read_list(table.io, f"{scan.location}/{snap.manifest_list}"):
            spec = meta.spec_by_id(m.spec_id)
            for e in read_entries(table.io, f"{scan.location}/{m.path}", m, spec, meta.schema):
                if not e.is_live:
                    continue
                f = e.data_file
                part = parts.setdefault((f.spec_id, f.partition), {
                    "files": 0, "bytes": 0, "records": 0, "deleted": 0, "vectors": 0, "small": 0,
                    "hist": [0] * len(uppers), "manifests": set()})
                part["files"] += 1
                part["small"] += f.file_size_bytes < target * SMALL_FRACTION
                part["bytes"] += f.file_size_bytes
                part["records"] += f.live_record_count
                part["deleted"] += f.deleted_record_count
                part["hist"][sum(1 for edge in edges if f.file_size_bytes >= edge)] += 1
                part["manifests"].add(m.path)
                live[f.path] = f.file_size_bytes
                written += f.record_count
                deleted += f.deleted_record_count
                if f.deletion_vector is not None:
                    vectors += 1
                    part["vectors"] += 1
                    live_vectors.add(relativize(scan.location, f.deletion_vector.path) or f.deletion_vector.path)
    historical = {p: n for p, n in scan.reachability.data_files.items() if p not in live}
    sizes = {f.path: f.size for f in scan.listed}
    reach = scan.reachability
    historical_vectors = [p for p in reach.deletion_vectors if p not in live_vectors]
    metadata_paths = [*reach.metadata_files, *reach.history_files, *reach.manifest_lists, *reach.manifests]
    unreferenced = scan.unreferenced
    in_flight = [f for f in unreferenced if scan.is_in_flight(f.path)]
    orphans = [f for f in unreferenced if not scan.is_in_flight(f.path)]
    superseded = [f for f in orphans if scan.is_superseded_metadata(f.path)]
    partitions = []
    for (spec_id, values), p in sorted(parts.items(), key=lambda kv: (kv[0][0], repr(kv[0][1]))):
        spec = meta.spec_by_id(spec_id)
        path = "" if spec.is_unpartitioned else spec.partition_path(values, meta.schema)
        partitions.append(PartitionStats(path, spec_id, p["files"], p["bytes"], p["records"], p["small"],
                                         tuple(zip(uppers, p["hist"])), len(p["manifests"]), p["deleted"],
                                         p["vectors"]))
    return TableStats(
        table=table.name, snapshot_id=meta.current_snapshot_id, snapshots=len(meta.snapshots),
        target_file_size=target, live_files=len(live), live_bytes=sum(live.values()),
        live_records=written - deleted,
        historical_files=len(historical), historical_bytes=sum(historical.values()),
        metadata_files=len(metadata_paths), metadata_bytes=sum(sizes.get(p, 0) for p in metadata_paths),
        orphan_files=len(orphans), orphan_bytes=sum(f.size for f in orphans), in_flight_files=len(in_flight),
        in_flight_bytes=sum(f.size for f in in_flight), partitions=tuple(partitions),
        superseded_metadata_files=len(superseded), superseded_metadata_bytes=sum(f.size for f in superseded),
        written_records=written, deleted_records=deleted, live_delete_vectors=vectors,
        live_delete_vector_files=len(live_vectors),
        live_delete_vector_bytes=sum(sizes.get(p, reach.deletion_vectors.get(p, 0)) for p in live_vectors),
        historical_delete_vector_files=len(historical_vectors),
        historical_delete_vector_bytes=sum(sizes.get(p, reach.deletion_vectors[p]) for p in historical_vectors))
