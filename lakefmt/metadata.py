"""Table metadata (spec/metadata.md, META-* and SNAP-*).

Table metadata is one immutable JSON document per table version. It holds the
schemas, partition specs, sort orders, properties and the newest snapshots; in format
version 2, older snapshots live in history files it names (META-13,
:mod:`lakefmt.snapshot_history`). The catalog points at the current document. This
module is the in-memory model and its JSON form; it reads nothing but the metadata file
(:func:`read_metadata`) and, on demand, history files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

from lakefmt.errors import CorruptMetadataError, NoSuchSnapshotError
from lakefmt.io import FileIO
from lakefmt.partitioning import PartitionSpec
from lakefmt.schema import Schema
from lakefmt.snapshot_history import HistoryRef, HistorySegment, HistoryView, load_segment
from lakefmt.snapshots import OPERATIONS, LogEntry, Operation, Snapshot
from lakefmt.sorting import SortOrder

__all__ = ["FORMAT_VERSION", "FORMAT_VERSIONS", "OPERATIONS", "LogEntry", "Operation", "Snapshot", "TableMetadata",
           "iso_utc", "read_metadata"]

FORMAT_VERSION = 2  # of a new table (META-11); version 1 only when asked for (FMT-4)
FORMAT_VERSIONS = (1, 2)  # what this implementation reads and writes (FMT-1, FMT-2)


@dataclass(frozen=True)
class TableMetadata:
    """One version of a table's metadata (META-1..META-19).

    ``inline_snapshots`` and ``inline_snapshot_log`` are the metadata file's own
    ``snapshots`` and ``snapshot-log``; ``snapshot_history`` names the history files that
    hold the older ones (format version 2, META-13). :attr:`snapshots` and
    :attr:`snapshot_log` are all of them, read from history files only as far as a caller
    goes; a commit never needs more than the inline ones.
    """

    table_uuid: str
    location: str
    last_sequence_number: int
    last_updated_ms: int
    last_column_id: int
    schemas: tuple[Schema, ...]
    current_schema_id: int
    partition_specs: tuple[PartitionSpec, ...]
    default_spec_id: int
    last_partition_id: int
    sort_orders: tuple[SortOrder, ...]
    default_sort_order_id: int
    properties: dict[str, str]
    current_snapshot_id: int | None
    inline_snapshots: tuple[Snapshot, ...]
    inline_snapshot_log: tuple[LogEntry, ...]
    metadata_log: tuple[LogEntry, ...]
    format_version: int = FORMAT_VERSION
    snapshot_history: tuple[HistoryRef, ...] = ()
    history_io: FileIO | None = field(default=None, compare=False, repr=False)  # reads history files

    # -- lookups ---------------------------------------------------------------
    @property
    def schema(self) -> Schema:
        return self.schema_by_id(self.current_schema_id)

    def schema_by_id(self, schema_id: int) -> Schema:
        for s in self.schemas:
            if s.schema_id == schema_id:
                return s
        raise CorruptMetadataError(f"metadata names schema {schema_id}, which it does not contain")

    @property
    def spec(self) -> PartitionSpec:
        return self.spec_by_id(self.default_spec_id)

    def spec_by_id(self, spec_id: int) -> PartitionSpec:
        for s in self.partition_specs:
            if s.spec_id == spec_id:
                return s
        raise CorruptMetadataError(f"metadata names partition spec {spec_id}, which it does not contain")

    @property
    def sort_order(self) -> SortOrder:
        for o in self.sort_orders:
            if o.order_id == self.default_sort_order_id:
                return o
        raise CorruptMetadataError(f"missing sort order {self.default_sort_order_id}")

    # -- snapshots: inline and in history files (META-13) ------------------------------------
    @property
    def snapshots(self) -> HistoryView:
        """Every retained snapshot in commit order: the history files' runs, then the inline ones.

        ``len()`` and the newest snapshots read no history file; iterating does, lazily.
        """
        return HistoryView(self, log=False)

    @property
    def snapshot_log(self) -> HistoryView:
        """The whole snapshot log (META-8), oldest first: the history files' runs, then the inline entries."""
        return HistoryView(self, log=True)

    def history_segment(self, ref: HistoryRef) -> HistorySegment:
        """The content of one history file (read once per process and cached: it never changes)."""
        return load_segment(self.history_io, self.location, ref, self.table_uuid)

    @property
    def current_snapshot(self) -> Snapshot | None:
        if self.current_snapshot_id is None:
            return None
        found = self._inline_by_id.get(self.current_snapshot_id)  # always inline (META-16)
        return found if found is not None else self.snapshot_by_id(self.current_snapshot_id)

    def snapshot_by_id(self, snapshot_id: int, *, table: str | None = None) -> Snapshot:
        """The retained snapshot ``snapshot_id``; ``table`` (``namespace.name``) names the table in the error."""
        found = self._find(snapshot_id)
        if found is None:
            raise NoSuchSnapshotError(
                f"{_table_text(table, self.location)} has no snapshot {snapshot_id}: it never existed or was "
                f"expired ({len(self.snapshots)} snapshots are retained; list them with `lakefmt snapshots` or "
                "table.snapshots())")
        return found

    def has_snapshot(self, snapshot_id: int) -> bool:
        """Whether ``snapshot_id`` is retained, inline or in a history file (which may be read to know)."""
        return self._find(snapshot_id) is not None

    def is_inline(self, snapshot_id: int) -> bool:
        """Whether ``snapshot_id`` is one of the metadata file's own snapshots (reads nothing)."""
        return snapshot_id in self._inline_by_id

    def _find(self, snapshot_id: int) -> Snapshot | None:
        """The snapshot, from the inline ones, else from the history files, newest first.

        History files are indexed as far as a lookup has gone back, so a walk through the
        ancestry reads each file once and looks each id up once.
        """
        found = self._inline_by_id.get(snapshot_id)
        if found is not None or not self.snapshot_history:
            return found
        index: dict[int, Snapshot] = self.__dict__.setdefault("_history_index", {})
        found = index.get(snapshot_id)
        history = self.snapshot_history
        while found is None and self.__dict__.get("_history_indexed_from", len(history)) > 0:
            k = self.__dict__.get("_history_indexed_from", len(history)) - 1
            segment = self.history_segment(history[k])
            index.update(segment.by_id)
            self.__dict__["_history_indexed_from"] = k
            found = segment.by_id.get(snapshot_id)
        return found

    @cached_property
    def _inline_by_id(self) -> dict[int, Snapshot]:  # a commit looks ids up several times
        return {s.snapshot_id: s for s in self.inline_snapshots}

    def snapshot_as_of(self, timestamp_ms: int, *, table: str | None = None) -> Snapshot:
        """The snapshot that was current at ``timestamp_ms`` (READ-2); ``table`` names the table in the error.

        The inline log is searched first; a history file is read only when the time is older
        than the inline log and not older than the file's first entry (META-14).
        """
        best = next((e for e in reversed(self.inline_snapshot_log) if e.timestamp_ms <= timestamp_ms), None)
        for ref in reversed(self.snapshot_history):
            if best is not None:
                break
            if ref.log_entry_count and ref.first_log_timestamp_ms is not None \
                    and ref.first_log_timestamp_ms <= timestamp_ms:
                best = next(e for e in reversed(self.history_segment(ref).log) if e.timestamp_ms <= timestamp_ms)
        if best is None:
            log = self.snapshot_log
            first = (f"; its oldest recorded snapshot became current at {iso_utc(log[0].timestamp_ms)}"
                     if len(log) else "; it has no snapshot yet")
            raise NoSuchSnapshotError(f"{_table_text(table, self.location)} had no snapshot at or before "
                                      f"{iso_utc(timestamp_ms)}{first}")
        return self.snapshot_by_id(best.value, table=table)

    def iter_ancestors(self, snapshot_id: int | None) -> Iterator[Snapshot]:
        """The snapshot and its ancestors, newest first, as far as they are retained; history files are read
        only when the walk gets past the inline snapshots, each once."""
        while snapshot_id is not None:
            snap = self._find(snapshot_id)
            if snap is None:
                return
            yield snap
            snapshot_id = snap.parent_snapshot_id

    def ancestors(self, snapshot_id: int | None) -> list[Snapshot]:
        """The snapshot and its ancestors, newest first, as far as they are retained."""
        return list(self.iter_ancestors(snapshot_id))

    def property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    # -- JSON ------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The metadata file's JSON: the inline snapshots and references to history files (META-1)."""
        return self._to_json([s.to_json() for s in self.inline_snapshots],
                             [{"timestamp-ms": e.timestamp_ms, "snapshot-id": e.value}
                              for e in self.inline_snapshot_log],
                             [r.to_json() for r in self.snapshot_history])

    def _to_json(self, snapshots: list[Any], snapshot_log: list[Any], history: list[Any]) -> dict[str, Any]:
        out = {
            "format-version": self.format_version,
            "table-uuid": self.table_uuid,
            "location": self.location,
            "last-sequence-number": self.last_sequence_number,
            "last-updated-ms": self.last_updated_ms,
            "last-column-id": self.last_column_id,
            "current-schema-id": self.current_schema_id,
            "schemas": [s.to_json() for s in self.schemas],
            "default-spec-id": self.default_spec_id,
            "partition-specs": [s.to_json() for s in self.partition_specs],
            "last-partition-id": self.last_partition_id,
            "default-sort-order-id": self.default_sort_order_id,
            "sort-orders": [o.to_json() for o in self.sort_orders],
            "properties": dict(self.properties),
            "current-snapshot-id": self.current_snapshot_id,
            "snapshots": snapshots,
            "snapshot-log": snapshot_log,
        }
        if self.snapshot_history:  # META-13: only in version 2, and only when there is a history file
            out["snapshot-history"] = history
        out["metadata-log"] = [{"timestamp-ms": e.timestamp_ms, "metadata-file": e.value} for e in self.metadata_log]
        return out

    def dumps(self) -> str:
        """Compact JSON text, the same as ``json.dumps(self.to_json())``."""
        return self.dump_bytes().decode()

    def dump_bytes(self) -> bytes:
        """The UTF-8 bytes of :meth:`dumps`, built without serializing a snapshot twice.

        Inline snapshots, snapshot-log entries and history references are spliced in from
        their cached text, and the joined lists are carried from a metadata version to the
        next one that appends to them (:meth:`evolve`), so writing a new version costs about
        one copy of the old one's bytes, which history files keep small (META-17).
        """
        if self.snapshot_history and self.format_version < 2:
            raise ValueError("history files need format version 2 (META-13)")
        text = json.dumps(self._to_json([], [], []), separators=(",", ":"))
        # Inside JSON strings quotes are escaped, so these key sequences occur exactly once.
        marker = '"snapshots":[],"snapshot-log":[]' + (',"snapshot-history":[]' if self.snapshot_history else "")
        head, tail = text.split(marker, 1)
        parts = [head.encode(), b'"snapshots":[', self._snapshots_json, b'],"snapshot-log":[',
                 self._snapshot_log_json, b"]"]
        if self.snapshot_history:
            parts += [b',"snapshot-history":[', self._history_json, b"]"]
        parts.append(tail.encode())
        return b"".join(parts)

    @cached_property
    def _snapshots_json(self) -> bytes:
        return b",".join([_snapshot_text(s) for s in self.inline_snapshots])

    @cached_property
    def _snapshot_log_json(self) -> bytes:
        return b",".join([_log_entry_text(e) for e in self.inline_snapshot_log])

    @cached_property
    def _history_json(self) -> bytes:
        return b",".join([_history_text(r) for r in self.snapshot_history])

    def evolve(self, **changes: Any) -> TableMetadata:
        """``replace(self, **changes)``, keeping the joined text of the inline snapshots, the snapshot log and
        the history references when the change leaves them alone or appends to them (a commit does)."""
        new = replace(self, **changes)
        for cache, name, text in (("_snapshots_json", "inline_snapshots", _snapshot_text),
                                  ("_snapshot_log_json", "inline_snapshot_log", _log_entry_text),
                                  ("_history_json", "snapshot_history", _history_text)):
            joined = self.__dict__.get(cache)
            before, after = getattr(self, name), getattr(new, name)
            if joined is not None and after is before:
                new.__dict__[cache] = joined
                continue
            # Tuple equality checks identity first, element by element: C speed for a shared prefix.
            if joined is None or len(after) < len(before) or after[:len(before)] != before:
                continue
            if any(r.path is None for r in after[len(before):] if isinstance(r, HistoryRef)):
                continue  # a pending run has no text yet
            added = b",".join([text(x) for x in after[len(before):]])
            new.__dict__[cache] = joined + b"," + added if joined and added else joined or added
        index = self.__dict__.get("_inline_by_id")
        old = self.inline_snapshots
        if index is not None and new.inline_snapshots is old:
            new.__dict__["_inline_by_id"] = index
        elif index is not None and len(new.inline_snapshots) >= len(old) and new.inline_snapshots[:len(old)] == old:
            new.__dict__["_inline_by_id"] = {**index, **{s.snapshot_id: s for s in new.inline_snapshots[len(old):]}}
        return new

    @staticmethod
    def from_json(obj: dict[str, Any]) -> TableMetadata:
        if not isinstance(obj, dict):
            raise CorruptMetadataError("table metadata must be a JSON object")
        version = obj.get("format-version")
        if type(version) is not int or version not in FORMAT_VERSIONS:
            raise CorruptMetadataError(f"unsupported format-version {version!r}; this reader knows 1 and 2 "
                                       "(META-1, FMT-2)")
        if version < 2 and "snapshot-history" in obj:
            raise CorruptMetadataError("a format version 1 metadata file cannot have snapshot-history (META-13)")
        try:
            return TableMetadata(
                format_version=version,
                table_uuid=str(obj["table-uuid"]),
                location=str(obj["location"]),
                last_sequence_number=int(obj["last-sequence-number"]),
                last_updated_ms=int(obj["last-updated-ms"]),
                last_column_id=int(obj["last-column-id"]),
                schemas=tuple(Schema.from_json(s) for s in obj["schemas"]),
                current_schema_id=int(obj["current-schema-id"]),
                partition_specs=tuple(PartitionSpec.from_json(s) for s in obj["partition-specs"]),
                default_spec_id=int(obj["default-spec-id"]),
                last_partition_id=int(obj["last-partition-id"]),
                sort_orders=tuple(SortOrder.from_json(o) for o in obj["sort-orders"]),
                default_sort_order_id=int(obj["default-sort-order-id"]),
                properties={str(k): str(v) for k, v in obj.get("properties", {}).items()},
                current_snapshot_id=obj.get("current-snapshot-id"),
                inline_snapshots=tuple(Snapshot.from_json(s) for s in obj.get("snapshots", [])),
                inline_snapshot_log=tuple(LogEntry.snapshot_log_from_json(e) for e in obj.get("snapshot-log", [])),
                metadata_log=tuple(LogEntry(int(e["timestamp-ms"]), str(e["metadata-file"]))
                                   for e in obj.get("metadata-log", [])),
                snapshot_history=tuple(HistoryRef.from_json(r) for r in obj.get("snapshot-history", [])),
            )
        except CorruptMetadataError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptMetadataError(f"malformed table metadata: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def loads(text: str | bytes, *, source: str = "<memory>") -> TableMetadata:
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptMetadataError(f"metadata file {source} is not valid JSON "
                                       f"(truncated or corrupt): {exc}") from exc
        try:
            metadata = TableMetadata.from_json(obj)
        except CorruptMetadataError as exc:
            raise CorruptMetadataError(f"metadata file {source}: {exc}") from exc
        current = metadata.current_snapshot_id
        if current is not None and not metadata.is_inline(current):  # META-3 and META-16: the current is inline
            raise CorruptMetadataError(f"metadata file {source}: current-snapshot-id {current} names no snapshot "
                                       "of the file's snapshots (META-3, META-16)")
        return metadata


def read_metadata(io: FileIO, location: str) -> TableMetadata:
    """Read and validate a metadata JSON file; missing or corrupt files raise :class:`CorruptMetadataError`."""
    try:
        data = io.read_bytes(location)
    except FileNotFoundError as exc:
        raise CorruptMetadataError(f"metadata file {location} is missing") from exc
    metadata = TableMetadata.loads(data, source=location)
    # Relative paths resolve against the folder holding metadata/ (LAYOUT-3), so a copied table still reads.
    if "/metadata/" in location:
        return replace(metadata, location=location.rsplit("/metadata/", 1)[0], history_io=io)
    return replace(metadata, history_io=io)


def _snapshot_text(snapshot: Snapshot) -> bytes:
    return snapshot.json_text.encode()


def _log_entry_text(entry: LogEntry) -> bytes:
    return entry.snapshot_log_text.encode()


def _history_text(ref: HistoryRef) -> bytes:
    return ref.json_text.encode()


def iso_utc(timestamp_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, e.g. ``2026-01-15T10:00:00Z`` (milliseconds only when not zero)."""
    when = datetime.fromtimestamp(timestamp_ms / 1000, timezone.utc)
    text = when.isoformat(timespec="milliseconds" if timestamp_ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")


def _table_text(table: str | None, location: str) -> str:
    """How an error names a table: by ``namespace.name`` when the caller knows it, else by its location."""
    return f"table {table}" if table else f"the table at {location}"
