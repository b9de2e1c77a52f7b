"""History files: older snapshots kept out of the metadata file (spec/metadata.md, META-13 … META-19).

A version 2 metadata file keeps only its newest snapshots inline (``snapshots``,
``snapshot-log``) and names **history files** in ``snapshot-history``: immutable JSON
documents, each holding a contiguous run of older snapshots and a run of the snapshot
log. Without them every commit would copy, write and sync every snapshot the table
ever retained (5.7 MB after 10,000 appends); with them a commit's metadata file stays
about as large as ``write.metadata.inline-snapshots-max`` snapshots plus one short
reference per history file.

Only operations that need older snapshots read history files: time travel, ancestry
past the inline snapshots, listing snapshots, expiry, rollback. A history file never
changes (LAYOUT-4), so it is parsed once per process and cached by location.

The transformations here are pure (:func:`spill`, :func:`remove_snapshots`,
:func:`bring_inline`): a run that must become a new file is left *pending* (in memory,
without a path). :func:`write_pending` writes pending runs as files; the commit calls it
before writing the metadata file, so they are made durable with the commit's other files
(COMMIT-20) and deleted with them when the attempt fails.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from lakefmt.errors import CorruptMetadataError, MissingFileError
from lakefmt.file_cache import ImmutableFileCache
from lakefmt.snapshots import LogEntry, Snapshot

if TYPE_CHECKING:
    from lakefmt.io import FileIO
    from lakefmt.metadata import TableMetadata

HISTORY_FILE = re.compile(r"^metadata/history-(\d{6,})-[^/]+\.json$")  # LAYOUT-13, relative
HISTORY_FIELDS = ("format-version", "table-uuid", "snapshots", "snapshot-log")  # META-15
MAX_CACHED_SNAPSHOTS = 200_000  # bounds the cache: about 1 KB per parsed snapshot


@dataclass(frozen=True)
class HistorySegment:
    """The content of one history file: snapshots in commit order and a run of the snapshot log (META-15)."""

    snapshots: tuple[Snapshot, ...]
    log: tuple[LogEntry, ...]

    @cached_property
    def by_id(self) -> dict[int, Snapshot]:
        return {s.snapshot_id: s for s in self.snapshots}

    def to_bytes(self, table_uuid: str) -> bytes:
        """The history file's JSON; snapshots and log entries are spliced in from their cached text."""
        return b"".join((
            b'{"format-version":2,"table-uuid":', json.dumps(table_uuid).encode(), b',"snapshots":[',
            b",".join(s.json_text.encode() for s in self.snapshots), b'],"snapshot-log":[',
            b",".join(e.snapshot_log_text.encode() for e in self.log), b"]}"))


def parse_segment(data: bytes, source: str, table_uuid: str) -> HistorySegment:
    """A history file's content, checked against META-15; anything else is :class:`CorruptMetadataError`."""
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptMetadataError(f"history file {source} is not valid JSON (truncated or corrupt): {exc}") from exc
    if not isinstance(obj, dict) or sorted(obj) != sorted(HISTORY_FIELDS):
        found = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise CorruptMetadataError(f"history file {source} must be a JSON object with exactly the fields "
                                   f"{list(HISTORY_FIELDS)}, found {found} (META-15)")
    if obj["format-version"] != 2:
        raise CorruptMetadataError(f"history file {source} has format-version {obj['format-version']!r}, "
                                   "expected 2 (META-15)")
    if obj["table-uuid"] != table_uuid:
        raise CorruptMetadataError(f"history file {source} belongs to table {obj['table-uuid']!r}, not to "
                                   f"{table_uuid} (META-15, LAYOUT-11)")
    try:
        return HistorySegment(tuple(Snapshot.from_json(s) for s in obj["snapshots"]),
                              tuple(LogEntry.snapshot_log_from_json(e) for e in obj["snapshot-log"]))
    except CorruptMetadataError as exc:
        raise CorruptMetadataError(f"history file {source}: {exc}") from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptMetadataError(f"history file {source} is malformed: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class HistoryRef:
    """One element of ``snapshot-history`` (META-14): where a history file is and what it holds.

    ``path`` is None while the run is pending (not written yet); ``segment`` is the content
    when it is known in memory (pending runs), else it is read on demand and cached.
    """

    path: str | None
    snapshot_count: int
    first_sequence_number: int
    last_sequence_number: int
    min_timestamp_ms: int
    max_timestamp_ms: int
    log_entry_count: int
    first_log_timestamp_ms: int | None
    last_log_timestamp_ms: int | None
    segment: HistorySegment | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(segment: HistorySegment, path: str | None = None, *, keep: bool = True) -> HistoryRef:
        """The reference describing ``segment`` (META-14); ``keep`` keeps the content in memory."""
        snaps, log = segment.snapshots, segment.log
        times = [s.timestamp_ms for s in snaps]
        return HistoryRef(path, len(snaps), snaps[0].sequence_number, snaps[-1].sequence_number, min(times),
                          max(times), len(log), log[0].timestamp_ms if log else None,
                          log[-1].timestamp_ms if log else None, segment if keep else None)

    def to_json(self) -> dict[str, Any]:
        if self.path is None:
            raise ValueError("a pending history run has no path yet: write it first (write_pending)")
        return {"path": self.path, "snapshot-count": self.snapshot_count,
                "first-sequence-number": self.first_sequence_number,
                "last-sequence-number": self.last_sequence_number,
                "min-timestamp-ms": self.min_timestamp_ms, "max-timestamp-ms": self.max_timestamp_ms,
                "log-entry-count": self.log_entry_count, "first-log-timestamp-ms": self.first_log_timestamp_ms,
                "last-log-timestamp-ms": self.last_log_timestamp_ms}

    @cached_property
    def json_text(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @staticmethod
    def from_json(obj: dict[str, Any]) -> HistoryRef:
        def optional(key: str) -> int | None:
            return None if obj[key] is None else int(obj[key])

        return HistoryRef(str(obj["path"]), int(obj["snapshot-count"]), int(obj["first-sequence-number"]),
                          int(obj["last-sequence-number"]), int(obj["min-timestamp-ms"]),
                          int(obj["max-timestamp-ms"]), int(obj["log-entry-count"]),
                          optional("first-log-timestamp-ms"), optional("last-log-timestamp-ms"))

    def mismatch(self, segment: HistorySegment) -> str | None:
        """How ``segment`` differs from what this reference says it holds (META-15), or None."""
        if not segment.snapshots:
            return "it holds no snapshot"
        actual = HistoryRef.of(segment, self.path)
        for name in ("snapshot_count", "first_sequence_number", "last_sequence_number", "min_timestamp_ms",
                     "max_timestamp_ms", "log_entry_count", "first_log_timestamp_ms", "last_log_timestamp_ms"):
            if getattr(actual, name) != getattr(self, name):
                return f"{name.replace('_', '-')} is {getattr(self, name)} in the reference, {getattr(actual, name)} " \
                       "in the file"
        sequences = [s.sequence_number for s in segment.snapshots]
        if any(a >= b for a, b in itertools.pairwise(sequences)):
            return "its snapshots are not in increasing sequence-number order"
        return None


# -- reading, with a cache by location (history files are immutable, LAYOUT-4) --------------------------
_cache: ImmutableFileCache[HistorySegment] = ImmutableFileCache(MAX_CACHED_SNAPSHOTS,
                                                                lambda segment: len(segment.snapshots))


def load_segment(io: FileIO | None, location: str, ref: HistoryRef, table_uuid: str) -> HistorySegment:
    """The content of ``ref``: from memory, from the cache, or read and checked (META-15, META-18)."""
    if ref.segment is not None:
        return ref.segment
    if io is None:
        raise CorruptMetadataError(f"history file {location}/{ref.path} cannot be read: this metadata was "
                                   "parsed without storage (use lakefmt.metadata.read_metadata)")
    full = f"{location}/{ref.path}"
    return _cache.get_or_load(io, full, lambda: read_segment(io, full, ref, table_uuid))


def read_segment(io: FileIO, full: str, ref: HistoryRef, table_uuid: str) -> HistorySegment:
    """Read a history file from storage, never from the cache, and check it against its reference."""
    try:
        data = io.read_bytes(full)
    except FileNotFoundError as exc:
        raise MissingFileError(f"history file {full} is missing (META-15)") from exc
    segment = parse_segment(data, full, table_uuid)
    problem = ref.mismatch(segment)
    if problem is not None:
        raise CorruptMetadataError(f"history file {full} does not match its reference in the metadata: "
                                   f"{problem} (META-15)")
    return segment


def clear_cache() -> None:
    """Forget every cached history file (tests; a store restored behind the process's back)."""
    _cache.clear()


class HistoryView(Sequence):  # type: ignore[type-arg]
    """All retained snapshots (or snapshot-log entries) of a metadata file: its history files' runs, in order,
    then the inline ones (META-13).

    ``len()`` and the newest elements need no history file; iterating from the start reads
    the history files one by one, as far as the iteration goes.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, meta: TableMetadata, log: bool) -> None:
        self._meta, self._log = meta, log
        self._inline = meta.inline_snapshot_log if log else meta.inline_snapshots

    def _run(self, ref: HistoryRef) -> tuple[Any, ...]:
        segment = self._meta.history_segment(ref)
        return segment.log if self._log else segment.snapshots

    def _count(self, ref: HistoryRef) -> int:
        return ref.log_entry_count if self._log else ref.snapshot_count

    def __len__(self) -> int:
        return sum(self._count(r) for r in self._meta.snapshot_history) + len(self._inline)

    def __iter__(self) -> Iterator[Any]:
        for ref in self._meta.snapshot_history:
            yield from self._run(ref)
        yield from self._inline

    def __reversed__(self) -> Iterator[Any]:
        yield from reversed(self._inline)
        for ref in reversed(self._meta.snapshot_history):
            yield from reversed(self._run(ref))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        size = len(self)
        i = index + size if index < 0 else index
        if not 0 <= i < size:
            raise IndexError("history index out of range")
        in_history = size - len(self._inline)
        if i >= in_history:
            return self._inline[i - in_history]
        for ref in self._meta.snapshot_history:
            if i < self._count(ref):
                return self._run(ref)[i]
            i -= self._count(ref)
        raise IndexError("history index out of range")  # counts disagree with the files: unreachable

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (HistoryView, tuple, list)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"HistoryView({len(self)} {'log entries' if self._log else 'snapshots'}, " \
               f"{len(self._meta.snapshot_history)} history files)"


# -- pure transformations ---------------------------------------------------------------------------------
def spill(meta: TableMetadata, max_inline: int) -> TableMetadata:
    """Move the oldest inline snapshots into pending history runs while more than ``max_inline`` are inline
    (META-17): runs of ceil(max_inline / 2) snapshots, never the current snapshot or anything after it, each
    with the longest prefix of the inline snapshot log that names no snapshot staying inline."""
    inline = meta.inline_snapshots
    if meta.format_version < 2 or len(inline) <= max_inline:
        return meta
    chunk, current = (max_inline + 1) // 2, meta.current_snapshot_id
    log, refs = meta.inline_snapshot_log, list(meta.snapshot_history)
    while len(inline) > max_inline:
        run = inline[:chunk]
        run = run[:next((i for i, s in enumerate(run) if s.snapshot_id == current), len(run))]
        if not run:
            break
        inline = inline[len(run):]
        staying = {s.snapshot_id for s in inline}
        cut = next((i for i, e in enumerate(log) if e.value in staying), len(log))
        refs.append(HistoryRef.of(HistorySegment(run, log[:cut])))
        log = log[cut:]
    return meta.evolve(inline_snapshots=inline, inline_snapshot_log=log, snapshot_history=tuple(refs))


def remove_snapshots(meta: TableMetadata, ids: frozenset[int]) -> TableMetadata:
    """``meta`` without the snapshots ``ids`` and their snapshot-log entries, wherever they are (MAINT-4).

    A history file that loses anything is replaced by a pending run with what remains (META-16);
    a run left without snapshots passes its remaining log entries on to the next run.
    """
    inline = tuple(s for s in meta.inline_snapshots if s.snapshot_id not in ids)
    inline_log = tuple(e for e in meta.inline_snapshot_log if e.value not in ids)
    if len(meta.inline_snapshots) - len(inline) == len(ids) or not meta.snapshot_history:
        return meta.evolve(inline_snapshots=inline, inline_snapshot_log=inline_log)
    refs: list[HistoryRef] = []
    carry: tuple[LogEntry, ...] = ()
    for ref in meta.snapshot_history:
        segment = meta.history_segment(ref)
        snaps = tuple(s for s in segment.snapshots if s.snapshot_id not in ids)
        log = carry + tuple(e for e in segment.log if e.value not in ids)
        carry = ()
        if not snaps:
            carry = log
        elif len(snaps) == len(segment.snapshots) and log == segment.log:
            refs.append(ref)
        else:
            refs.append(HistoryRef.of(HistorySegment(snaps, log)))
    return meta.evolve(inline_snapshots=inline, inline_snapshot_log=carry + inline_log,
                       snapshot_history=tuple(refs))


def bring_inline(meta: TableMetadata, snapshot_id: int) -> TableMetadata:
    """``meta`` with ``snapshot_id`` and every later snapshot inline, so that it can become current (META-16).

    The history files after its run are dissolved, and its own run is replaced by a pending
    run of the snapshots before it (with the log entries that name none of the moved ones).
    """
    if meta.is_inline(snapshot_id):
        return meta
    meta.snapshot_by_id(snapshot_id)  # NoSuchSnapshotError when it is not retained at all
    refs = meta.snapshot_history
    k = next(i for i in range(len(refs) - 1, -1, -1) if snapshot_id in meta.history_segment(refs[i]).by_id)
    segment = meta.history_segment(refs[k])
    sequence = segment.by_id[snapshot_id].sequence_number
    before = tuple(s for s in segment.snapshots if s.sequence_number < sequence)
    moved = {s.snapshot_id for s in segment.snapshots[len(before):]}
    cut = next((i for i, e in enumerate(segment.log) if e.value in moved), len(segment.log))
    snaps: list[Snapshot] = list(segment.snapshots[len(before):])
    log: list[LogEntry] = list(segment.log[cut:])
    for ref in refs[k + 1:]:
        later = meta.history_segment(ref)
        snaps += later.snapshots
        log += later.log
    kept = list(refs[:k])
    if before:
        kept.append(HistoryRef.of(HistorySegment(before, segment.log[:cut])))
    else:
        log = list(segment.log[:cut]) + log  # they name older runs' snapshots: they stay first
    return meta.evolve(snapshot_history=tuple(kept), inline_snapshots=(*snaps, *meta.inline_snapshots),
                       inline_snapshot_log=(*log, *meta.inline_snapshot_log))


# -- writing ---------------------------------------------------------------------------------------------
def history_file_name(version: int, unique: str) -> str:
    """``metadata/history-{version:06d}-{unique}.json`` (LAYOUT-13): the version of the metadata file whose
    commit writes it."""
    return f"metadata/history-{version:06d}-{unique}.json"


def write_pending(io: FileIO, meta: TableMetadata, version: int, unique: Callable[[], str]
                  ) -> tuple[TableMetadata, list[str]]:
    """Write every pending history run of ``meta`` as a new file; the metadata naming them, and their locations.

    ``version`` is the version of the metadata file the commit writes next (LAYOUT-13). A
    file written is remembered in the cache, so the writer never reads it back.
    """
    if all(ref.path is not None for ref in meta.snapshot_history):
        return meta, []
    written: list[str] = []
    refs: list[HistoryRef] = []
    try:
        for ref in meta.snapshot_history:
            if ref.path is not None:
                refs.append(ref)
                continue
            assert ref.segment is not None
            rel = history_file_name(version, unique())
            full = f"{meta.location}/{rel}"
            io.write_bytes(full, ref.segment.to_bytes(meta.table_uuid))
            written.append(full)
            _cache.put(io, full, ref.segment)
            refs.append(replace(ref, path=rel, segment=None))
    except BaseException:
        io.delete_many(written)
        raise
    return meta.evolve(snapshot_history=tuple(refs), history_io=io), written


def history_paths(metadata_json: dict[str, Any]) -> list[str]:
    """The history files a parsed metadata file names (META-19), without checking anything else."""
    history = metadata_json.get("snapshot-history") if isinstance(metadata_json, dict) else None
    if not isinstance(history, list):
        return []
    return [str(r["path"]) for r in history if isinstance(r, dict) and isinstance(r.get("path"), str)]
