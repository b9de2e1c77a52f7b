"""The compaction planner: files + options + now -> groups (spec/compaction.md §Planning, COMPACT-3..11, 35).

Pure: no I/O, no clock, no randomness. Given the live files of a snapshot (each with
when it was ingested), the options and the time, :func:`plan_groups` decides per
partition which files are candidates, how they are packed into groups, and why any
file or partition is left out. The same input always gives the same plan, so the
plan is explainable (``plan.explain()``) and unit-testable without a table.

A file is a candidate because it is small (COMPACT-4) or because its deletion vector
deletes at least ``delete_ratio_threshold`` of its rows (reason ``deletes``, COMPACT-35):
such a file is rewritten even when large or alone in its partition, so that its deleted
rows stop costing every read.

Example:
    >>> plan = plan_groups(files, CompactionOptions(min_age_seconds=0), strategy="binpack", now_ms=now)
    >>> [len(g.files) for g in plan.groups]
    [30]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal

from lakefmt.compaction.options import MIN_AGE_SECONDS, CompactionOptions, Strategy
from lakefmt.manifest import DataFile

SkipReason = Literal["too-big", "too-young", "too-few-files", "already-compacted"]
PartitionKey = tuple[int, tuple[Any, ...]]


@dataclass(frozen=True)
class PlannerFile:
    """A live data file as the planner sees it (COMPACT-5).

    ``added_ms`` is when the snapshot that added the file was committed, or None if
    unknown; ``compacted`` is True when that snapshot was a compaction (``replace``).
    ``in_scope`` is False for files outside the run's filter: they still count for the
    partition's age but are never rewritten (COMPACT-10).
    """

    data_file: DataFile
    added_ms: int | None = None
    compacted: bool = False
    in_scope: bool = True


@dataclass(frozen=True)
class SkippedFile:
    data_file: DataFile
    reason: SkipReason


@dataclass(frozen=True)
class FileGroup:
    """Files of one partition rewritten together by one call of ``rewrite_group`` (COMPACT-7)."""

    group_id: str
    spec_id: int
    partition: tuple[Any, ...]
    partition_label: str
    files: tuple[DataFile, ...]

    @property
    def input_bytes(self) -> int:
        return sum(f.file_size_bytes for f in self.files)

    for_deletes: tuple[str, ...] = ()
    """Paths of the group's files that are candidates because of their deleted rows (COMPACT-35)."""

    @property
    def input_rows(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def deleted_rows(self) -> int:
        """Rows of the inputs their deletion vectors delete: the rewrite drops them (COMPACT-32)."""
        return sum(f.deleted_record_count for f in self.files)

    @property
    def live_rows(self) -> int:
        return self.input_rows - self.deleted_rows


@dataclass(frozen=True)
class PartitionPlan:
    """The decision for one partition: its groups and what was left out, and why (COMPACT-11)."""

    spec_id: int
    partition: tuple[Any, ...]
    label: str
    files_total: int
    candidates: tuple[DataFile, ...]
    groups: tuple[FileGroup, ...]
    skipped: tuple[SkippedFile, ...]
    reason: SkipReason | None = None  # why the partition has no group, when one reason covers it
    ingested_ms: int | None = None  # the partition's ingest time (COMPACT-5); None when unknown
    for_deletes: tuple[DataFile, ...] = ()  # candidates because of their deleted rows (COMPACT-35)

    @property
    def key(self) -> PartitionKey:
        return (self.spec_id, self.partition)


@dataclass(frozen=True)
class CompactionPlan:
    """What a run would do, partition by partition, most fragmented first (COMPACT-9)."""

    strategy: Strategy
    options: CompactionOptions
    partitions: tuple[PartitionPlan, ...]
    now_ms: int
    snapshot_id: int | None = None
    target_sort_order_id: int | None = None
    sort_keys: tuple[tuple[str, str, str], ...] = ()
    zorder_columns: tuple[str, ...] = ()
    planning_seconds: float = field(default=0.0, compare=False)

    @property
    def groups(self) -> tuple[FileGroup, ...]:
        return tuple(g for p in self.partitions for g in p.groups)

    @property
    def files_to_rewrite(self) -> int:
        return sum(len(g.files) for g in self.groups)

    @property
    def bytes_to_rewrite(self) -> int:
        return sum(g.input_bytes for g in self.groups)

    @property
    def deleted_rows(self) -> int:
        """Deleted rows the groups' rewrites drop (COMPACT-32)."""
        return sum(g.deleted_rows for g in self.groups)

    @property
    def files_for_deletes(self) -> int:
        """Files in groups because of their deleted rows (COMPACT-35)."""
        return sum(len(g.for_deletes) for g in self.groups)

    @property
    def skipped(self) -> tuple[SkippedFile, ...]:
        return tuple(s for p in self.partitions for s in p.skipped)

    def skipped_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.skipped:
            out[s.reason] = out.get(s.reason, 0) + 1
        return out

    def too_young(self) -> TooYoung | None:
        """The files skipped because their partition is still being written (COMPACT-5), if any."""
        young = [p for p in self.partitions if p.reason == "too-young"]
        files = sum(1 for p in young for s in p.skipped if s.reason == "too-young")
        if not files:
            return None
        ingested = [p.ingested_ms for p in young if p.ingested_ms is not None]
        eligible = max(ingested) + math.ceil(self.options.min_age_seconds * 1000) if ingested else None
        return TooYoung(files, len(young), self.options.min_age_seconds, eligible)

    def __repr__(self) -> str:
        return (f"CompactionPlan({self.strategy}, {len(self.groups)} groups, {self.files_to_rewrite} files, "
                f"{format_bytes(self.bytes_to_rewrite)}, skipped={self.skipped_by_reason()})")

    def explain(self, *, max_partitions: int | None = None) -> str:
        """A readable account of every partition: groups, and why files were left out."""
        header = (f"{self.strategy} plan: {len(self.groups)} groups, {self.files_to_rewrite} files, "
                  f"{format_bytes(self.bytes_to_rewrite)} to rewrite "
                  f"(target {format_bytes(self.options.target_file_size)}, small < "
                  f"{format_bytes(self.options.small_file_threshold)}, min {self.options.min_input_files} files, "
                  f"max group {format_bytes(self.options.max_group_size)}, "
                  f"min age {self.options.min_age_seconds:g} s, "
                  f"deletes >= {_percent(self.options.delete_ratio_threshold)} of a file's rows)")
        lines = [header]
        if self.deleted_rows:
            lines.append(f"  deleted rows dropped: {self.deleted_rows} (deletion vectors applied); "
                         f"{self.files_for_deletes} file(s) rewritten for their deletes")
        shown = self.partitions if max_partitions is None else self.partitions[:max_partitions]
        for p in shown:
            head = f"  {p.label}: {p.files_total} files, {len(p.candidates)} candidates"
            if p.for_deletes:
                head += f" ({len(p.candidates) - len(p.for_deletes)} small, {len(p.for_deletes)} for deletes)"
            if p.reason:
                head += f" -- skipped: {p.reason}"
            lines.append(head)
            for g in p.groups:
                line = (f"    group {g.group_id}: {len(g.files)} files, {format_bytes(g.input_bytes)}, "
                        f"{g.input_rows} rows")
                if g.deleted_rows:
                    line += f" ({g.deleted_rows} deleted)"
                if g.for_deletes:
                    line += (f" -- deletes: {len(g.for_deletes)} file{'s' if len(g.for_deletes) != 1 else ''} with "
                             f">= {_percent(self.options.delete_ratio_threshold)} of rows deleted")
                lines.append(line)
                heavy = set(g.for_deletes)
                for f in g.files:
                    if f.path in heavy:  # why each file is a candidate (COMPACT-35): small, or for its deletes
                        lines.append(f"      deletes: {f.path} ({_percent(f.deleted_record_count / f.record_count)}"
                                     f" of {f.record_count} rows deleted)")
            counts: dict[str, int] = {}
            for s in p.skipped:
                counts[s.reason] = counts.get(s.reason, 0) + 1
            if counts and not (p.reason and len(counts) == 1):
                lines.append("    left out: " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items())))
        if max_partitions is not None and len(self.partitions) > max_partitions:
            lines.append(f"  ... {len(self.partitions) - max_partitions} more partitions")
        young = self.too_young()
        if young is not None:
            lines.append(young.explain())
        return "\n".join(lines)


@dataclass(frozen=True)
class TooYoung:
    """Files left out because their partitions were written to less than ``min_age_seconds`` ago (COMPACT-5).

    ``eligible_ms`` is when the youngest of those partitions becomes old enough (epoch
    milliseconds, UTC), if no more data arrives in it; None when the ingest time is unknown.
    """

    files: int
    partitions: int
    min_age_seconds: float
    eligible_ms: int | None

    @property
    def eligible_at(self) -> datetime | None:
        """:attr:`eligible_ms` as an aware UTC datetime."""
        return None if self.eligible_ms is None else datetime.fromtimestamp(self.eligible_ms / 1000, timezone.utc)

    def explain(self) -> str:
        """Why, until when, and how to compact them anyway."""
        when = self.eligible_at
        until = (f"; all become eligible at {when.strftime('%Y-%m-%dT%H:%M:%SZ')} if nothing more is written "
                 "to them" if when is not None else "")
        return (f"  {self.files} file{'s' if self.files != 1 else ''} in {self.partitions} "
                f"partition{'s' if self.partitions != 1 else ''} left out as too young: written to less than "
                f"{self.min_age_seconds:g} s ago ({MIN_AGE_SECONDS.name}){until}. To compact them now: "
                f"`lakefmt compact --min-age-seconds 0`, `t.compaction.run(min_age_seconds=0)`, or lower the "
                f"table property {MIN_AGE_SECONDS.name}")


def plan_groups(files: Sequence[PlannerFile], options: CompactionOptions, *, strategy: Strategy, now_ms: int,
                target_sort_order_id: int | None = None,
                label: Callable[[int, tuple[Any, ...]], str] | None = None) -> CompactionPlan:
    """Plan a compaction of ``files`` (COMPACT-3..COMPACT-11). Pure."""
    by_partition: dict[PartitionKey, list[PlannerFile]] = {}
    for pf in files:
        by_partition.setdefault((pf.data_file.spec_id, tuple(pf.data_file.partition)), []).append(pf)
    partitions = []
    for key, members in by_partition.items():
        if not any(m.in_scope for m in members):
            continue
        text = label(*key) if label is not None else _default_label(*key)
        partitions.append(_plan_partition(key, text, members, options, strategy, now_ms, target_sort_order_id))
    # Most fragmented first: most files to rewrite, then most bytes; stable by label (COMPACT-9).
    partitions.sort(key=lambda p: (-sum(len(g.files) for g in p.groups), -sum(g.input_bytes for g in p.groups),
                                   -len(p.candidates), p.label))
    numbered = []
    counter = 0
    for p in partitions:
        groups = []
        for g in p.groups:
            counter += 1
            groups.append(replace(g, group_id=f"g{counter:04d}"))
        numbered.append(replace(p, groups=tuple(groups)))
    return CompactionPlan(strategy, options, tuple(numbered), now_ms, target_sort_order_id=target_sort_order_id)


def _plan_partition(key: PartitionKey, text: str, members: list[PlannerFile], options: CompactionOptions,
                    strategy: Strategy, now_ms: int, target_sort_order_id: int | None) -> PartitionPlan:
    spec_id, partition = key
    scoped = sorted((m for m in members if m.in_scope), key=lambda m: m.data_file.path)
    skipped: list[SkippedFile] = []
    candidates: list[PlannerFile] = []
    heavy: set[str] = set()  # candidates for their deleted rows (COMPACT-35)
    threshold = options.small_file_threshold
    for m in scoped:
        if delete_heavy(m.data_file, options.delete_ratio_threshold):
            candidates.append(m)
            heavy.add(m.data_file.path)
        elif m.data_file.file_size_bytes >= threshold:
            skipped.append(SkippedFile(m.data_file, "too-big"))  # COMPACT-4: large files are left alone
        else:
            candidates.append(m)
    cand_files = tuple(m.data_file for m in candidates)
    for_deletes = tuple(f for f in cand_files if f.path in heavy)
    ingested = [m.added_ms for m in members if m.added_ms is not None and not m.compacted]
    ingested_ms = max(ingested) if ingested else None

    def done(reason: SkipReason | None, groups: tuple[FileGroup, ...] = ()) -> PartitionPlan:
        return PartitionPlan(spec_id, partition, text, len(scoped), cand_files, groups, tuple(skipped), reason,
                             ingested_ms, for_deletes)

    # COMPACT-5: a partition still receiving writes is skipped whole.
    if options.min_age_seconds > 0 and ingested and now_ms - max(ingested) < options.min_age_seconds * 1000:
        skipped.extend(SkippedFile(m.data_file, "too-young") for m in candidates)
        return done("too-young")
    if not candidates:
        return done("too-big" if skipped else "too-few-files")
    if len(candidates) < options.min_input_files and not heavy:  # COMPACT-6; deletes need no company (COMPACT-35)
        reason = _lone_reason(candidates[0], strategy, target_sort_order_id) if len(candidates) == 1 \
            else "too-few-files"
        skipped.extend(SkippedFile(m.data_file, reason) for m in candidates)
        return done(reason)
    groups = []
    for bin_files in pack_bins(candidates, options.max_group_size):
        total = sum(m.data_file.file_size_bytes for m in bin_files)
        deletes = tuple(sorted(m.data_file.path for m in bin_files if m.data_file.path in heavy))
        if deletes:  # COMPACT-35: rewriting drops the deleted rows, so even one file is worth a rewrite
            files = tuple(sorted((m.data_file for m in bin_files), key=lambda f: f.path))
            groups.append(FileGroup("", spec_id, partition, text, files, for_deletes=deletes))
            continue
        if len(bin_files) == 1 and _same_layout(bin_files[0], strategy, target_sort_order_id):
            reason = _lone_reason(bin_files[0], strategy, target_sort_order_id)  # COMPACT-8
            skipped.append(SkippedFile(bin_files[0].data_file, reason))
            continue
        if len(bin_files) < options.min_input_files and total < options.target_file_size:
            skipped.extend(SkippedFile(m.data_file, "too-few-files") for m in bin_files)
            continue
        files = tuple(sorted((m.data_file for m in bin_files), key=lambda f: f.path))
        groups.append(FileGroup("", spec_id, partition, text, files))
    if not groups:
        in_candidates = set(cand_files)
        reasons = {s.reason for s in skipped if s.data_file in in_candidates}
        return done(reasons.pop() if len(reasons) == 1 else "too-few-files")
    return done(None, tuple(groups))


def delete_heavy(data_file: DataFile, ratio: float) -> bool:
    """Whether the file's deletion vector deletes at least ``ratio`` of its rows (COMPACT-35)."""
    deleted = data_file.deleted_record_count
    return deleted > 0 and data_file.record_count > 0 and deleted / data_file.record_count >= ratio


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.3g}%"


def _lone_reason(m: PlannerFile, strategy: Strategy, target_sort_order_id: int | None) -> SkipReason:
    """Why a single file is not rewritten alone: its layout is final, or there is nothing to merge."""
    final = m.compacted or (strategy == "sort" and _same_layout(m, strategy, target_sort_order_id))
    return "already-compacted" if final else "too-few-files"


def _same_layout(m: PlannerFile, strategy: Strategy, target_sort_order_id: int | None) -> bool:
    """Whether rewriting this one file alone would reproduce it (COMPACT-8)."""
    if strategy == "binpack":
        return True
    if strategy == "sort":
        return target_sort_order_id is not None and m.data_file.sort_order_id == target_sort_order_id
    return m.compacted  # zorder: a file a compaction already wrote is not rewritten alone


def pack_bins(files: Sequence[PlannerFile], max_bytes: int) -> list[list[PlannerFile]]:
    """Greedy bin packing: largest file first into the least-filled of ceil(total / max) bins (COMPACT-7).

    No bin exceeds ``max_bytes`` unless a single file does; a file that fits no
    existing bin opens a new one. Deterministic: ties are broken by path.
    """
    if not files:
        return []
    ordered = sorted(files, key=lambda m: (-m.data_file.file_size_bytes, m.data_file.path))
    total = sum(m.data_file.file_size_bytes for m in ordered)
    count = max(1, math.ceil(total / max_bytes))
    bins: list[list[PlannerFile]] = [[] for _ in range(count)]
    sizes = [0] * count
    for m in ordered:
        size = m.data_file.file_size_bytes
        best = min(range(len(bins)), key=lambda i: (sizes[i], i))
        if sizes[best] + size > max_bytes and sizes[best] > 0:
            bins.append([])
            sizes.append(0)
            best = len(bins) - 1
        bins[best].append(m)
        sizes[best] += size
    return [b for b in bins if b]


def _default_label(spec_id: int, partition: tuple[Any, ...]) -> str:
    if not partition:
        return "(unpartitioned)" if spec_id == 0 else f"spec {spec_id} (unpartitioned)"
    return f"spec {spec_id} {partition!r}" if spec_id else repr(partition)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
