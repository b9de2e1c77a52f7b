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
from lakefmt.properties import INLINE_SNAPSHOTS_MAX, int_property
from lakefmt.schema import Schema
from lakefmt.snapshot_history import bring_inline, remove_snapshots, spill


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
    """The metadata that results from applying ``updates`` to ``base`` (pure: it writes nothing).

    In format version 2, snapshots beyond ``write.metadata.inline-snapshots-max`` move to
    pending history runs (META-17), which the commit writes as files before the metadata
    file (:func:`lakefmt.snapshot_history.write_pending`). History files are read only by
    updates that need old snapshots: a rollback to one, an expiry of one.
    """
    meta = base
    for update in updates:
        meta = _apply_one(meta, update, timestamp_ms)
    log = list(meta.metadata_log)
    if previous_location is not None:
        log.append(LogEntry(base.last_updated_ms, previous_location))
    log = log[-metadata_log_max:]
    meta = meta.evolve(last_updated_ms=max(timestamp_ms, base.last_updated_ms), metadata_log=tuple(log))
    return spill(meta, int_property(meta.properties, INLINE_SNAPSHOTS_MAX))


def _apply_one(meta: TableMetadata, update: Update, timestamp_ms: int) -> TableMetadata:
    if isinstance(update, AddSnapshot):
        snap = update.snapshot
        # Random 63-bit ids (SNAP-2): checked against the inline snapshots, so history is never read here.
        if meta.is_inline(snap.snapshot_id):
            raise ValidationError(f"snapshot id {snap.snapshot_id} already exists")
        if snap.sequence_number <= meta.last_sequence_number:
            raise ValidationError(f"sequence number {snap.sequence_number} is not above "
                                  f"{meta.last_sequence_number} (SNAP-3)")
        return meta.evolve(inline_snapshots=(*meta.inline_snapshots, snap), last_sequence_number=snap.sequence_number)
    if isinstance(update, SetCurrentSnapshot):
        if update.snapshot_id is not None:
            meta = bring_inline(meta, update.snapshot_id)  # the current snapshot is inline (META-16)
            log = (*meta.inline_snapshot_log, LogEntry(timestamp_ms, update.snapshot_id))
        else:
            log = meta.inline_snapshot_log
        return meta.evolve(current_snapshot_id=update.snapshot_id, inline_snapshot_log=log)
    if isinstance(update, RemoveSnapshots):
        if meta.current_snapshot_id in update.snapshot_ids:
            raise ValidationError("the current snapshot cannot be removed")
        return remove_snapshots(meta, frozenset(update.snapshot_ids))
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
