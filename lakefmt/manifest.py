"""Manifests and manifest lists: the file tree under a snapshot (spec/manifests.md).

A *manifest* is a Parquet file with one row per data file (MAN-1..MAN-10); a
*manifest list* is a Parquet file with one row per manifest (ML-1..ML-7). Both
are immutable once written (LAYOUT-4).

Entries added by a snapshot may leave ``snapshot_id`` and ``sequence_number``
null; readers inherit them from the manifest-list row (MAN-5). That is what lets
a writer retry a commit without rewriting its manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from enum import IntEnum
from itertools import repeat
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lakefmt.deletion_vectors import DeletionVector

STATS_FIELDS = ("value_counts", "null_value_counts", "lower_bounds", "upper_bounds")


class EntryStatus(IntEnum):
    """Status of a manifest entry (MAN-3)."""

    EXISTING = 0
    ADDED = 1
    DELETED = 2


@dataclass(frozen=True)
class DataFile:
    """A data file and the statistics readers prune with (MAN-6, MAN-7), and its deletion vector (DV-5).

    ``path`` is relative to the table location (LAYOUT-2). ``partition`` holds
    physical partition values in spec order. Bounds are serialized bytes keyed by
    field id (TYPE-6); a missing key means "unknown", never "empty".

    Statistics of a file read from a manifest are decoded on first use (see
    :func:`data_files_from_manifest`): planning a table of many files mostly needs paths,
    partitions and counts, and building four dicts per file was most of its cost.
    """

    path: str
    partition: tuple[Any, ...]
    record_count: int
    file_size_bytes: int
    spec_id: int = 0
    file_format: str = "parquet"
    value_counts: dict[int, int] = field(default_factory=dict)
    null_value_counts: dict[int, int] = field(default_factory=dict)
    lower_bounds: dict[int, bytes] = field(default_factory=dict)
    upper_bounds: dict[int, bytes] = field(default_factory=dict)
    sort_order_id: int | None = None
    deletion_vector: DeletionVector | None = None  # format version 2 (DV-5): the rows deleted from the file

    @property
    def deleted_record_count(self) -> int:
        """Rows of the file its deletion vector deletes (0 without one)."""
        return 0 if self.deletion_vector is None else self.deletion_vector.cardinality

    @property
    def live_record_count(self) -> int:
        """Rows of the file that are part of the table: ``record_count`` less the deleted ones (DV-6)."""
        return self.record_count - self.deleted_record_count

    def __hash__(self) -> int:
        return hash(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataFile) and other.path == self.path

    def __getattr__(self, name: str) -> Any:
        """Only called for an attribute not set: the statistics of a file whose manifest row is not decoded yet.

        The four maps are set together, and the reference to the decoder dropped only after,
        so a thread that asks meanwhile either decodes the same row again or finds them set.
        """
        if name not in STATS_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        state = self.__dict__
        source, row = state.get("_stats"), state.get("_stats_row")
        if source is not None and row is not None:
            for key, value in zip(STATS_FIELDS, source.row_stats(row)):
                state.setdefault(key, value)
            state.pop("_stats", None)
            state.pop("_stats_row", None)
        try:
            return state[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and copied with every field decoded (a Spark task or another process has no decoder)."""
        return {name: getattr(self, name) for name in _DATA_FILE_FIELDS}


_DATA_FILE_FIELDS = tuple(f.name for f in fields(DataFile))


class StatsSource(Protocol):
    """Decodes the statistics maps of one manifest row, in the order of :data:`STATS_FIELDS`."""

    def row_stats(self, row: int) -> Sequence[dict[Any, Any]]: ...


def data_files_from_manifest(paths: Sequence[str], partitions: Sequence[tuple[Any, ...]],
                             record_counts: Sequence[int], sizes: Sequence[int], spec_id: int,
                             formats: Sequence[str] | str, sort_order_ids: Sequence[int | None] | int | None,
                             deletion_vectors: Sequence[DeletionVector | None] | None,
                             stats: StatsSource) -> list[DataFile]:
    """A :class:`DataFile` per manifest row, whose statistics ``stats`` decodes on first access (MAN-6, MAN-7).

    Built without the dataclass ``__init__`` (a third of the cost): the decoder has
    validated the columns, and the statistics maps stay absent from each instance until
    :meth:`DataFile.__getattr__` asks ``stats`` for its row. A column that holds one value
    for every row may be passed as that value (``formats`` a string, ``sort_order_ids`` an
    int or None; ``deletion_vectors`` None when no row has one): a field at its default is
    then left out of the instances, which read it from the class.
    """
    new, set_state = object.__new__, object.__setattr__
    n = len(paths)
    out = list(map(new, repeat(DataFile, n)))  # no Python frame per instance, unlike a list comprehension
    one_order = sort_order_ids is None or isinstance(sort_order_ids, int)
    if isinstance(formats, str) and one_order and deletion_vectors is None:
        # The usual manifest: four fields per file and the decoder, plus the constants not at their default.
        common = {name: value for name, value in (("spec_id", spec_id), ("file_format", formats),
                                                  ("sort_order_id", sort_order_ids)) if value != _DEFAULTS[name]}
        for f, row, path, partition, record_count, size in zip(out, range(n), paths, partitions, record_counts,
                                                               sizes):
            state = {"path": path, "partition": partition, "record_count": record_count, "file_size_bytes": size,
                     "_stats": stats, "_stats_row": row}
            if common:
                state.update(common)
            set_state(f, "__dict__", state)
        return out
    each_format = [formats] * n if isinstance(formats, str) else formats
    each_order = sort_order_ids if isinstance(sort_order_ids, Sequence) else [sort_order_ids] * n
    each_vector = [None] * n if deletion_vectors is None else deletion_vectors
    for row, (f, path, partition, record_count, size, file_format, sort_order_id, vector) in enumerate(
            zip(out, paths, partitions, record_counts, sizes, each_format, each_order, each_vector)):
        set_state(f, "__dict__", {"path": path, "partition": partition, "record_count": record_count,
                                  "file_size_bytes": size, "spec_id": spec_id, "file_format": file_format,
                                  "sort_order_id": sort_order_id, "deletion_vector": vector,
                                  "_stats": stats, "_stats_row": row})
    return out


_DEFAULTS = {f.name: f.default for f in fields(DataFile) if f.name in ("spec_id", "file_format", "sort_order_id",
                                                                        "deletion_vector")}


@dataclass(frozen=True)
class ManifestEntry:
    """One row of a manifest: a data file with its status in the owning snapshot."""

    status: EntryStatus
    data_file: DataFile
    snapshot_id: int | None = None
    sequence_number: int | None = None

    def inherit(self, snapshot_id: int, sequence_number: int) -> ManifestEntry:
        """Fill null ids from the manifest-list row (MAN-5)."""
        if self.snapshot_id is not None and self.sequence_number is not None:
            return self
        return replace(
            self,
            snapshot_id=self.snapshot_id if self.snapshot_id is not None else snapshot_id,
            sequence_number=self.sequence_number if self.sequence_number is not None else sequence_number,
        )

    @property
    def is_live(self) -> bool:
        return self.status != EntryStatus.DELETED


@dataclass(frozen=True)
class FieldSummary:
    """Summary of one partition field over a manifest's live entries (ML-4)."""

    contains_null: bool
    lower_bound: bytes | None = None
    upper_bound: bytes | None = None


@dataclass(frozen=True)
class ManifestFile:
    """One row of a manifest list: a manifest and its counts (ML-2..ML-4)."""

    path: str
    length: int
    spec_id: int
    added_snapshot_id: int
    sequence_number: int
    added_files_count: int
    existing_files_count: int
    deleted_files_count: int
    added_rows_count: int
    existing_rows_count: int
    deleted_rows_count: int
    partitions: tuple[FieldSummary, ...] = ()

    @property
    def live_files_count(self) -> int:
        return self.added_files_count + self.existing_files_count


_STATUSES = (EntryStatus.EXISTING, EntryStatus.ADDED, EntryStatus.DELETED)


class ManifestContents:
    """The entries of one manifest, column by column, as written (before inheritance, MAN-5).

    Manifests are immutable (LAYOUT-4), so a decoded manifest can be shared by every
    read of it: planning takes its live files (READ-5, READ-9) without building a
    :class:`ManifestEntry` per row, and ``derived`` keeps what a reader computes from the
    contents (planning keeps its scan tasks there, by table location).
    """

    __slots__ = ("statuses", "snapshot_ids", "sequence_numbers", "data_files", "derived", "_live", "_inherited")

    def __init__(self, statuses: list[int], snapshot_ids: list[int | None], sequence_numbers: list[int | None],
                 data_files: list[DataFile]) -> None:
        self.statuses = statuses
        self.snapshot_ids = snapshot_ids
        self.sequence_numbers = sequence_numbers
        self.data_files = data_files
        self.derived: dict[Any, Any] = {}
        self._live: list[DataFile] | None = None
        self._inherited: tuple[int, int, list[ManifestEntry]] | None = None

    @staticmethod
    def from_entries(entries: Sequence[ManifestEntry]) -> ManifestContents:
        return ManifestContents([int(e.status) for e in entries], [e.snapshot_id for e in entries],
                                [e.sequence_number for e in entries], [e.data_file for e in entries])

    def __len__(self) -> int:
        return len(self.data_files)

    @property
    def live_files(self) -> list[DataFile]:
        """The files of the ADDED and EXISTING entries (ML-5), in manifest order; do not modify."""
        live = self._live
        if live is None:
            deleted = int(EntryStatus.DELETED)
            live = ([f for s, f in zip(self.statuses, self.data_files) if s != deleted]
                    if deleted in self.statuses else self.data_files)
            self._live = live
        return live

    def entries(self, snapshot_id: int | None = None, sequence_number: int | None = None) -> list[ManifestEntry]:
        """The entries, with null ids inherited from the manifest-list row when given (MAN-5); a new list."""
        done = self._inherited
        if done is not None and done[0] == snapshot_id and done[1] == sequence_number:
            return list(done[2])
        statuses = [_STATUSES[s] for s in self.statuses]
        snaps = self.snapshot_ids if snapshot_id is None else [
            snapshot_id if s is None else s for s in self.snapshot_ids]
        seqs = self.sequence_numbers if sequence_number is None else [
            sequence_number if s is None else s for s in self.sequence_numbers]
        out = list(map(ManifestEntry, statuses, self.data_files, snaps, seqs))
        if snapshot_id is not None and sequence_number is not None:
            self._inherited = (snapshot_id, sequence_number, out)
        return list(out)


def merge_groups(small: Sequence[ManifestFile], min_count: int) -> list[list[ManifestFile]]:
    """Which small manifests of one spec an append merges (COMMIT-8): size-tiered, as an LSM tree does.

    A manifest's tier is ``floor(log_b(live entries))`` with ``b = min_count + 1``. When a
    tier holds more than ``min_count`` manifests they become one, which has at least ``b``
    times the entries of the tier and so lands in a higher one; that tier is then checked
    the same way, so a cascade is written once. Each entry is rewritten about once per
    tier, ``log_b`` of the table's entry count times in all, instead of whenever the count
    passes ``min_count`` as merging every small manifest would: the list stays at most
    ``min_count`` manifests per tier and an append never rewrites the whole table.
    Returns the groups to merge, each of two or more manifests.
    """
    if min_count <= 0:
        return []
    base = min_count + 1

    def tier(entries: int) -> int:
        t = 0
        while entries >= base:
            entries //= base
            t += 1
        return t

    units: list[tuple[int, list[ManifestFile]]] = [(m.live_files_count, [m]) for m in small]
    while True:
        tiers: dict[int, list[tuple[int, list[ManifestFile]]]] = {}
        for unit in units:
            tiers.setdefault(tier(unit[0]), []).append(unit)
        full = [t for t, members in tiers.items() if len(members) > min_count]
        if not full:
            return [group for _, group in units if len(group) > 1]
        lowest = min(full)
        merged = (sum(n for n, _ in tiers[lowest]), [m for _, group in tiers[lowest] for m in group])
        units = [u for u in units if tier(u[0]) != lowest] + [merged]
