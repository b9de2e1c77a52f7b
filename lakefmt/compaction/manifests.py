"""Manifest compaction: merge many small manifests into few, clustered by partition (COMPACT-29, COMPACT-30).

Every commit adds a manifest, so the manifest list of an ingest-heavy table grows
with its commit count and planning reads ever more files. :func:`rewrite_manifests`
rewrites the live entries of all manifests smaller than the target size into as few
manifests as the target allows, sorted by partition tuple, so each new manifest
covers a narrow range of partitions and the manifest-list summaries prune (READ-5).

The commit is metadata-only: a ``replace`` snapshot whose live data files are exactly
those of its parent. Entries keep their snapshot ids and sequence numbers (written
explicitly, status EXISTING) and their deletion vectors (DV-5): the new manifests have
the table's format version (MAN-9), so a version 2 table's deleted rows stay deleted.
It is built through ``Table.commit_build``, so a lost race rebuilds it from the new
base: concurrent appends are kept, and so are vectors a concurrent delete wrote.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lakefmt import manifest_cache
from lakefmt.commit import new_snapshot_id
from lakefmt.compaction.results import ManifestRewriteResult
from lakefmt.expressions import Expression
from lakefmt.manifest import EntryStatus, ManifestEntry, ManifestFile
from lakefmt.manifest_cache import read_entries, read_list
from lakefmt.manifest_io import write_manifest, write_manifest_list
from lakefmt.metadata import Snapshot, TableMetadata
from lakefmt.properties import MANIFEST_TARGET_SIZE, int_property
from lakefmt.updates import AddSnapshot, SetCurrentSnapshot, Update

if TYPE_CHECKING:
    from lakefmt.table import Table


class _NothingToRewrite(Exception):
    """Raised from the build when the base has fewer than two small manifests."""


def planning_seconds(table: Table, probe_filter: str | Expression | None = None, *, repeat: int = 3) -> float:
    """Time to plan a scan of the current snapshot with a cold manifest cache (what a new reader pays).

    The best of ``repeat`` runs; the process-wide manifest cache is cleared before each.
    """
    best = float("inf")
    for _ in range(max(1, repeat)):
        manifest_cache.clear()
        started = time.perf_counter()
        table.scan(probe_filter).plan()
        best = min(best, time.perf_counter() - started)
    return best


def rewrite_manifests(table: Table, *, target_size: int | None = None,
                      probe_filter: str | Expression | None = None) -> ManifestRewriteResult:
    """Merge the table's small manifests (COMPACT-29) and report planning time before and after."""
    started = time.perf_counter()
    table.refresh()
    target = int_property(table.metadata.properties, MANIFEST_TARGET_SIZE, target_size)
    before = _live_manifests(table, table.metadata)
    plan_before = planning_seconds(table, probe_filter)
    stats: dict[str, int] = {}
    token = table.write_token()  # taken here: the build may run under the catalog lock
    try:
        table.commit_build(lambda base: _build(table, base, target, token, stats), operation="replace")
    except _NothingToRewrite:
        return ManifestRewriteResult(table.name, len(before), len(before), 0, stats.get("entries", 0), None,
                                     plan_before, plan_before, time.perf_counter() - started)
    after = _live_manifests(table, table.metadata)
    plan_after = planning_seconds(table, probe_filter)
    snapshot = table.metadata.current_snapshot
    return ManifestRewriteResult(table.name, len(before), len(after), stats["rewritten"], stats["entries"],
                                 snapshot.snapshot_id if snapshot else None, plan_before, plan_after,
                                 time.perf_counter() - started)


def _live_manifests(table: Table, meta: TableMetadata) -> list[ManifestFile]:
    snap = meta.current_snapshot
    if snap is None:
        return []
    return [m for m in read_list(table.io, f"{meta.location}/{snap.manifest_list}") if m.live_files_count]


def _partition_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v if v is not None else 0) for v in values)


def _build(table: Table, base: TableMetadata, target: int, token: str, stats: dict[str, int]
           ) -> tuple[list[Update], list[str]]:
    """The updates of one attempt: new manifests for the base's small ones, and a new snapshot."""
    current = base.current_snapshot
    if current is None:
        raise _NothingToRewrite()
    io, location = table.io, base.location
    live = _live_manifests(table, base)
    small = [m for m in live if m.length < target]
    keep = [m for m in live if m.length >= target]
    if len(small) < 2:
        stats["entries"] = sum(m.live_files_count for m in live)
        raise _NothingToRewrite()
    by_spec: dict[int, list[ManifestEntry]] = {}
    for m in small:
        spec = base.spec_by_id(m.spec_id)
        for e in read_entries(io, f"{location}/{m.path}", m, spec, base.schema):
            if e.is_live:  # ids were inherited on read, so they are written explicitly (COMPACT-29); the
                # entry keeps its deletion vector (DV-5)
                by_spec.setdefault(m.spec_id, []).append(replace(e, status=EntryStatus.EXISTING))
    entries_total = sum(len(v) for v in by_spec.values())
    per_entry = max(1.0, sum(m.length for m in small) / max(1, entries_total))
    per_manifest = max(1, int(target / per_entry))
    snapshot_id = new_snapshot_id()
    while any(s.snapshot_id == snapshot_id for s in base.snapshots):
        snapshot_id = new_snapshot_id()
    sequence = base.last_sequence_number + 1
    written: list[str] = []
    created: list[ManifestFile] = []
    try:
        for spec_id, entries in sorted(by_spec.items()):
            entries.sort(key=lambda e: (_partition_key(e.data_file.partition), e.data_file.path))
            count = math.ceil(len(entries) / per_manifest)
            size = math.ceil(len(entries) / count)
            for start in range(0, len(entries), size):
                rel = f"metadata/m-{token}-{uuid.uuid4().hex[:16]}.manifest.parquet"
                written.append(f"{location}/{rel}")
                created.append(write_manifest(io, f"{location}/{rel}", rel, entries[start:start + size],
                                              base.spec_by_id(spec_id), base.schema, snapshot_id=snapshot_id,
                                              sequence_number=sequence, format_version=base.format_version))
        list_rel = f"metadata/snap-{snapshot_id}-{token}-{uuid.uuid4().hex[:16]}.manifest-list.parquet"
        written.append(f"{location}/{list_rel}")
        write_manifest_list(io, f"{location}/{list_rel}", keep + created, format_version=base.format_version)
    except BaseException:
        io.delete_many(written)
        raise
    summary = {k: v for k, v in current.summary.items() if k.startswith("total-")}
    summary.update({"added-data-files": "0", "deleted-data-files": "0", "added-records": "0",
                    "deleted-records": "0", "added-files-size": "0", "removed-files-size": "0",
                    "lakefmt.manifests-created": str(len(created)), "lakefmt.manifests-replaced": str(len(small)),
                    "lakefmt.manifests-kept": str(len(keep))})
    if base.format_version >= 2:  # no row deleted by this snapshot; the totals carry over (DV-8)
        summary["added-position-deletes"] = "0"
    snapshot = Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=current.snapshot_id, sequence_number=sequence,
                        timestamp_ms=max(int(time.time() * 1000), base.last_updated_ms), operation="replace",
                        manifest_list=list_rel, schema_id=base.current_schema_id, summary=summary)
    stats.update(rewritten=len(small), entries=entries_total)
    return [AddSnapshot(snapshot), SetCurrentSnapshot(snapshot_id)], written
