"""Running a compaction: plan from a table, rewrite groups in parallel, commit them (COMPACT-18..COMPACT-28).

:func:`plan_table` reads the live files of the current snapshot (with the time each
was ingested) and hands them to the pure planner. :func:`run_plan` executes a plan:
partition by partition, most fragmented first, it takes the partition's lease (with those of
the small partitions after it, in one catalog session: COMPACT-37), runs
the group rewrites on a bounded thread pool (paced by the read budget and the
back-off hook), and commits rewritten groups through the catalog's compare-and-swap
as ``replace`` snapshots (:mod:`~lakefmt.compaction.commits`): a group of at least
the target size as soon as it is rewritten, smaller ones together once they add up to the target size or nothing is
running (one commit for a run of tiny partitions, COMPACT-18). A group whose source
files were removed concurrently is dropped and its outputs deleted; appends that
land meanwhile are rebased by the commit protocol; one failing group never blocks
the others (partial progress, COMPACT-19). Deletion vectors: a group reads its inputs
with the vectors they have when its partition starts (a file whose vector grew since
planning is read with the new one); its commit removes the inputs as read, so a delete
that lands on one of them before the commit makes that group a conflict, never
resurrects the rows (COMPACT-34, ROWDEL-4). Leases only save work; the catalog's
compare-and-swap is what keeps two compactors from both replacing a file (COMPACT-24).
"""

from __future__ import annotations

import importlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from lakefmt.compaction.commits import commit_groups
from lakefmt.compaction.leasing import PartitionLeases
from lakefmt.compaction.options import STRATEGIES, CompactionOptions, Strategy
from lakefmt.compaction.pacing import Pacer, QuietWindows, TokenBucket
from lakefmt.compaction.planner import CompactionPlan, FileGroup, PartitionPlan, PlannerFile, plan_groups
from lakefmt.compaction.results import CompactionResult, GroupResult
from lakefmt.compaction.rewrite import Hook, RewriteResult, RewriteTask, rewrite_group
from lakefmt.encoding import SharedChoice
from lakefmt.errors import LakefmtError, ValidationError
from lakefmt.expressions import Expression
from lakefmt.manifest_cache import read_entries, read_list
from lakefmt.sorting import parse_sort_by
from lakefmt.table import under_write_lease

if TYPE_CHECKING:
    from lakefmt.manifest import DataFile
    from lakefmt.metadata import Snapshot, TableMetadata
    from lakefmt.table import Table

Progress = Callable[[int, int, GroupResult], None]
Rewriter = Callable[[RewriteTask], RewriteResult]
# Engines other than "local" live in integration packages above this one: looked up by name, never imported here.
ENGINES = {"spark": "lakefmt.spark.compaction:make_rewriter"}


def resolve_engine(engine: str | Rewriter, table: Table, **engine_options: Any) -> Rewriter | None:
    """The function that rewrites one group elsewhere, or None to rewrite in this process.

    ``engine`` is ``"local"``, a registered name (``"spark"``, which takes ``spark=session``),
    or any callable ``RewriteTask -> RewriteResult``.
    """
    if callable(engine):
        return engine
    if engine == "local":
        return None
    if engine not in ENGINES:
        raise ValidationError(f"unknown compaction engine {engine!r}; use 'local', {', '.join(map(repr, ENGINES))} "
                              "or a callable")
    module, _, factory = ENGINES[engine].partition(":")
    return getattr(importlib.import_module(module), factory)(table, **engine_options)  # type: ignore[no-any-return]


def default_owner() -> str:
    """A compactor's identity in the leases table: host, process and a random suffix."""
    return f"compactor:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_key(meta: TableMetadata, spec_id: int, partition: tuple[Any, ...]) -> str:
    """The key of a partition's lease: ``<spec id>:<partition path>`` (COMPACT-22)."""
    spec = meta.spec_by_id(spec_id)
    if spec.is_unpartitioned:
        return f"{spec_id}:"
    try:
        return f"{spec_id}:{spec.partition_path(partition, meta.schema)}"
    except LakefmtError:
        return f"{spec_id}:{partition!r}"


def live_files(table: Table, snapshot: Snapshot, scope: set[str] | None) -> list[PlannerFile]:
    """The live files of ``snapshot`` with when (and by what operation) each was added (COMPACT-5)."""
    meta = table.metadata
    location = meta.location
    snapshots = {s.snapshot_id: s for s in meta.snapshots}
    out: list[PlannerFile] = []
    for m in read_list(table.io, f"{location}/{snapshot.manifest_list}"):
        if m.live_files_count == 0:
            continue
        for e in read_entries(table.io, f"{location}/{m.path}", m, meta.spec_by_id(m.spec_id), meta.schema):
            if not e.is_live:
                continue
            added = snapshots.get(e.snapshot_id) if e.snapshot_id is not None else None
            out.append(PlannerFile(
                e.data_file,
                added_ms=added.timestamp_ms if added is not None else None,
                compacted=added is not None and added.operation == "replace",
                in_scope=scope is None or e.data_file.path in scope))
    return out


def resolve_layout(meta: TableMetadata, strategy: Strategy, sort_by: Sequence[str] | None,
                   columns: Sequence[str] | None) -> tuple[tuple[tuple[str, str, str], ...], int | None, tuple[str, ...]]:
    """Sort keys, the id of the sort order outputs will follow (if registered), and Z-order columns."""
    if strategy not in STRATEGIES:
        raise ValidationError(f"unknown compaction strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    schema = meta.schema
    if isinstance(sort_by, str) or isinstance(columns, str):
        raise ValidationError("sort_by and columns take lists of column names, e.g. ['payload_id']")
    if strategy == "binpack":
        if sort_by or columns:
            raise ValidationError("binpack does not order rows; use strategy='sort' or 'zorder' with columns")
        return (), None, ()
    if strategy == "sort":
        if columns and not sort_by:
            sort_by = columns
        if sort_by:
            order = parse_sort_by(list(sort_by), schema)
            known = next((o.order_id for o in meta.sort_orders if o.fields == order.fields and o.fields), None)
        else:
            order = meta.sort_order
            known = order.order_id
        if order.is_unsorted:
            raise ValidationError("strategy 'sort' needs sort_by=[...] or a table sort order (sort_by at create)")
        return tuple(order.arrow_sort_keys(schema)), known, ()
    names = list(columns or sort_by or [])
    if not names:
        names = [f.name for f in (schema.field_by_id(sf.source_id) for sf in meta.sort_order.fields) if f]
    if not names:
        raise ValidationError("strategy 'zorder' needs columns=[...] or a table sort order")
    return (), None, tuple(schema.find(n).name for n in names)


def plan_table(table: Table, options: CompactionOptions, *, strategy: Strategy, sort_by: Sequence[str] | None = None,
               columns: Sequence[str] | None = None, filter: str | Expression | None = None,
               now: datetime | None = None) -> CompactionPlan:
    """Plan a compaction of the table's current snapshot (COMPACT-3..COMPACT-11)."""
    started = time.perf_counter()
    meta = table.metadata
    keys, order_id, zcols = resolve_layout(meta, strategy, sort_by, columns)
    snapshot = meta.current_snapshot
    now_ms = int((now or datetime.now(timezone.utc)).timestamp() * 1000)
    if snapshot is None:
        files: list[PlannerFile] = []
    else:
        scope = None if filter is None else {f.path for f in table.scan(filter, snapshot_id=snapshot.snapshot_id)
                                             .plan_files()}
        files = live_files(table, snapshot, scope)

    def label(spec_id: int, values: tuple[Any, ...]) -> str:
        spec = meta.spec_by_id(spec_id)
        if spec.is_unpartitioned:
            return "(unpartitioned)"
        try:
            path = spec.partition_path(values, meta.schema)
        except LakefmtError:
            path = repr(values)
        return path if spec_id == meta.default_spec_id else f"spec={spec_id}/{path}"

    plan = plan_groups(files, options, strategy=strategy, now_ms=now_ms, target_sort_order_id=order_id, label=label)
    return replace(plan, snapshot_id=None if snapshot is None else snapshot.snapshot_id, sort_keys=keys,
                   zorder_columns=zcols, planning_seconds=time.perf_counter() - started)


def first_lease_keys(table: Table, plan: CompactionPlan) -> list[str]:
    """The leases :func:`run_plan` takes first: the first partition's with those it takes
    ahead (COMPACT-37); a caller may take them early, in a session it opens anyway (COMPACT-39)."""
    queue = [p for p in plan.partitions if p.groups]
    if not queue:
        return []
    first, rest = queue[0], queue[1:]
    return [lease_key(table.metadata, p.spec_id, p.partition) for p in (first, *_sharing_commits(first, rest, plan))]


def make_task(table: Table, plan: CompactionPlan, group: FileGroup) -> RewriteTask:
    """The plain-data description of one group's rewrite (what a Spark task would receive)."""
    meta = table.metadata
    options = plan.options
    write = table.write_options(kind="compact", target_file_size=options.target_file_size,
                                compression_level=options.zstd_level)
    if plan.strategy != "binpack":  # clustered rows: small row groups and pages serve selective reads (COMPACT-16)
        write = replace(write, row_group_rows=options.sorted_row_group_rows,
                        page_size_bytes=options.sorted_page_size_bytes)
    inputs_sorted = plan.target_sort_order_id is not None and all(
        f.sort_order_id == plan.target_sort_order_id for f in group.files)
    return RewriteTask(
        group_id=group.group_id, location=meta.location, schema=meta.schema, spec=meta.spec_by_id(group.spec_id),
        partition=group.partition, files=group.files, strategy=plan.strategy, write_options=write,
        sort_keys=plan.sort_keys, zorder_columns=plan.zorder_columns,
        output_sort_order_id=plan.target_sort_order_id if plan.strategy == "sort" else None,
        inputs_sorted=inputs_sorted, read_back=options.verify == "read-back",
        sort_memory_bytes=options.sort_memory_bytes)


@under_write_lease  # CAT-10: the outputs stay protected however long the run takes
def run_plan(table: Table, plan: CompactionPlan, *, respect_windows: bool = False,
             should_pause: Callable[[], float] | None = None, progress: Progress | None = None,
             hook: Hook | None = None, use_leases: bool = True, owner: str | None = None,
             clock: Callable[[], datetime] | None = None, rewriter: Rewriter | None = None,
             should_stop: Callable[[], bool] | None = None, leases: PartitionLeases | None = None
             ) -> CompactionResult:
    """Execute ``plan``: rewrite, verify and commit group by group (COMPACT-18..COMPACT-28).

    ``rewriter`` runs one group's rewrite elsewhere (for example as a Spark task); the read
    budget is then charged per group, before it starts, and ``hook`` sees only ``"before-commit"``.
    ``should_stop`` is asked before each partition starts; once it returns True no further
    partition starts, groups already running finish and commit, and the groups not started
    are reported ``stopped`` (COMPACT-31). ``leases`` are the run's partition leases when the
    caller made them (and took some early, :func:`first_lease_keys`); ``use_leases`` and
    ``owner`` then do not apply. Every lease is released before the run returns.
    """
    started = time.perf_counter()
    now = clock or (lambda: datetime.now(timezone.utc))
    windows = QuietWindows.parse(plan.options.quiet_windows)
    files_before, bytes_before = _totals(table.metadata)
    total = len(plan.groups)
    if leases is None:
        leases = PartitionLeases(table, owner=owner or default_owner(), ttl=plan.options.lease_seconds,
                                 enabled=use_leases)
    quiet = respect_windows and windows.contains(now())
    if quiet or total == 0:
        leases.close()  # those taken early (COMPACT-37: deleted at the latest when the run ends)
        return _result(table, plan, [], started, files_before, bytes_before,
                       status="quiet-window" if quiet else "nothing-to-do")
    pacer = Pacer(TokenBucket.from_mb_per_s(plan.options.read_mb_per_s), should_pause)
    # Every output of the run, the first one's choice, measured by a trial write if the run is
    # large enough as a whole (WRITE-7, WRITE-11, COMPACT-16).
    encodings = SharedChoice(rows=sum(f.live_record_count for g in plan.groups for f in g.files))
    results: list[GroupResult] = []
    held: dict[str, int] = {}  # lease key -> groups still running
    running: dict[Future[RewriteResult], tuple[FileGroup, str]] = {}
    queue = [p for p in plan.partitions if p.groups]

    def finish(group_result: GroupResult) -> None:
        results.append(group_result)
        if progress is not None:
            progress(len(results), total, group_result)

    def skip_partition(p: PartitionPlan, status: Any, error: str | None = None) -> None:
        for g in p.groups:
            finish(GroupResult(g.group_id, g.partition_label, status, len(g.files), g.input_bytes, error=error))

    def work(task: RewriteTask) -> RewriteResult:
        if rewriter is not None:
            pacer(sum(f.file_size_bytes for f in task.files))
            return rewriter(task)
        pacer.wait_while_paused()
        # The outputs are made durable by the commit that adds them, through this same io (COMMIT-20):
        # a rewrite thread never waits on fsync, the commit's sync overlaps the next rewrites.
        return rewrite_group(table.io, task, throttle=pacer, hook=hook, sync=False, encodings=encodings)

    # At most max-concurrent-groups rewrites at once (COMPACT-27).
    at_once = plan.options.groups_at_once(plan.strategy)
    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="lakefmt-compact")
    committing: list[tuple[Future[RewriteResult], tuple[FileGroup, str]]] = []

    def start_partitions() -> None:
        while queue and len(running) < at_once:
            part = queue.pop(0)
            if should_stop is not None and should_stop():  # COMPACT-31: start nothing more
                for rest in (part, *queue):
                    skip_partition(rest, "stopped", "the run was stopped before this partition started")
                queue.clear()
                break
            if respect_windows and windows.contains(now()):
                skip_partition(part, "quiet-window")
                for rest in queue:
                    skip_partition(rest, "quiet-window")
                queue.clear()
                break
            key = lease_key(table.metadata, part.spec_id, part.partition)

            def ahead(part: PartitionPlan = part) -> list[str]:
                """Leases taken with ``part``'s (COMPACT-37); asked only when a catalog session is needed."""
                return [lease_key(table.metadata, p.spec_id, p.partition) for p in _sharing_commits(part, queue, plan)]

            if not leases.start(key, ahead):  # atomic; an expired lease is taken over (COMPACT-23, COMPACT-37)
                skip_partition(part, "lease-held", "another compactor holds this partition's lease")
                continue
            live = _live_files_if_changed(table, plan.snapshot_id, {g.snapshot_id for g in results})
            groups = []
            for g in part.groups:
                current = g if live is None else _as_live(g, live)
                if current is None:  # another writer replaced its files since planning (COMPACT-18)
                    finish(GroupResult(g.group_id, g.partition_label, "conflict", len(g.files), g.input_bytes,
                                       error="source files were removed since planning; not rewritten"))
                else:
                    groups.append(current)
            if not groups:
                leases.finished(key)
                continue
            held[key] = len(groups)
            for g in groups:
                running[pool.submit(work, make_task(table, plan, g))] = (g, key)

    def commit(batch: list[tuple[Future[RewriteResult], tuple[FileGroup, str]]]) -> None:
        keys = list(dict.fromkeys(key for _, (_, key) in batch))
        # The partitions this batch completes: their leases go in the commit's own session (COMPACT-22).
        done = [k for k in keys if held[k] == sum(1 for _, (_, key) in batch if key == k)]
        for group_result in commit_groups(table, plan, [(future, group) for future, (group, _) in batch], hook,
                                           lambda: [leases.renew_if_due(k) for k in keys],
                                           lambda s: leases.release_in(s, done)):
            finish(group_result)
        for _, (_, key) in batch:
            held[key] -= 1
            if held[key] == 0:
                del held[key]
                leases.finished(key)

    try:
        while queue or running or committing:
            start_partitions()
            if running:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                committing.extend((future, running.pop(future)) for future in done)
                start_partitions()  # the next rewrites start before these commits: no core waits on a commit
            # Finished groups share a commit until they are worth one of their own (COMPACT-18).
            if committing and (not running or _ready_bytes(committing) >= plan.options.target_file_size):
                batch, committing = committing, []  # from here on their outputs are the commit's to clean up
                commit(batch)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for future in [*running, *(f for f, _ in committing)]:  # rewritten, commit never tried: unreferenced
            if future.done() and not future.cancelled() and future.exception() is None:
                table.io.delete_many(list(future.result().output_paths))
        leases.close()
    stopped = any(g.status == "stopped" for g in results)
    return _result(table, plan, results, started, files_before, bytes_before, throttled=pacer.throttled_seconds,
                   status="stopped" if stopped else "done")


def _sharing_commits(part: PartitionPlan, queue: list[PartitionPlan], plan: CompactionPlan) -> list[PartitionPlan]:
    """The partitions after ``part`` whose leases are taken with its own (COMPACT-37): the next ones in
    the queue while, with ``part``, their input bytes stay within the target file size, so their groups
    would share commits anyway (COMPACT-18)."""
    budget = plan.options.target_file_size - sum(g.input_bytes for g in part.groups)
    out: list[PartitionPlan] = []
    for p in queue:
        budget -= sum(g.input_bytes for g in p.groups)
        if budget < 0:
            break
        out.append(p)
    return out


def _ready_bytes(committing: list[tuple[Future[RewriteResult], tuple[FileGroup, str]]]) -> int:
    """Input bytes of the finished groups waiting for a commit."""
    return sum(group.input_bytes for _, (group, _) in committing)


def _as_live(group: FileGroup, live: dict[str, DataFile]) -> FileGroup | None:
    """``group`` with its files as they are live now, or None when one of them was removed (COMPACT-18).

    A file another commit gave a new deletion vector since planning is read with that
    vector: the rewrite drops those rows too, and the commit checks it against the vector
    it read (COMPACT-34).
    """
    files: list[DataFile] = []
    for f in group.files:
        now = live.get(f.path)
        if now is None:
            return None
        files.append(now)
    if all(now.deletion_vector == was.deletion_vector for now, was in zip(files, group.files)):
        return group
    return replace(group, files=tuple(files))


def _live_files_if_changed(table: Table, planned_snapshot_id: int | None, own: set[int | None]
                           ) -> dict[str, DataFile] | None:
    """The live files of the (just refreshed) current snapshot by path, or None if nobody else changed it.

    ``own`` holds the snapshots this run committed: replaces of other partitions' files,
    which cannot remove a file of a partition not yet started.
    """
    meta = table.metadata
    parents = {s.snapshot_id: s.parent_snapshot_id for s in meta.snapshots}
    snapshot_id = meta.current_snapshot_id
    while snapshot_id != planned_snapshot_id and snapshot_id in own and snapshot_id in parents:
        snapshot_id = parents[snapshot_id]
    if snapshot_id == planned_snapshot_id:
        return None
    return {f.data_file.path: f.data_file for f in live_files(table, meta.current_snapshot, None)}


def _totals(meta: TableMetadata) -> tuple[int, int]:
    snap = meta.current_snapshot
    if snap is None:
        return 0, 0
    return int(snap.summary.get("total-data-files", 0)), int(snap.summary.get("total-files-size", 0))


def _result(table: Table, plan: CompactionPlan, groups: list[GroupResult], started: float, files_before: int,
            bytes_before: int, *, status: Any = "done", throttled: float = 0.0) -> CompactionResult:
    committed = [g for g in groups if g.committed]
    files_after, bytes_after = _totals(table.metadata) if committed else (files_before, bytes_before)
    order = {g.group_id: i for i, g in enumerate(plan.groups)}
    ordered = tuple(sorted(groups, key=lambda g: order.get(g.group_id, 0)))
    return CompactionResult(
        table=table.name, strategy=plan.strategy, groups_planned=len(plan.groups),
        groups_committed=len(committed),
        groups_skipped=sum(1 for g in groups if g.status in ("conflict", "lease-held", "quiet-window", "stopped")),
        groups_failed=sum(1 for g in groups if g.status == "failed"),
        files_before=files_before, files_after=files_after, bytes_before=bytes_before, bytes_after=bytes_after,
        files_rewritten=sum(g.input_files for g in committed), files_written=sum(g.output_files for g in committed),
        bytes_rewritten=sum(g.input_bytes for g in committed), bytes_written=sum(g.output_bytes for g in committed),
        rows_rewritten=sum(g.rows for g in committed), deleted_rows_dropped=sum(g.deleted_rows for g in committed),
        seconds=time.perf_counter() - started,
        snapshot_ids=tuple(dict.fromkeys(g.snapshot_id for g in committed if g.snapshot_id is not None)),
        groups=ordered, status=status if plan.groups or status != "done" else "nothing-to-do",
        throttled_seconds=throttled, skipped_files=tuple(sorted(plan.skipped_by_reason().items())),
        too_young=plan.too_young())
