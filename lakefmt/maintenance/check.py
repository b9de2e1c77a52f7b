"""``lakefmt check``: validate a table at rest against spec/, citing requirement IDs (MAINT-14).

Levels, each including the previous one:

* ``metadata`` — the metadata file against the JSON Schema (META-2), its references
  (META-3), the location (LAYOUT-3), its history files (META-13 … META-16, LAYOUT-13: read,
  parsed and compared with their references, from storage), snapshot lineage and sequence numbers (SNAP-2,
  SNAP-3, META-8), every manifest list and manifest of every retained snapshot: paths
  (LAYOUT-2, MAN-8), counts (ML-3), partition summaries (ML-4), inheritance (MAN-5),
  duplicate live files (READ-9) and summary totals (SNAP-5), deletion vectors: each entry's
  and each snapshot's (:mod:`.check_vectors`, ROWDEL-14);
* ``files`` — every referenced file exists with the recorded size (LAYOUT-5, WRITE-6,
  ML-2), every deletion-vector file exists and holds the blobs pointed at (DV-4), and
  the metadata-log's files exist (MAINT-6);
* ``full`` (default) — every data file's footer and rows (:mod:`.check_files`) and every
  deletion-vector blob (:mod:`.check_vectors`).

Each distinct manifest list, manifest and data file is read once, however many
snapshots share it.

Example:
    >>> report = t.check()
    >>> report.ok, [str(v) for v in report.violations]
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from lakefmt.conversions import from_bytes
from lakefmt.deletion_vectors import DeletionVector
from lakefmt.errors import CorruptMetadataError, LakefmtError, MissingFileError
from lakefmt.io import normalize_location
from lakefmt.maintenance import check_vectors
from lakefmt.maintenance.check_files import Violation, check_data_file
from lakefmt.maintenance.metadata_schema import metadata_schema, validate_metadata
from lakefmt.maintenance.reachability import READ_THREADS, metadata_version, relativize, table_location
from lakefmt.manifest import DataFile, EntryStatus, ManifestEntry, ManifestFile
from lakefmt.manifest_io import read_manifest, read_manifest_list
from lakefmt.metadata import TableMetadata
from lakefmt.snapshot_history import HISTORY_FILE, read_segment

if TYPE_CHECKING:
    from lakefmt.table import Table

Level = Literal["metadata", "files", "full"]
_RELATIVE = re.compile(metadata_schema()["$defs"]["relativePath"]["pattern"])  # LAYOUT-2, as in the schema
_METADATA_NAME = re.compile(r"^metadata/v\d{6,}-[^/]+\.metadata\.json$")


@dataclass(frozen=True)
class CheckReport:
    """The outcome of a check: ``ok`` when there are no violations."""

    table: str
    metadata_location: str
    level: Level
    violations: tuple[Violation, ...]
    snapshots: int = 0
    manifest_lists: int = 0
    manifests: int = 0
    data_files: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def format(self) -> str:
        head = (f"{self.table}: {'OK' if self.ok else f'{len(self.violations)} violation(s)'} "
                f"(level {self.level}: {self.snapshots} snapshots, {self.manifest_lists} manifest lists, "
                f"{self.manifests} manifests, {self.data_files} data files)")
        return "\n".join([head, *(f"  {v}" for v in self.violations)])


def check_table(table: Table, *, level: Level = "full") -> CheckReport:
    """Validate ``table`` at rest; never raises for a violation, only reports it (MAINT-14)."""
    if level not in ("metadata", "files", "full"):
        raise ValueError(f"level must be 'metadata', 'files' or 'full', got {level!r}")
    table.refresh()
    checker = _Checker(table, level)
    checker.run()
    return CheckReport(table.name, table.metadata_location, level, tuple(checker.violations),
                       len(checker.snapshot_ids), len(checker.lists), len(checker.manifests),
                       len(checker.data_files))


class _Checker:
    def __init__(self, table: Table, level: Level) -> None:
        self.table, self.level, self.io = table, level, table.io
        self.metadata_location = table.metadata_location
        self.location = table_location(self.metadata_location)
        self.violations: list[Violation] = []
        self.snapshot_ids: set[int] = set()
        self.lists: dict[str, list[ManifestFile]] = {}
        self.manifests: dict[str, list[ManifestEntry]] = {}  # raw entries, nothing inherited
        self.data_files: dict[str, DataFile] = {}
        self.vectors: dict[check_vectors.Key, DataFile] = {}  # every (data file, vector) of any snapshot
        self.grown: list[check_vectors.Growth] = []  # vectors that changed from a parent snapshot (DV-9)
        self.format_version = 1
        self.sizes: dict[str, int] = {}
        self.unreadable: set[str] = set()  # manifest lists and manifests reported missing or unreadable

    def bad(self, requirement: str, message: str, path: str | None = None) -> None:
        self.violations.append(Violation(requirement, message, path))

    def run(self) -> None:
        meta = self._check_metadata_file()
        if meta is None:
            return
        self._check_lineage(meta)
        self.format_version = meta.format_version
        if self.level != "metadata":
            self.sizes = {rel: info.size for info in self.io.list_files(self.location)
                          if (rel := relativize(self.location, info.path)) is not None}
            for entry in meta.metadata_log:
                path = relativize(self.location, str(entry.value))
                if path is None or not self._exists(path):
                    self.bad("MAINT-6", "a metadata file named in the metadata-log is missing",
                             str(entry.value))
        # Each snapshot's vectors are kept until its retained children have been compared with them (DV-9).
        children = Counter(s.parent_snapshot_id for s in meta.snapshots)
        parents = {s.snapshot_id: s.parent_snapshot_id for s in meta.snapshots}
        vectors_of: dict[int, dict[str, list[DeletionVector]] | None] = {}
        for snap in sorted(meta.snapshots, key=lambda s: s.sequence_number):
            found = self._check_snapshot(meta, snap.snapshot_id, snap.manifest_list, snap.summary)
            parent = vectors_of.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
            if found is not None and parent is not None:
                live, vectors, where = found
                bad, grown = check_vectors.lineage_violations(snap.snapshot_id, parent, live, vectors, where)
                self.violations += bad
                self.grown += grown
            vectors_of[snap.snapshot_id] = found[1] if found is not None and children[snap.snapshot_id] else None
            parent_id = parents[snap.snapshot_id]
            if parent_id is not None and parent_id in vectors_of:
                children[parent_id] -= 1
                if not children[parent_id]:
                    vectors_of.pop(parent_id)
        if self.level != "metadata":
            self.violations += check_vectors.file_violations(
                self.io, self.location, self.vectors, resolve=lambda p: relativize(self.location, p),
                exists=self._exists, size=self.sizes.get, decode=self.level == "full", threads=READ_THREADS,
                grown=self.grown)
        if self.level == "full":
            self._check_data_files(meta)

    # -- the metadata file ---------------------------------------------------------------
    def _check_metadata_file(self) -> TableMetadata | None:
        here = self.metadata_location
        name = relativize(self.location, here) or here
        if not _METADATA_NAME.match(name):
            self.bad("LAYOUT-9", "the current metadata file is not named metadata/v{version:06d}-{unique}"
                                 ".metadata.json", here)
        try:
            raw = json.loads(self.io.read_bytes(here))
        except (OSError, ValueError) as exc:
            self.bad("META-1", f"the current metadata file is not readable JSON: {exc}", here)
            return None
        for message in validate_metadata(raw):
            self.bad("META-2", f"not valid against table-metadata.schema.json: {message}", here)
        recorded = raw.get("location") if isinstance(raw, dict) else None
        if isinstance(recorded, str) and recorded and normalize_location(recorded) != self.location:
            self.bad("LAYOUT-3", f"location {recorded!r} is not the folder holding metadata/ "
                                 f"({self.location})", here)
        try:
            meta = TableMetadata.from_json(raw)
        except CorruptMetadataError as exc:
            self.bad("META-1", str(exc), here)
            return None
        meta = self._check_history(meta, name)
        for what, ids in (("schema", [s.schema_id for s in meta.schemas]),
                          ("partition spec", [s.spec_id for s in meta.partition_specs]),
                          ("sort order", [o.order_id for o in meta.sort_orders])):
            for dup in sorted(i for i, n in Counter(ids).items() if n > 1):
                self.bad("META-3", f"{what} id {dup} appears more than once", here)
        schema_ids = {s.schema_id for s in meta.schemas}
        refs = [("current-schema-id", meta.current_schema_id, schema_ids),
                ("default-spec-id", meta.default_spec_id, {s.spec_id for s in meta.partition_specs}),
                ("default-sort-order-id", meta.default_sort_order_id, {o.order_id for o in meta.sort_orders})]
        if meta.current_snapshot_id is not None:
            snapshot_ids = {s.snapshot_id for s in meta.snapshots}
            refs.append(("current-snapshot-id", meta.current_snapshot_id, snapshot_ids))
        refs += [(f"schema-id of snapshot {s.snapshot_id}", s.schema_id, schema_ids) for s in meta.snapshots]
        for what, value, known in refs:
            if value not in known:
                self.bad("META-3", f"{what} {value} names nothing in the metadata", here)
        return meta

    def _check_history(self, meta: TableMetadata, name: str) -> TableMetadata:
        """Read every history file from storage and check it against its reference (META-13 … META-16,
        LAYOUT-13); the metadata returned holds the readable ones in memory, so nothing is read twice."""
        if not meta.snapshot_history:
            return meta
        here, current_version = self.metadata_location, metadata_version(name)
        refs, seen = [], set()
        for ref in meta.snapshot_history:
            path = ref.path or ""
            match = HISTORY_FILE.match(path)
            if match is None:
                self.bad("LAYOUT-13", "a history file is not named metadata/history-{version:06d}-{unique}.json",
                         path)
            elif current_version is not None and int(match.group(1)) > current_version:
                self.bad("LAYOUT-13", f"a history file's version {int(match.group(1))} is above the current "
                                      f"metadata version {current_version}", path)
            if path in seen:
                self.bad("META-14", "snapshot-history names this history file twice", path)
            seen.add(path)
            try:
                segment = read_segment(self.io, f"{self.location}/{path}", ref, meta.table_uuid)
            except MissingFileError:
                self.bad("LAYOUT-5", "a history file named in snapshot-history is missing", path)
                continue
            except CorruptMetadataError as exc:
                self.bad("META-15", str(exc), path)
                continue
            refs.append(replace(ref, segment=segment))
        ordered = [(r.first_sequence_number, r.last_sequence_number, r.path) for r in meta.snapshot_history]
        inline = [s.sequence_number for s in meta.inline_snapshots]
        if inline:
            ordered.append((min(inline), max(inline), "snapshots"))
        for (_, last, path), (first, _, after) in itertools.pairwise(ordered):
            if last >= first:
                self.bad("META-14", f"sequence numbers of {path} do not all come before those of {after}", here)
        if meta.current_snapshot_id is not None and not meta.is_inline(meta.current_snapshot_id):
            self.bad("META-16", f"the current snapshot {meta.current_snapshot_id} is not inline", here)
        return replace(meta, snapshot_history=tuple(refs), history_io=self.io)

    def _check_lineage(self, meta: TableMetadata) -> None:
        here = self.metadata_location
        by_id: dict[int, int] = {}
        for s in meta.snapshots:
            if s.snapshot_id in by_id:
                self.bad("SNAP-2", f"snapshot id {s.snapshot_id} appears more than once", here)
            by_id[s.snapshot_id] = s.sequence_number
        self.snapshot_ids = set(by_id)
        for seq, n in Counter(s.sequence_number for s in meta.snapshots).items():
            if n > 1:
                self.bad("SNAP-3", f"sequence number {seq} is used by {n} snapshots", here)
        for s in meta.snapshots:
            if s.sequence_number > meta.last_sequence_number:
                self.bad("SNAP-3", f"snapshot {s.snapshot_id} has sequence number {s.sequence_number} above "
                                   f"last-sequence-number {meta.last_sequence_number}", here)
            parent = s.parent_snapshot_id
            if parent is not None and parent in by_id and by_id[parent] >= s.sequence_number:
                self.bad("SNAP-3", f"snapshot {s.snapshot_id} (sequence {s.sequence_number}) does not come "
                                   f"after its parent {parent} (sequence {by_id[parent]})", here)
        times = [e.timestamp_ms for e in meta.snapshot_log]
        if any(a > b for a, b in itertools.pairwise(times)):
            self.bad("META-8", "snapshot-log timestamps decrease", here)

    # -- manifest lists and manifests ------------------------------------------------------
    def _check_snapshot(self, meta: TableMetadata, snapshot_id: int, list_path: str, summary: dict[str, str]
                        ) -> tuple[Counter[str], dict[str, list[DeletionVector]], str] | None:
        """Check one snapshot's tree; its live files, their vectors and its manifest list when all were read."""
        rel = self._relative(list_path, f"manifest list of snapshot {snapshot_id}")
        if rel is None:
            return None
        if rel not in self.lists:
            rows = self._read(lambda: read_manifest_list(self.io, f"{self.location}/{rel}"), rel)
            self.lists[rel] = rows or []
        rows = self.lists[rel]
        complete = rel not in self.unreadable  # totals are only compared when every manifest was read
        for path, n in Counter(m.path for m in rows).items():
            if n > 1:
                self.bad("ML-1", f"manifest {path} is listed {n} times", rel)
        live: Counter[str] = Counter()
        vectors: dict[str, list[DeletionVector]] = {}
        records = size = 0
        for m in rows:
            entries = self._manifest(meta, m, rel)
            if entries is None:
                complete = False
                continue
            for e in entries:
                if e.status != EntryStatus.DELETED:
                    f = e.data_file
                    live[f.path] += 1
                    records += f.live_record_count  # live rows: deleted positions excluded (DV-6)
                    size += f.file_size_bytes
                    if f.deletion_vector is not None:
                        vectors.setdefault(f.path, []).append(f.deletion_vector)
        for path, n in live.items():
            if n > 1:
                self.bad("READ-9", f"data file {path} is live in {n} entries of snapshot {snapshot_id}", rel)
        self.violations += check_vectors.snapshot_violations(snapshot_id, live, vectors, summary,
                                                             complete=complete, where=rel)
        totals = [("total-data-files", sum(live.values())), ("total-records", records), ("total-files-size", size)]
        for key, actual in totals:
            if complete and key in summary and summary[key].isdigit() and int(summary[key]) != actual:
                self.bad("SNAP-5", f"snapshot {snapshot_id} says {key} = {summary[key]}, its manifests hold "
                                   f"{actual}", rel)
        return (live, vectors, rel) if complete else None

    def _manifest(self, meta: TableMetadata, row: ManifestFile, list_rel: str) -> list[ManifestEntry] | None:
        rel = self._relative(row.path, f"manifest listed in {list_rel}")
        if rel is None:
            return None
        try:
            spec = meta.spec_by_id(row.spec_id)
        except CorruptMetadataError:
            self.bad("META-3", f"manifest {rel} has partition spec {row.spec_id}, which the metadata lacks",
                     list_rel)
            return None
        if rel not in self.manifests:
            raw = self._read(lambda: read_manifest(self.io, f"{self.location}/{rel}", row, spec, meta.schema,
                                                   inherit=False), rel)
            self.manifests[rel] = raw or []
            if raw is not None:
                self._check_size(rel, row.length, "ML-2")
                self._check_entries(rel, raw, spec.spec_id)
        if rel in self.unreadable:
            return None
        raw_entries = self.manifests[rel]
        self._check_counts(row, raw_entries, list_rel)
        self._check_summaries(meta, row, raw_entries, list_rel)
        entries = [e.inherit(row.added_snapshot_id, row.sequence_number) for e in raw_entries]
        for e in entries:
            rel = relativize(self.location, e.data_file.path)
            if e.is_live and rel is not None and rel not in self.data_files:  # outside: reported as MAN-8
                same = rel == e.data_file.path
                self.data_files[rel] = e.data_file if same else replace(e.data_file, path=rel)
            ref = e.data_file.deletion_vector
            if e.is_live and ref is not None:
                self.vectors.setdefault((e.data_file.path, ref), e.data_file)
        return entries

    def _check_entries(self, rel: str, raw: list[ManifestEntry], spec_id: int) -> None:
        for e in raw:
            f = e.data_file
            if not _RELATIVE.match(f.path) or not f.path.startswith("data/"):
                self.bad("MAN-8", f"file_path {f.path!r} is not a relative path under data/ (LAYOUT-2)", rel)
            if f.file_format != "parquet":
                self.bad("MAN-8", f"file_format of {f.path} is {f.file_format!r}, not 'parquet'", rel)
            if e.status == EntryStatus.EXISTING and (e.snapshot_id is None or e.sequence_number is None):
                self.bad("MAN-5", f"EXISTING entry of {f.path} does not carry its snapshot id and sequence "
                                  "number", rel)
            if e.status == EntryStatus.DELETED and e.sequence_number is None:
                self.bad("MAN-5", f"DELETED entry of {f.path} does not carry the file's sequence number", rel)
            if e.is_live:
                self.violations += check_vectors.entry_violations(f, rel, self.format_version)

    def _check_counts(self, row: ManifestFile, entries: list[ManifestEntry], list_rel: str) -> None:
        counts = {s: [0, 0] for s in EntryStatus}
        for e in entries:
            counts[e.status][0] += 1
            counts[e.status][1] += e.data_file.record_count
        recorded = {EntryStatus.ADDED: (row.added_files_count, row.added_rows_count),
                    EntryStatus.EXISTING: (row.existing_files_count, row.existing_rows_count),
                    EntryStatus.DELETED: (row.deleted_files_count, row.deleted_rows_count)}
        for status, (files, rows) in recorded.items():
            if (files, rows) != tuple(counts[status]):
                self.bad("ML-3", f"manifest {row.path}: {status.name} files/rows recorded as {files}/{rows}, "
                                 f"its entries hold {counts[status][0]}/{counts[status][1]}", list_rel)

    def _check_summaries(self, meta: TableMetadata, row: ManifestFile, entries: list[ManifestEntry],
                         list_rel: str) -> None:
        try:
            types = [t for _, t in meta.spec_by_id(row.spec_id).partition_type(meta.schema)]
        except LakefmtError:
            return
        if len(row.partitions) != len(types):
            self.bad("ML-4", f"manifest {row.path} has {len(row.partitions)} partition summaries for "
                             f"{len(types)} partition fields", list_rel)
            return
        for i, (summary, ltype) in enumerate(zip(row.partitions, types)):
            low = None if summary.lower_bound is None else from_bytes(ltype, summary.lower_bound)
            high = None if summary.upper_bound is None else from_bytes(ltype, summary.upper_bound)
            for e in entries:
                value = e.data_file.partition[i] if i < len(e.data_file.partition) else None
                if not e.is_live:
                    continue
                if value is None and not summary.contains_null:
                    self.bad("ML-4", f"manifest {row.path}: contains_null is false but {e.data_file.path} "
                                     "has a null partition value", list_rel)
                    break
                if value is not None and ((low is None or value < low) or (high is None or value > high)):
                    self.bad("ML-4", f"manifest {row.path}: partition value {value!r} of {e.data_file.path} "
                                     f"is outside the summary [{low!r}, {high!r}]", list_rel)
                    break

    # -- data files ----------------------------------------------------------------------
    def _check_data_files(self, meta: TableMetadata) -> None:
        present = [f for f in self.data_files.values()
                   if self._check_size(f.path, f.file_size_bytes, "WRITE-6")]

        def check(f: DataFile) -> list[Violation]:
            return check_data_file(self.io, self.location, f, meta.spec_by_id(f.spec_id), meta.schema)

        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
            for found in pool.map(check, present):
                self.violations += found

    def _check_size(self, rel: str, recorded: int | None, requirement: str) -> bool:
        """Whether ``rel`` exists (LAYOUT-5) with the ``recorded`` size (``requirement``).

        Not checked (always True) at level ``metadata``.
        """
        if self.level == "metadata":
            return True
        if not self._exists(rel):
            self.bad("LAYOUT-5", "a referenced file is missing (deleted while referenced?)", rel)
            return False
        actual = self.sizes.get(rel)
        if recorded is not None and actual is not None and actual != recorded:
            self.bad(requirement, f"recorded size {recorded} bytes, the file has {actual}", rel)
        return True

    def _exists(self, rel: str) -> bool:
        if rel in self.sizes:
            return True
        full = f"{self.location}/{rel}"
        if self.io.exists(full):  # not in the listing (a store that lists lazily): ask directly
            self.sizes[rel] = self.io.size(full)
            return True
        return False

    def _relative(self, path: str, what: str) -> str | None:
        rel = relativize(self.location, path)
        if rel is None:
            self.bad("LAYOUT-2", f"{what} {path!r} lies outside the table location")
        elif not _RELATIVE.match(path):
            self.bad("LAYOUT-2", f"{what} {path!r} is not a relative path in normal form")
        return rel

    def _read(self, read, rel: str):  # type: ignore[no-untyped-def]
        """Read a manifest list or manifest from storage (never from a cache): a missing file is LAYOUT-5,
        an unreadable one READ-10."""
        try:
            return read()
        except MissingFileError:
            self.bad("LAYOUT-5", "a referenced file is missing (deleted while referenced?)", rel)
        except CorruptMetadataError as exc:
            self.bad("READ-10", str(exc), rel)
        self.unreadable.add(rel)
        return None

