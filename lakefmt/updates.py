"""Metadata updates and requirements: commits as data (spec/commits.md §Updates, COMMIT-5).

Every change to a table is a list of updates applied by one pure function,
:func:`apply_updates`, to the base metadata, guarded by requirements that must
still hold on the base the commit is finally applied to. Retrying a commit means:
read the new base, check the requirements, apply the same updates, swap again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from lakefmt.errors import CommitConflictError, ValidationError
from lakefmt.metadata import FORMAT_VERSIONS, LogEntry, Snapshot, TableMetadata
from lakefmt.schema import Schema


@dataclass(frozen=True)
class AddSnapshot:
    snapshot: Snapshot


@dataclass(frozen=True)
class SetCurrentSnapshot:
    snapshot_id: int | None


@dataclass(frozen=True)
class RemoveSnapshots:
    snapshot_ids: frozenset[int]


@dataclass(frozen=True)
class AddSchema:
    schema: Schema
    last_column_id: int


@dataclass(frozen=True)
class SetCurrentSchema:
    schema_id: int


@dataclass(frozen=True)
class SetProperties:
    updates: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RemoveProperties:
    names: tuple[str, ...]


@dataclass(frozen=True)
class UpgradeFormatVersion:
    """Raise the table's format version (FMT-4); a lower or equal version leaves it unchanged."""

    format_version: int


Update = Union[AddSnapshot, SetCurrentSnapshot, RemoveSnapshots, AddSchema, SetCurrentSchema,
               SetProperties, RemoveProperties, UpgradeFormatVersion]


@dataclass(frozen=True)
class AssertCurrentSchema:
    """The commit was built on this schema; a concurrent schema change is a conflict."""

    schema_id: int

    def check(self, base: TableMetadata) -> None:
        if base.current_schema_id != self.schema_id:
            raise CommitConflictError(f"the table schema changed concurrently "
                                      f"(expected schema {self.schema_id}, found {base.current_schema_id})")


@dataclass(frozen=True)
class AssertCurrentSnapshot:
    """The commit was built on this snapshot (used by rollback-style operations)."""

    snapshot_id: int | None

    def check(self, base: TableMetadata) -> None:
        if base.current_snapshot_id != self.snapshot_id:
            raise CommitConflictError(f"the current snapshot changed concurrently "
                                      f"(expected {self.snapshot_id}, found {base.current_snapshot_id})")


@dataclass(frozen=True)
class AssertNotCurrent:
    """None of these snapshots became current: snapshot expiry may still remove them (MAINT-4)."""

    snapshot_ids: frozenset[int]

    def check(self, base: TableMetadata) -> None:
        if base.current_snapshot_id in self.snapshot_ids:
            raise CommitConflictError(f"snapshot {base.current_snapshot_id} became current concurrently; "
                                      "it can no longer be expired (MAINT-4)")


Requirement = Union[AssertCurrentSchema, AssertCurrentSnapshot, AssertNotCurrent]


def apply_updates(base: TableMetadata, updates: list[Update], *, timestamp_ms: int,
                  previous_location: str | None, metadata_log_max: int = 100) -> TableMetadata:
    """The metadata that results from applying ``updates`` to ``base`` (pure)."""
    meta = base
    for update in updates:
        meta = _apply_one(meta, update, timestamp_ms)
    log = list(meta.metadata_log)
    if previous_location is not None:
        log.append(LogEntry(base.last_updated_ms, previous_location))
    log = log[-metadata_log_max:]
    return meta.evolve(last_updated_ms=max(timestamp_ms, base.last_updated_ms), metadata_log=tuple(log))


def _apply_one(meta: TableMetadata, update: Update, timestamp_ms: int) -> TableMetadata:
    if isinstance(update, AddSnapshot):
        snap = update.snapshot
        if meta.has_snapshot(snap.snapshot_id):
            raise ValidationError(f"snapshot id {snap.snapshot_id} already exists")
        if snap.sequence_number <= meta.last_sequence_number:
            raise ValidationError(f"sequence number {snap.sequence_number} is not above "
                                  f"{meta.last_sequence_number} (SNAP-3)")
        return meta.evolve(snapshots=(*meta.snapshots, snap), last_sequence_number=snap.sequence_number)
    if isinstance(update, SetCurrentSnapshot):
        if update.snapshot_id is not None:
            meta.snapshot_by_id(update.snapshot_id)
            log = (*meta.snapshot_log, LogEntry(timestamp_ms, update.snapshot_id))
        else:
            log = meta.snapshot_log
        return meta.evolve(current_snapshot_id=update.snapshot_id, snapshot_log=log)
    if isinstance(update, RemoveSnapshots):
        if meta.current_snapshot_id in update.snapshot_ids:
            raise ValidationError("the current snapshot cannot be removed")
        return meta.evolve(
            snapshots=tuple(s for s in meta.snapshots if s.snapshot_id not in update.snapshot_ids),
            snapshot_log=tuple(e for e in meta.snapshot_log if e.value not in update.snapshot_ids),
        )
    if isinstance(update, AddSchema):
        return meta.evolve(schemas=(*meta.schemas, update.schema),
                       last_column_id=max(meta.last_column_id, update.last_column_id))
    if isinstance(update, SetCurrentSchema):
        meta.schema_by_id(update.schema_id)
        return meta.evolve(current_schema_id=update.schema_id)
    if isinstance(update, SetProperties):
        props = dict(meta.properties)
        props.update(dict(update.updates))
        return meta.evolve(properties=props)
    if isinstance(update, RemoveProperties):
        return meta.evolve(properties={k: v for k, v in meta.properties.items() if k not in update.names})
    if isinstance(update, UpgradeFormatVersion):
        if update.format_version not in FORMAT_VERSIONS:
            raise ValidationError(f"format version {update.format_version} is not one of {FORMAT_VERSIONS}")
        if update.format_version <= meta.format_version:
            return meta  # never downgraded (FMT-4)
        return meta.evolve(format_version=update.format_version)
    raise TypeError(f"unknown update {update!r}")
