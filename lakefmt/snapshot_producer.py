"""Snapshot producers: a change of the live file set, built into metadata updates on any base
(spec/commits.md COMMIT-3..COMMIT-10, COMMIT-22; row deletes: spec/deletes.md ROWDEL-2..ROWDEL-5).

A :class:`SnapshotProducer` turns a :class:`FileChange` (files added, files removed,
rows deleted) into the updates of one new snapshot against whatever base is current:
it writes the attempt's manifests and manifest list, and validates the change against
what was committed since it was planned (COMMIT-7). The commit loop that calls it on
each attempt is :func:`lakefmt.commit.commit_table`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace

import pyarrow as pa

from lakefmt import deletion_vectors as dv
from lakefmt.errors import CommitConflictError
from lakefmt.evaluators import MetricsEvaluator, PartitionEvaluator
from lakefmt.expressions import BoundExpression
from lakefmt.hooks import checkpoint
from lakefmt.idempotency import WriterBatch
from lakefmt.io import FileIO
from lakefmt.manifest import DataFile, EntryStatus, ManifestEntry, ManifestFile, merge_groups
from lakefmt.manifest_cache import read_entries, read_list, remember_entries, remember_list
from lakefmt.manifest_io import decode_bound, write_manifest, write_manifest_list
from lakefmt.metadata import Operation, Snapshot, TableMetadata
from lakefmt.properties import MANIFEST_MIN_MERGE_COUNT, MANIFEST_TARGET_SIZE, int_property
from lakefmt.threads import thread_map
from lakefmt.updates import AddSnapshot, Requirement, SetCurrentSnapshot, Update, UpgradeFormatVersion


def new_snapshot_id() -> int:
    """A random positive 63-bit id (SNAP-2)."""
    return uuid.uuid4().int & ((1 << 63) - 1) or 1


@dataclass(frozen=True)
class RowDeletes:
    """New deleted rows of one live data file (merge-on-read, spec/deletes.md).

    ``data_file`` is the file as the operation read it, with the deletion vector it had
    then; ``deleted`` is the file's whole new mask (True = deleted), the old positions
    included. On a base where another commit changed the file's vector, the commit
    deletes the union of both (ROWDEL-3).
    """

    data_file: DataFile
    deleted: pa.BooleanArray


@dataclass
class FileChange:
    """A change of the live file set, and how to validate it against concurrent commits.

    ``removed`` files leave the table; each must still be live in the base, with the
    deletion vector it had when the operation read it (COMMIT-9, ROWDEL-4). ``deletes``
    give live files new deletion vectors (ROWDEL-2).
    """

    operation: Operation
    added: list[DataFile] = field(default_factory=list)
    removed: list[DataFile] = field(default_factory=list)
    deletes: list[RowDeletes] = field(default_factory=list)
    planned_snapshot_id: int | None = None
    conflict_filter: BoundExpression | None = None
    summary: dict[str, str] = field(default_factory=dict)
    requirements: list[Requirement] = field(default_factory=list)
    writer_batch: WriterBatch | None = None  # an idempotent commit (PROGRESS-2)
    forget_removed_values: bool = False  # erasure: DELETED entries without bounds, and no earlier
    # commit's DELETED entry carried over, so no manifest keeps a copy of erased values (ROWDEL-17)


class SnapshotProducer:
    """Builds one new snapshot for a :class:`FileChange` on whatever base is current (COMMIT-3..6)."""

    def __init__(self, io: FileIO, location: str, change: FileChange, *, token: str | None = None) -> None:
        self.io = io
        self.token = token
        self.location = location
        self.change = change
        self.snapshot_id = new_snapshot_id()
        self._added_manifest: ManifestFile | None = None
        self._stats = _DeleteStats()
        self._format_version = 1

    def _abs(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def _unique(self) -> str:
        """Unique part of a metadata file name, carrying the writer token (LAYOUT-9, CAT-10)."""
        return f"{self.token}-{uuid.uuid4().hex[:16]}" if self.token else uuid.uuid4().hex

    def build(self, base: TableMetadata) -> tuple[list[Update], list[str]]:
        """Updates that apply the change to ``base``, and the files this attempt wrote."""
        for requirement in self.change.requirements:
            requirement.check(base)
        if self.change.writer_batch is not None:
            self.change.writer_batch.check_history(base)  # PROGRESS-3, for commits logged nowhere else
        while base.is_inline(self.snapshot_id):  # SNAP-2: random ids; history files are not read for this
            self.snapshot_id = new_snapshot_id()
        self._validate_concurrent_additions(base)
        sequence = base.last_sequence_number + 1
        written: list[str] = []
        manifests: list[ManifestFile] = []
        self._stats = _DeleteStats()
        self._format_version = max(base.format_version, 2 if self.change.deletes else 1)
        if self.change.added:
            manifests.append(replace(self._write_added_manifest(base), added_snapshot_id=self.snapshot_id,
                                     sequence_number=sequence))
        current = base.current_snapshot
        base_manifests = read_list(self.io, self._abs(current.manifest_list)) if current else []
        # A manifest left with no live entries by an earlier snapshot is dropped (ML-6).
        base_manifests = [m for m in base_manifests if m.live_files_count > 0]
        if self.change.removed or self.change.deletes:
            rewritten, new_files = self._remove_files(base, base_manifests, sequence)
            manifests += rewritten
            written += new_files
        else:
            manifests += base_manifests
        if self.change.operation == "append":
            manifests, new_files = self._merge_small_manifests(base, manifests, sequence)
            written += new_files
        checkpoint("after-manifests")
        list_rel = f"metadata/snap-{self.snapshot_id}-{self._unique()}.manifest-list.parquet"
        write_manifest_list(self.io, self._abs(list_rel), manifests, format_version=self._format_version)
        remember_list(self.io, self._abs(list_rel), manifests)
        checkpoint("after-manifest-list")
        written.append(self._abs(list_rel))
        snapshot = Snapshot(
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=base.current_snapshot_id,
            sequence_number=sequence,
            timestamp_ms=max(int(time.time() * 1000), base.last_updated_ms),
            operation=self.change.operation,
            manifest_list=list_rel,
            schema_id=base.current_schema_id,
            summary=self._summary(current),
        )
        updates: list[Update] = [AddSnapshot(snapshot), SetCurrentSnapshot(self.snapshot_id)]
        if self._format_version > base.format_version:
            updates.insert(0, UpgradeFormatVersion(self._format_version))  # FMT-4: with its first vector
        return updates, written

    def cleanup(self) -> None:
        """Delete the manifest written for added files (the commit did not happen)."""
        if self._added_manifest is not None:
            self.io.delete(self._abs(self._added_manifest.path))
            self._added_manifest = None

    # -- pieces ----------------------------------------------------------------
    def _write_added_manifest(self, base: TableMetadata) -> ManifestFile:
        """Written once and reused by every retry: its entries inherit ids (MAN-5, COMMIT-8)."""
        if self._added_manifest is None:
            rel = f"metadata/m-{self._unique()}.manifest.parquet"
            spec = base.spec_by_id(self.change.added[0].spec_id)
            entries = [ManifestEntry(EntryStatus.ADDED, f) for f in self.change.added]
            self._added_manifest = write_manifest(self.io, self._abs(rel), rel, entries, spec, base.schema,
                                                  snapshot_id=self.snapshot_id, sequence_number=0,
                                                  format_version=base.format_version)
            remember_entries(self.io, self._abs(rel), entries)
        return self._added_manifest

    def _merge_small_manifests(self, base: TableMetadata, manifests: list[ManifestFile], sequence: int
                               ) -> tuple[list[ManifestFile], list[str]]:
        """Keep the manifest list short on append-heavy tables (COMMIT-8, ML-6).

        Small manifests (under ``write.manifest.target-size-bytes``) of one spec are merged
        by size tier when a tier holds more than ``commit.manifest.min-count-to-merge``
        (:func:`~lakefmt.manifest.merge_groups`): planning reads a few manifests however
        many appends came before, and an append never rewrites the whole table.
        """
        min_count = int_property(base.properties, MANIFEST_MIN_MERGE_COUNT)
        target = int_property(base.properties, MANIFEST_TARGET_SIZE)
        if min_count == 0 or len(manifests) <= min_count:
            return manifests, []
        small_by_spec: dict[int, list[ManifestFile]] = {}
        own = self._added_manifest.path if self._added_manifest is not None else None
        for m in manifests:
            if m.length < target and m.path != own:  # merging its own would leave that file unreferenced
                small_by_spec.setdefault(m.spec_id, []).append(m)
        out, written = list(manifests), []
        for spec_id, small in [(spec_id, group) for spec_id, candidates in small_by_spec.items()
                               for group in merge_groups(candidates, min_count)]:
            entries: list[ManifestEntry] = []
            for m, m_entries in zip(small, _read_many(self.io, self.location, small, base)):
                for e in m_entries:
                    if not e.is_live:
                        continue
                    if e.snapshot_id == self.snapshot_id and e.status == EntryStatus.ADDED:
                        entries.append(replace(e, snapshot_id=None, sequence_number=None))
                    else:
                        entries.append(replace(e, status=EntryStatus.EXISTING))
            rel = f"metadata/m-{self._unique()}.manifest.parquet"
            merged = write_manifest(self.io, self._abs(rel), rel, entries, base.spec_by_id(spec_id),
                                    base.schema, snapshot_id=self.snapshot_id, sequence_number=sequence,
                                    format_version=self._format_version)
            remember_entries(self.io, self._abs(rel), entries)
            written.append(self._abs(rel))
            merged_paths = {m.path for m in small}
            out = [merged] + [m for m in out if m.path not in merged_paths]
        return out, written

    def _remove_files(self, base: TableMetadata, manifests: list[ManifestFile], sequence: int
                      ) -> tuple[list[ManifestFile], list[str]]:
        """Rewrite the manifests holding removed files or files with new deleted rows.

        A removed file must still be live, with the vector it was read with (COMMIT-9,
        ROWDEL-4); a file with new deleted rows gets one new vector, the union with a
        vector another commit gave it meanwhile (ROWDEL-3), and is removed instead when
        that vector would delete every row (DV-7). All vectors of the attempt go into one
        file (LAYOUT-12).
        """
        to_remove = {f.path: f for f in self.change.removed}
        to_update = {d.data_file.path: d for d in self.change.deletes}
        touched = [*self.change.removed, *(d.data_file for d in self.change.deletes)]
        # An erasure also drops the DELETED entries earlier commits left, with their bounds (ROWDEL-17).
        forget = self.change.forget_removed_values
        candidates = [m for m in manifests if _may_hold(m, touched, base) or (forget and m.deleted_files_count)]
        entries_by_manifest = dict(zip(
            [m.path for m in candidates],
            _read_many(self.io, self.location, candidates, base)))
        found: set[str] = set()
        out: list[ManifestFile] = []
        written: list[str] = []
        vectors = dv.DeletionVectorWriter(self.io, self.location, self.token)
        pending: list[tuple[ManifestFile, list[ManifestEntry]]] = []
        for m in manifests:
            entries = entries_by_manifest.get(m.path)
            if entries is None or not (forget and m.deleted_files_count) and not any(
                    e.is_live and (e.data_file.path in to_remove or e.data_file.path in to_update) for e in entries):
                out.append(m)
                continue
            new_entries = []
            for e in entries:
                if not e.is_live:
                    continue
                path = e.data_file.path
                if path in to_remove:
                    found.add(path)
                    self._check_unchanged(to_remove[path], e.data_file)
                    gone = e.data_file
                    if forget:
                        gone = replace(gone, lower_bounds={}, upper_bounds={})
                    new_entries.append(ManifestEntry(EntryStatus.DELETED, gone, self.snapshot_id, e.sequence_number))
                    self._stats.removed(e.data_file)
                elif path in to_update:
                    found.add(path)
                    new_entries.append(self._with_deletes(e, to_update[path], vectors))
                else:  # built directly: dataclasses.replace costs twice as much, per entry of the manifest
                    new_entries.append(ManifestEntry(EntryStatus.EXISTING, e.data_file, e.snapshot_id,
                                                     e.sequence_number))
            pending.append((m, new_entries))
        missing = (set(to_remove) | set(to_update)) - found
        if missing:
            raise CommitConflictError(
                f"{len(missing)} file(s) this {self.change.operation} removes or deletes rows from are no longer "
                f"in the table (removed by a concurrent commit), e.g. {sorted(missing)[0]}", missing_files=missing)
        vector_file = vectors.close()
        if vector_file is not None:
            written.append(vector_file)
        try:
            for m, new_entries in pending:
                rel = f"metadata/m-{self._unique()}.manifest.parquet"
                out.append(write_manifest(self.io, self._abs(rel), rel, new_entries, base.spec_by_id(m.spec_id),
                                          base.schema, snapshot_id=self.snapshot_id, sequence_number=sequence,
                                          format_version=self._format_version))
                written.append(self._abs(rel))
        except BaseException:
            self.io.delete_many(written)
            raise
        return out, written

    def _check_unchanged(self, as_read: DataFile, live: DataFile) -> None:
        """A removed file's rows must not have been deleted since it was read (ROWDEL-4)."""
        if as_read.deletion_vector != live.deletion_vector:
            raise CommitConflictError(
                f"rows of {live.path}, which this {self.change.operation} removes, were deleted by a concurrent "
                "commit after it read the file; its output would bring them back (ROWDEL-4)",
                missing_files={live.path})

    def _with_deletes(self, entry: ManifestEntry, deletes: RowDeletes, vectors: dv.DeletionVectorWriter
                      ) -> ManifestEntry:
        """The entry of a file with its new vector, or a DELETED entry when no row is left (DV-7)."""
        live = entry.data_file
        mask = deletes.deleted
        if live.deletion_vector != deletes.data_file.deletion_vector:  # ROWDEL-3: a concurrent delete
            mask = dv.union(mask, dv.read_deleted(self.io, self.location, live))
        count = dv.cardinality(mask)
        if count >= live.record_count:
            self._stats.removed(live)
            return replace(entry, status=EntryStatus.DELETED, snapshot_id=self.snapshot_id)
        before = live.deleted_record_count
        if count == before:
            return replace(entry, status=EntryStatus.EXISTING)
        ref = vectors.add(live, mask)
        self._stats.vector(before, count, had_vector=live.deletion_vector is not None)
        return replace(entry, status=EntryStatus.EXISTING, data_file=replace(live, deletion_vector=ref))

    def _validate_concurrent_additions(self, base: TableMetadata) -> None:
        """Overwrite/delete: no file a concurrent non-replace snapshot added may match the filter (COMMIT-10)."""
        planned = self.change.planned_snapshot_id
        if self.change.conflict_filter is None or base.current_snapshot_id == planned:
            return
        newer: list[Snapshot] = []
        for snap in base.iter_ancestors(base.current_snapshot_id):
            if snap.snapshot_id == planned:
                break
            newer.append(snap)
        else:
            if planned is not None:
                raise CommitConflictError(f"snapshot {planned} this {self.change.operation} was planned on "
                                          "is no longer an ancestor of the current snapshot")
        schema = base.schema
        metrics = MetricsEvaluator(self.change.conflict_filter, schema)
        for snap in newer:
            if snap.operation == "replace":
                # Compaction adds no row (COMMIT-17): the files it removed are checked by COMMIT-9 and
                # ROWDEL-4, and a row-level operation that lost one replans (ROWDEL-5) instead of failing.
                continue
            manifests = [m for m in read_list(self.io, self._abs(snap.manifest_list))
                         if m.added_snapshot_id == snap.snapshot_id and m.added_files_count > 0]
            for m, entries in zip(manifests, _read_many(self.io, self.location, manifests, base)):
                partitions = PartitionEvaluator(self.change.conflict_filter, base.spec_by_id(m.spec_id), schema)
                for e in entries:
                    if (e.status == EntryStatus.ADDED and e.snapshot_id == snap.snapshot_id
                            and partitions.might_match(e.data_file.partition) and metrics.might_match(e.data_file)):
                        raise CommitConflictError(
                            f"a concurrent {snap.operation} (snapshot {snap.snapshot_id}) added "
                            f"{e.data_file.path}, which may hold rows matching this "
                            f"{self.change.operation}'s filter")

    def _summary(self, current: Snapshot | None) -> dict[str, str]:
        """Summary counts (SNAP-5); records are live rows, deleted positions excluded (DV-8)."""
        added, stats = self.change.added, self._stats
        removed = stats.removed_files
        prev = current.summary if current else {}
        totals = {k: int(prev.get(k, "0")) for k in ("total-data-files", "total-records", "total-files-size",
                                                       "total-position-deletes", "total-delete-vectors")}
        added_records = sum(f.record_count for f in added)
        deleted_records = sum(f.live_record_count for f in removed) + stats.added_positions
        summary = {
            "added-data-files": str(len(added)),
            "deleted-data-files": str(len(removed)),
            "added-records": str(added_records),
            "deleted-records": str(deleted_records),
            "added-files-size": str(sum(f.file_size_bytes for f in added)),
            "removed-files-size": str(sum(f.file_size_bytes for f in removed)),
            "total-data-files": str(totals["total-data-files"] + len(added) - len(removed)),
            "total-records": str(totals["total-records"] + added_records - deleted_records),
            "total-files-size": str(totals["total-files-size"] + sum(f.file_size_bytes for f in added)
                                    - sum(f.file_size_bytes for f in removed)),
        }
        if self._format_version >= 2:
            summary["added-position-deletes"] = str(stats.added_positions)
            summary["total-position-deletes"] = str(totals["total-position-deletes"] + stats.positions_delta)
            summary["total-delete-vectors"] = str(totals["total-delete-vectors"] + stats.vectors_delta)
        summary.update(self.change.summary)
        if self.change.writer_batch is not None:
            summary.update(self.change.writer_batch.summary())
        return summary


@dataclass
class _DeleteStats:
    """What one attempt removed and deleted, for its summary (DV-8)."""

    removed_files: list[DataFile] = field(default_factory=list)
    added_positions: int = 0
    positions_delta: int = 0
    vectors_delta: int = 0

    def removed(self, f: DataFile) -> None:
        self.removed_files.append(f)
        self.positions_delta -= f.deleted_record_count
        self.vectors_delta -= f.deletion_vector is not None

    def vector(self, before: int, after: int, *, had_vector: bool) -> None:
        self.added_positions += after - before
        self.positions_delta += after - before
        self.vectors_delta += not had_vector


def _may_hold(manifest: ManifestFile, files: list[DataFile], base: TableMetadata) -> bool:
    """Whether the manifest's partition summaries admit any of ``files`` (cheap pre-filter)."""
    if manifest.live_files_count == 0:
        return False
    types = [t for _, t in base.spec_by_id(manifest.spec_id).partition_type(base.schema)]
    bounds = [(s.contains_null, decode_bound(t, s.lower_bound), decode_bound(t, s.upper_bound))
              for s, t in zip(manifest.partitions, types)]
    for f in files:
        if f.spec_id != manifest.spec_id:
            continue
        if len(bounds) != len(f.partition) or all(
                (has_null if v is None else (low is None or low <= v) and (high is None or v <= high))
                for v, (has_null, low, high) in zip(f.partition, bounds)):
            return True
    return False


def _read_many(io: FileIO, location: str, manifests: list[ManifestFile], base: TableMetadata
               ) -> list[list[ManifestEntry]]:
    def read(m: ManifestFile) -> list[ManifestEntry]:
        return read_entries(io, f"{location}/{m.path}", m, base.spec_by_id(m.spec_id), base.schema)

    return thread_map(read, manifests, 8)
