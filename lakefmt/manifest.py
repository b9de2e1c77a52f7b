"""Manifests and manifest lists: the file tree under a snapshot (spec/manifests.md).

A *manifest* is a Parquet file with one row per data file (MAN-1..MAN-10); a
*manifest list* is a Parquet file with one row per manifest (ML-1..ML-7). Both
are immutable once written (LAYOUT-4).

Entries added by a snapshot may leave ``snapshot_id`` and ``sequence_number``
null; readers inherit them from the manifest-list row (MAN-5). That is what lets
a writer retry a commit without rewriting its manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakefmt.deletion_vectors import DeletionVector


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
