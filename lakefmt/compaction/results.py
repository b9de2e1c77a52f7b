"""What a compaction run did, as frozen dataclasses (spec/compaction.md COMPACT-11, COMPACT-19).

:class:`CompactionResult` counts groups planned, committed, skipped and failed, the
files and bytes before and after, rows, seconds and the snapshots committed, with one
:class:`GroupResult` per group. :class:`ManifestRewriteResult` reports a manifest
compaction, including planning time before and after.

Example:
    >>> result = t.compaction.run(strategy="sort")
    >>> print(result.summary())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lakefmt.compaction.planner import TooYoung, format_bytes

GroupStatus = Literal["committed", "conflict", "lease-held", "quiet-window", "stopped", "failed"]


@dataclass(frozen=True)
class GroupResult:
    """The outcome of one group (COMPACT-18, COMPACT-19).

    ``status``: ``committed``; ``conflict`` (a source file was removed, or had rows
    deleted, concurrently (COMPACT-34); outputs deleted); ``lease-held`` (another compactor holds the partition);
    ``quiet-window`` (not started: a quiet window began); ``stopped`` (not started: the run
    was asked to stop, COMPACT-31); ``failed`` (see ``error``).
    """

    group_id: str
    partition: str
    status: GroupStatus
    input_files: int
    input_bytes: int
    output_files: int = 0
    output_bytes: int = 0
    rows: int = 0
    snapshot_id: int | None = None
    method: str | None = None
    seconds: float = 0.0
    error: str | None = None
    deleted_rows: int = 0
    """Input rows deletion vectors deleted, dropped by the rewrite (COMPACT-32); ``rows`` are the live ones."""

    @property
    def committed(self) -> bool:
        return self.status == "committed"


@dataclass(frozen=True)
class CompactionResult:
    """The outcome of ``t.compaction.run(...)``; frozen, with a readable :meth:`summary`."""

    table: str
    strategy: str
    groups_planned: int
    groups_committed: int
    groups_skipped: int
    groups_failed: int
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    files_rewritten: int
    files_written: int
    bytes_rewritten: int
    bytes_written: int
    rows_rewritten: int
    seconds: float
    snapshot_ids: tuple[int, ...]
    groups: tuple[GroupResult, ...]
    status: Literal["done", "nothing-to-do", "quiet-window", "stopped"] = "done"
    throttled_seconds: float = 0.0
    skipped_files: tuple[tuple[str, int], ...] = ()
    """Files the plan left out, per reason (COMPACT-11), e.g. ``(("too-young", 12),)``."""
    deleted_rows_dropped: int = 0
    """Rows the committed groups' inputs had deleted by deletion vectors: in no output (COMPACT-32)."""
    too_young: TooYoung | None = None
    """Files left out because their partitions are still being written (COMPACT-5): how many, when
    the youngest becomes eligible and how to override (``too_young.explain()``)."""

    def __repr__(self) -> str:
        left_out = (", left out: " + ", ".join(f"{n} {reason}" for reason, n in self.skipped_files)
                    if self.skipped_files else "")
        return (f"CompactionResult({self.table}, {self.strategy}: {self.groups_committed}/{self.groups_planned} "
                f"groups committed, {self.groups_skipped} skipped, {self.groups_failed} failed; files "
                f"{self.files_before} -> {self.files_after}, {format_bytes(self.bytes_before)} -> "
                f"{format_bytes(self.bytes_after)}, {self.rows_rewritten} rows{self._dropped()}, "
                f"{self.seconds:.2f} s{left_out})")

    def _dropped(self) -> str:
        return f" ({self.deleted_rows_dropped} deleted rows dropped)" if self.deleted_rows_dropped else ""

    def summary(self) -> str:
        throttled = f" (throttled {self.throttled_seconds:.2f} s)" if self.throttled_seconds else ""
        lines = [
            f"compaction of {self.table} ({self.strategy}): {self.status}",
            (f"  groups: {self.groups_planned} planned, {self.groups_committed} committed, "
             f"{self.groups_skipped} skipped, {self.groups_failed} failed"),
            (f"  table files: {self.files_before} -> {self.files_after}   "
             f"bytes: {format_bytes(self.bytes_before)} -> {format_bytes(self.bytes_after)}"),
            (f"  rewritten: {self.files_rewritten} files ({format_bytes(self.bytes_rewritten)}) -> "
             f"{self.files_written} files ({format_bytes(self.bytes_written)}), {self.rows_rewritten} rows"
             f"{self._dropped()}"),
            f"  time: {self.seconds:.2f} s{throttled}",
        ]
        if self.snapshot_ids:
            lines.append(f"  snapshots: {len(self.snapshot_ids)} (last {self.snapshot_ids[-1]})")
        if self.skipped_files:
            lines.append("  files left out: " + ", ".join(f"{n} {reason}" for reason, n in self.skipped_files)
                         + " (see --dry-run / plan().explain())")
        if self.too_young is not None:
            lines.append(self.too_young.explain())
        for g in self.groups:
            if g.status != "committed":
                lines.append(f"  group {g.group_id} [{g.partition}]: {g.status}" + (f": {g.error}" if g.error else ""))
        return "\n".join(lines)


@dataclass(frozen=True)
class ManifestRewriteResult:
    """The outcome of ``t.compaction.rewrite_manifests()`` (COMPACT-29)."""

    table: str
    manifests_before: int
    manifests_after: int
    manifests_rewritten: int
    entries: int
    snapshot_id: int | None
    planning_seconds_before: float
    planning_seconds_after: float
    seconds: float

    def __repr__(self) -> str:
        return (f"ManifestRewriteResult({self.table}: manifests {self.manifests_before} -> {self.manifests_after}, "
                f"{self.entries} entries, planning {self.planning_seconds_before * 1000:.1f} ms -> "
                f"{self.planning_seconds_after * 1000:.1f} ms)")

    def summary(self) -> str:
        done = "no change" if self.snapshot_id is None else f"snapshot {self.snapshot_id}"
        return (f"manifest compaction of {self.table}: {done}\n"
                f"  manifests: {self.manifests_before} -> {self.manifests_after} "
                f"({self.manifests_rewritten} rewritten, {self.entries} entries)\n"
                f"  planning (cold cache): {self.planning_seconds_before * 1000:.1f} ms -> "
                f"{self.planning_seconds_after * 1000:.1f} ms\n"
                f"  time: {self.seconds:.2f} s")
