"""Verified erasure: remove every stored copy of the rows matching a filter (spec/deletes.md, ROWDEL-15 … 18).

A merge-on-read delete leaves a row's bytes in its data file, and every delete leaves them
in the files older snapshots reference. A file **holds** a matching row if any row of its
bytes matches, deleted ones included. :func:`erase`, in order: (1) binds the filter, reads
every file a retained snapshot reaches that might hold a matching row (EXPR-8) and refuses
when a retention setting would keep one (ROWDEL-16); (2) commits a copy-on-write delete,
whatever ``write.delete.mode`` says, replanned on conflicts (ROWDEL-5); (3) expires every
other snapshot reaching such a file through snapshot expiry, which deletes what only they
reached (MAINT-3 … MAINT-7, ROWDEL-13); (4) deletes the unreferenced data files holding a
matching row that are orphans under the run's grace period (MAINT-8, MAINT-10), leaving
younger or leased ones **pending**; (5) verifies from storage (ROWDEL-17).

Example:
    >>> report = t.erase("customer_id = 42")
    >>> report.proven, report.matched_rows, report.snapshots_expired, report.pending
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import deletion_vectors as dv
from lakefmt.commit import FileChange
from lakefmt.deletion_vectors import FOLDER as DELETES_FOLDER
from lakefmt.errors import (
    CommitConflictError, CorruptMetadataError, ErasureRefusedError, ErasureVerificationError, ValidationError,
)
from lakefmt.evaluators import MetricsEvaluator, row_mask
from lakefmt.expressions import ALWAYS_TRUE, Expression, bind, referenced_field_ids, to_expression
from lakefmt.leases import Leases
from lakefmt.maintenance.expire import expire_snapshots
from lakefmt.maintenance.options import check_age, check_bool, check_count
from lakefmt.maintenance.orphans import StorageScan, delete_files, list_location, scan_storage
from lakefmt.maintenance.reachability import reachable_files, reachable_only_from, table_location
from lakefmt.manifest import DataFile
from lakefmt.properties import COMMIT_RETRIES, EXPIRE_MIN_SNAPSHOTS_TO_KEEP, int_property
from lakefmt.scan import DataScan, read_data_file
from lakefmt.threads import thread_map

if TYPE_CHECKING:
    from lakefmt.metadata import TableMetadata
    from lakefmt.table import Table

DEFAULT_GRACE = timedelta(days=3)  # the default grace period of orphan-file removal (MAINT-9)
READ_THREADS = 8
ROW_OPERATION = {"lakefmt.row-operation": "erase"}  # DV-8


@dataclass(frozen=True)
class FileCheck:
    """How a data file found in storage was shown to hold no matching row: ``statistics`` or ``read``."""

    path: str
    size: int
    check: str
    referenced: bool


@dataclass(frozen=True)
class PendingFile:
    """An unreferenced data file that holds a matching row (``matching_rows`` None: unreadable) and
    is not deleted yet: ``reason`` is ``write-lease``, ``grace-period`` or ``not-deleted``.
    ``deletable_at`` is when orphan removal may delete it (None: unknown)."""

    path: str
    size: int
    reason: str
    deletable_at: datetime | None
    matching_rows: int | None


@dataclass(frozen=True)
class DeletedFile:
    """A file the erasure deleted (or would delete), relative to the table location, with its size."""

    path: str
    size: int
    kind: str  # data, deletion-vector, manifest, manifest-list, metadata, orphan


@dataclass(frozen=True)
class ErasureReport:
    """What :func:`erase` did (or, with ``dry_run``, would do), and its proof (ROWDEL-17, ROWDEL-18).

    ``matched_rows`` are the live rows of the current snapshot that matched; ``stored_rows``
    the matching rows found in the bytes of every file read (deleted ones and older
    snapshots' files included). ``checked`` lists every data file left in storage with the
    check that proved it holds no matching row; ``rescan_rows`` is a scan of the current
    snapshot with the filter after the erasure (None in a dry run). A dry run lists the
    data and vector files it would delete, not the manifests and metadata files.
    """

    table: str
    filter: str
    dry_run: bool
    matched_rows: int
    stored_rows: int
    files_rewritten: tuple[str, ...]
    files_written: tuple[str, ...]
    snapshot_id: int | None
    snapshots_expired: tuple[int, ...]
    files_deleted: tuple[DeletedFile, ...]
    pending: tuple[PendingFile, ...]
    checked: tuple[FileCheck, ...] = ()
    rescan_rows: int | None = None
    warnings: tuple[str, ...] = ()

    @property
    def bytes_deleted(self) -> int:
        return sum(f.size for f in self.files_deleted)

    @property
    def complete(self) -> bool:
        """Nothing pending: no file in storage holds a matching row (ROWDEL-17)."""
        return not self.pending

    @property
    def proven(self) -> bool:
        return not self.dry_run and self.complete and self.rescan_rows == 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for p in out["pending"]:
            p["deletable_at"] = p["deletable_at"] and p["deletable_at"].isoformat()
        out.update(bytes_deleted=self.bytes_deleted, complete=self.complete, proven=self.proven)
        return out


@dataclass
class _Plan:
    """The files holding matching rows and the snapshots reaching them, on one metadata."""

    metadata: TableMetadata
    live: list[DataFile]                                       # of the current snapshot
    reaching: dict[int, list[str]]                              # snapshot id -> such files it reaches


class _Reader:
    """Counts the rows of a data file's bytes that match the filter, deleted rows included."""

    def __init__(self, table: Table, bound: Expression) -> None:
        schema = table.metadata.schema
        names = [f.name for i in sorted(referenced_field_ids(bound)) if (f := schema.field_by_id(i))]
        self.io, self.schema, self.bound, self.location = table.io, schema, bound, table.location
        self.projected = schema.select(names or [schema.fields[0].name])

    def count(self, location: str, expected_rows: int | None = None, live_of: DataFile | None = None) -> int:
        """Matching rows of the file's bytes; with ``live_of`` (its entry) of its live rows (READ-14)."""
        return read_data_file(self.io, location, self.schema, self.projected, self.bound,
                              expected_rows=expected_rows, data_file=live_of,
                              table_location=self.location).num_rows

    def count_or_none(self, location: str) -> int | None:
        """None when the file cannot be read as a data file of the table: it may hold anything."""
        try:
            return self.count(location)
        except (CorruptMetadataError, OSError):
            return None


def erase(table: Table, filter: str | Expression, *, dry_run: bool = False, retain_last: int | None = None,
          older_than: timedelta = DEFAULT_GRACE) -> ErasureReport:
    """Delete the rows matching ``filter`` and every stored copy of them; return the proof (ROWDEL-15).

    Args:
        filter: the rows to erase (required).
        dry_run: report what would be done; write, commit and delete nothing (ROWDEL-18).
        retain_last: override of ``history.expire.min-snapshots-to-keep`` for this run: the
            newest current-history snapshots that must be kept. Erasure refuses when they
            include one reaching a matching row; ``retain_last=1`` lets it expire them.
        older_than: grace period of the unreferenced files holding a matching row (MAINT-9);
            younger ones, and any named with a live write lease's token, are left pending.

    Raises:
        UnknownColumnError, FilterError, ValidationError: bad input; nothing is done.
        ErasureRefusedError: a retention setting keeps the rows (ROWDEL-16); nothing is done.
        ErasureVerificationError: a referenced file still holds a matching row after the run.
    """
    if filter is None:
        raise ValidationError("erase needs a filter naming the rows to erase, e.g. \"customer_id = 42\"")
    check_bool("dry_run", dry_run)
    if retain_last is not None:
        check_count("retain_last", retain_last, minimum=1)
    grace = check_age("older_than", older_than, allow_datetime=False)
    assert isinstance(grace, timedelta)
    table.refresh()
    bound = bind(to_expression(filter), table.metadata.schema)
    text = filter if isinstance(filter, str) else repr(filter)
    reader = _Reader(table, bound)
    counts: dict[str, int] = {}
    plan = _plan(table, bound, reader, counts)
    _check_retention(table, plan, retain_last)
    if dry_run:
        return _dry_run(table, bound, plan, reader, counts, grace, text)
    with table.write_lease():
        return _run(table, bound, plan, reader, counts, grace, text, retain_last)


def _plan(table: Table, bound: Expression, reader: _Reader, counts: dict[str, int]) -> _Plan:
    """Read every file a retained snapshot reaches that might hold a matching row (EXPR-8).

    ``counts`` caches matching rows per path within one phase (data files are immutable, LAYOUT-4).
    """
    meta = table.metadata
    candidates: dict[int, list[DataFile]] = {
        s.snapshot_id: DataScan(table.io, meta, s, meta.schema, bound).plan_files() for s in meta.snapshots}
    distinct = {f.path: f for files in candidates.values() for f in files if f.path not in counts}
    todo = list(distinct.values())
    found = thread_map(lambda f: reader.count(f"{table.location}/{f.path}", f.record_count), todo,
                       READ_THREADS)
    counts.update(zip((f.path for f in todo), found))
    reaching = {sid: [f.path for f in files if counts[f.path]] for sid, files in candidates.items()}
    live = [f for f in candidates.get(meta.current_snapshot_id or -1, []) if counts[f.path]]
    return _Plan(meta, live, {sid: paths for sid, paths in reaching.items() if paths})


def _kept(meta: TableMetadata, keep: int, commits: bool) -> list[int]:
    """The snapshots expiry keeps after the erasure: the newest ``keep`` of the current history,
    the erasure's own snapshot first when it commits one (MAINT-3)."""
    ancestors = [s.snapshot_id for s in meta.ancestors(meta.current_snapshot_id)]
    return ancestors[:keep - 1] if commits else ancestors[:keep]


def _check_retention(table: Table, plan: _Plan, retain_last: int | None) -> None:
    """Refuse, naming the setting, when it keeps a snapshot reaching a matching row (ROWDEL-16)."""
    meta = plan.metadata
    prop = EXPIRE_MIN_SNAPSHOTS_TO_KEEP.name
    keep = int_property(meta.properties, EXPIRE_MIN_SNAPSHOTS_TO_KEEP) if retain_last is None else retain_last
    commits = bool(plan.live)
    kept = _kept(meta, keep, commits)
    blocked = [sid for sid in kept if sid in plan.reaching]
    if not blocked:
        return
    allowed = kept.index(blocked[0]) + (1 if commits else 0)
    setting = (f"retain_last={keep}" if retain_last is not None
               else f"the table property {prop}={keep}")
    raise ErasureRefusedError(
        f"cannot erase from {table.name}: {setting} keeps snapshot(s) {blocked} of the current history, "
        f"which reach data files holding matching rows (e.g. {plan.reaching[blocked[0]][0]}); erasure needs "
        f"at most {allowed}: pass retain_last={allowed} (--retain-last {allowed}) to expire them, or set "
        f"{prop} to {allowed}. Nothing was written (ROWDEL-16)")


def _rewrite(table: Table, bound: Expression, live: Sequence[DataFile]) -> tuple[list[pa.Table], int]:
    """The live, non-matching rows of each file (vectors applied), and the live rows that matched."""
    schema = table.metadata.schema
    everything, names = bind(ALWAYS_TRUE, schema), {f.id: f.name for f in schema.fields}
    expr = MetricsEvaluator(bound, schema).expr

    def one(f: DataFile) -> tuple[pa.Table, int]:
        rows = read_data_file(table.io, f"{table.location}/{f.path}", schema, schema, everything,
                              expected_rows=f.record_count)
        match = row_mask(expr, rows, names.get).combine_chunks()
        alive = dv.live_mask(table.io, table.location, f)
        if alive is not None:
            match_live = pc.and_(alive, match)
            return rows.filter(pc.and_(alive, pc.invert(match))), int(pc.sum(match_live).as_py() or 0)
        return rows.filter(pc.invert(match)), int(pc.sum(match).as_py() or 0)

    results = thread_map(one, list(live), READ_THREADS)
    return [t for t, _ in results if t.num_rows], sum(n for _, n in results)


def _run(table: Table, bound: Expression, plan: _Plan, reader: _Reader, counts: dict[str, int],
         grace: timedelta, text: str, retain_last: int | None) -> ErasureReport:
    retries = int_property(plan.metadata.properties, COMMIT_RETRIES)
    rewritten: list[DataFile] = []
    written: list[DataFile] = []
    matched = 0
    snapshot_id = None
    for attempt in range(retries + 1):  # step 2, planned again over the new snapshot on a conflict (ROWDEL-5)
        if not plan.live:
            break
        survivors, matched = _rewrite(table, bound, plan.live)
        files = table.write_survivors(survivors)
        change = FileChange("delete", added=files, removed=list(plan.live), conflict_filter=bound,
                            planned_snapshot_id=plan.metadata.current_snapshot_id,
                            summary=dict(ROW_OPERATION), forget_removed_values=True)
        try:
            snapshot_id = table.commit_change(change, cleanup_on_failure=files).snapshot_id
            rewritten, written = list(plan.live), files
            break
        except CommitConflictError:
            if attempt == retries:
                raise
            table.refresh()
            plan = _plan(table, bound, reader, counts)
            _check_retention(table, plan, retain_last)
    table.refresh()
    after = _plan(table, bound, reader, counts)  # step 3, on the metadata as committed (MAINT-5)
    meta = after.metadata
    keep = int_property(meta.properties, EXPIRE_MIN_SNAPSHOTS_TO_KEEP) if retain_last is None else retain_last
    kept = set(_kept(meta, keep, commits=False)) | {meta.current_snapshot_id}
    ids = sorted(sid for sid in after.reaching if sid not in kept)
    sizes = _sizes(table) if ids else {}
    deleted: list[DeletedFile] = []
    warnings: list[str] = []
    expired: tuple[int, ...] = ()
    retry: list[str] = []
    if ids:
        result = expire_snapshots(table, snapshot_ids=ids)
        expired = result.expired_snapshot_ids
        failed = set(result.failed_deletes)
        warnings += result.warnings
        for kind, paths in (("data", result.data_files), ("deletion-vector", result.deletion_vector_files),
                            ("manifest", result.manifests), ("manifest-list", result.manifest_lists),
                            ("metadata", result.metadata_files)):
            deleted += [DeletedFile(p, sizes.get(p, 0), kind) for p in paths if p not in failed]
        retry = [p for p in result.data_files if p in failed]  # committed files: no grace needed (MAINT-5)
    scan = scan_storage(table)  # step 4 (MAINT-10)
    deletable, _ = _classify(table, scan, reader, grace, expired_files=set(retry))
    failed_now = set(delete_files(table.io, scan.location, [f.path for f in deletable]))
    deleted += [DeletedFile(f.path, f.size, "orphan" if f.path not in retry else "data")
                for f in deletable if f.path not in failed_now]
    checked, pending, rescan = _verify(table, bound, reader, grace)  # step 5 (ROWDEL-17)
    return ErasureReport(
        table=table.name, filter=text, dry_run=False, matched_rows=matched,
        stored_rows=sum(counts.values()), files_rewritten=tuple(f.path for f in rewritten),
        files_written=tuple(f.path for f in written), snapshot_id=snapshot_id, snapshots_expired=expired,
        files_deleted=tuple(deleted), pending=tuple(pending), checked=tuple(checked), rescan_rows=rescan,
        warnings=tuple(warnings))


def _is_data(path: str) -> bool:
    """A file that may hold rows: anything under ``data/`` except the deletion-vector folder (LAYOUT-12)."""
    return path.startswith("data/") and not path.startswith(DELETES_FOLDER + "/")


@dataclass(frozen=True)
class _Listed:
    path: str
    size: int
    matching_rows: int | None


def _classify(table: Table, scan: StorageScan, reader: _Reader, grace: timedelta, *,
              expired_files: set[str] = frozenset()) -> tuple[list[_Listed], list[PendingFile]]:
    """The unreferenced data files holding a matching row (or unreadable): deletable now, or pending.

    ``expired_files`` were committed and are now unreferenced: MAINT-5 lets them go at once.
    """
    now = time.time()
    cutoff = now - grace.total_seconds()
    leases = Leases(table.catalog).live(table.metadata.table_uuid, "write")
    unreferenced = [f for f in scan.unreferenced if _is_data(f.path)]
    found = thread_map(lambda f: reader.count_or_none(f"{scan.location}/{f.path}"), unreferenced,
                       READ_THREADS)
    deletable, pending = [], []
    for f, n in zip(unreferenced, found):
        if n == 0:
            continue
        ready = None if f.mtime is None else f.mtime + grace.total_seconds()
        if f.path in expired_files:
            deletable.append(_Listed(f.path, f.size, n))
        elif scan.is_in_flight(f.path):
            name = f.path.rsplit("/", 1)[-1]
            until = max([lease.expires_at for lease in leases if lease.key in name] + [ready or 0.0])
            pending.append(PendingFile(f.path, f.size, "write-lease", _utc(until), n))
        elif ready is None or f.mtime > cutoff:  # type: ignore[operator]
            pending.append(PendingFile(f.path, f.size, "grace-period", _utc(ready), n))
        else:
            deletable.append(_Listed(f.path, f.size, n))
    return deletable, pending


def _utc(seconds: float | None) -> datetime | None:
    return None if not seconds else datetime.fromtimestamp(seconds, timezone.utc)


def _verify(table: Table, bound: Expression, reader: _Reader, grace: timedelta
            ) -> tuple[list[FileCheck], list[PendingFile], int]:
    """Read storage again (no earlier result reused) and account for every data file in it (ROWDEL-17)."""
    table.refresh()
    counts: dict[str, int] = {}
    plan = _plan(table, bound, reader, counts)
    if plan.reaching:
        sid, paths = next(iter(plan.reaching.items()))
        raise ErasureVerificationError(
            f"erasure of {table.name} is incomplete: data file {paths[0]} of retained snapshot {sid} still "
            f"holds {counts[paths[0]]} matching row(s) (committed concurrently, or kept by retention); run "
            "the erasure again (ROWDEL-17)")
    meta = table.metadata
    rescan = DataScan(table.io, meta, meta.current_snapshot, meta.schema, bound).count()
    scan = scan_storage(table)
    deletable, pending = _classify(table, scan, reader, grace)
    pending += [PendingFile(f.path, f.size, "not-deleted", None, f.matching_rows) for f in deletable]
    held = {p.path for p in pending}
    checked = []
    for f in scan.listed:
        if not _is_data(f.path) or f.path in held:
            continue
        referenced = f.path in scan.reachability.data_files
        check = "read" if (f.path in counts or not referenced) else "statistics"
        checked.append(FileCheck(f.path, f.size, check, referenced))
    return checked, pending, rescan


def _dry_run(table: Table, bound: Expression, plan: _Plan, reader: _Reader, counts: dict[str, int],
             grace: timedelta, text: str) -> ErasureReport:
    """The report the run would give from the plan, with nothing written or deleted (ROWDEL-18)."""
    meta = plan.metadata
    matched = sum(thread_map(lambda f: reader.count(f"{table.location}/{f.path}", f.record_count, f),
                             plan.live, READ_THREADS))
    expire = set(plan.reaching)  # the current snapshot among them when it has live files to rewrite
    deleted: list[DeletedFile] = []
    if expire:
        removed = [s for s in meta.snapshots if s.snapshot_id in expire]
        retained = reachable_files(table.io, table.location, [s for s in meta.snapshots if s not in removed])
        if plan.live:  # the erasure's snapshot keeps the current snapshot's other files and their vectors
            gone = {f.path for f in plan.live}
            stay = [f for f in table.plan_files() if f.path not in gone]
            vectors = {f.deletion_vector.path: 0 for f in stay if f.deletion_vector is not None}
            retained = replace(retained, data_files={**retained.data_files, **{f.path: 0 for f in stay}},
                               deletion_vectors={**retained.deletion_vectors, **vectors})
        only = reachable_only_from(table.io, removed, retained)
        sizes = _sizes(table)
        deleted += [DeletedFile(p, sizes.get(p, n), "data") for p, n in sorted(only.data_files.items())]
        deleted += [DeletedFile(p, sizes.get(p, n), "deletion-vector")
                    for p, n in sorted(only.deletion_vectors.items())]
    deletable, pending = _classify(table, scan_storage(table), reader, grace)
    deleted += [DeletedFile(f.path, f.size, "orphan") for f in deletable]
    return ErasureReport(
        table=table.name, filter=text, dry_run=True, matched_rows=matched, stored_rows=sum(counts.values()),
        files_rewritten=tuple(f.path for f in plan.live), files_written=(), snapshot_id=None,
        snapshots_expired=tuple(sorted(expire)), files_deleted=tuple(deleted), pending=tuple(pending))



def _sizes(table: Table) -> dict[str, int]:
    """The size of every file under the table location, by path relative to it (MAINT-2)."""
    return {f.path: f.size for f in list_location(table.io, table_location(table.metadata_location))}
