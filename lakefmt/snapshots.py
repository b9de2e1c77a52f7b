"""A snapshot and an entry of the snapshot log (spec/metadata.md, SNAP-1, META-8).

Both are immutable values shared by the metadata file (:mod:`lakefmt.metadata`) and the
history files that hold older snapshots (:mod:`lakefmt.snapshot_history`, META-13). Each
caches its JSON text, so that writing a new metadata version never serializes an old
snapshot again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from lakefmt.errors import CorruptMetadataError

Operation = Literal["append", "overwrite", "delete", "replace"]
OPERATIONS = ("append", "overwrite", "delete", "replace")


@dataclass(frozen=True)
class Snapshot:
    """The state of a table at one commit (SNAP-1)."""

    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int
    timestamp_ms: int
    operation: Operation
    manifest_list: str
    schema_id: int
    summary: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot-id": self.snapshot_id,
            "parent-snapshot-id": self.parent_snapshot_id,
            "sequence-number": self.sequence_number,
            "timestamp-ms": self.timestamp_ms,
            "operation": self.operation,
            "summary": self.summary,
            "manifest-list": self.manifest_list,
            "schema-id": self.schema_id,
        }

    @cached_property
    def json_text(self) -> str:
        """The snapshot's JSON, serialized once: snapshots are immutable (SNAP-1)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Snapshot:
        if obj["operation"] not in OPERATIONS:
            raise CorruptMetadataError(f"unknown snapshot operation {obj['operation']!r}")
        return Snapshot(
            snapshot_id=int(obj["snapshot-id"]),
            parent_snapshot_id=obj.get("parent-snapshot-id"),
            sequence_number=int(obj["sequence-number"]),
            timestamp_ms=int(obj["timestamp-ms"]),
            operation=obj["operation"],
            manifest_list=str(obj["manifest-list"]),
            schema_id=int(obj["schema-id"]),
            summary={str(k): str(v) for k, v in obj.get("summary", {}).items()},
        )


@dataclass(frozen=True)
class LogEntry:
    timestamp_ms: int
    value: Any  # a snapshot id in the snapshot log, a metadata file in the metadata log

    @cached_property
    def snapshot_log_text(self) -> str:
        """This entry as an element of the snapshot log's JSON, serialized once."""
        return f'{{"timestamp-ms":{int(self.timestamp_ms)},"snapshot-id":{int(self.value)}}}'

    @staticmethod
    def snapshot_log_from_json(obj: dict[str, Any]) -> LogEntry:
        return LogEntry(int(obj["timestamp-ms"]), int(obj["snapshot-id"]))
