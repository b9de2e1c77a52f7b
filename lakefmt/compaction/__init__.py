"""Compaction: rewrite small files into target-sized ones, and compact manifests (spec/compaction.md).

``t.compaction`` is a :class:`Compaction` for table ``t``:

    >>> plan = t.compaction.plan(strategy="binpack")       # dry run: groups, and why files are left out
    >>> print(plan.explain())
    >>> result = t.compaction.run(strategy="sort", sort_by=["payload_id", "sensor_kind"])
    >>> result = t.compaction.run(strategy="zorder", columns=["payload_id", "sensor_kind"])
    >>> t.compaction.rewrite_manifests()

Options default to the table's ``compaction.*`` properties (:mod:`lakefmt.compaction.options`)
and may be overridden per call. The pieces, top to bottom: :mod:`~lakefmt.compaction.planner`
(pure planning), :mod:`~lakefmt.compaction.rewrite` (one group; also what a Spark task runs),
:mod:`~lakefmt.compaction.runner` (leases, pacing), :mod:`~lakefmt.compaction.commits`,
:mod:`~lakefmt.compaction.manifests`.

On a table with deletion vectors every rewrite drops the rows they delete (COMPACT-32),
and a file with at least ``compaction.delete-ratio-threshold`` of its rows deleted is
rewritten even when large or alone (COMPACT-35): ``plan.explain()`` says ``deletes``.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakefmt.compaction.leasing import PartitionLeases
from lakefmt.compaction.manifests import planning_seconds, rewrite_manifests
from lakefmt.compaction.options import (
    COMPACTION_PROPERTIES,
    CompactionOptions,
    Strategy,
    resolve_options,
)
from lakefmt.compaction.pacing import Pacer, QuietWindows, TokenBucket
from lakefmt.compaction.planner import (
    CompactionPlan,
    FileGroup,
    PartitionPlan,
    PlannerFile,
    SkippedFile,
    plan_groups,
)
from lakefmt.compaction.results import CompactionResult, GroupResult, ManifestRewriteResult
from lakefmt.compaction.rewrite import RewriteResult, RewriteTask, rewrite_group
from lakefmt.compaction.runner import (
    Progress,
    Rewriter,
    default_owner,
    first_lease_keys,
    plan_table,
    resolve_engine,
    run_plan,
)
from lakefmt.compaction.verify import Checksum, checksum
from lakefmt.errors import LakefmtError, ValidationError
from lakefmt.expressions import Expression

if TYPE_CHECKING:
    from lakefmt.catalog import CatalogSession
    from lakefmt.table import Table

# How long the planning session waits for the plan to take the first partitions' leases:
# about what a catalog session of their own costs (COMPACT-39).
PLAN_WAIT_SECONDS = 0.01

__all__ = [
    "COMPACTION_PROPERTIES",
    "Checksum",
    "Compaction",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionResult",
    "FileGroup",
    "GroupResult",
    "ManifestRewriteResult",
    "Pacer",
    "PartitionPlan",
    "PlannerFile",
    "QuietWindows",
    "RewriteResult",
    "RewriteTask",
    "SkippedFile",
    "TokenBucket",
    "checksum",
    "plan_groups",
    "planning_seconds",
    "resolve_options",
    "rewrite_group",
]


class Compaction:
    """Compaction of one table: ``plan``, ``run`` and ``rewrite_manifests`` (spec/compaction.md).

    Every option left as None comes from the table's ``compaction.*`` properties.
    """

    def __init__(self, table: Table) -> None:
        self.table = table

    def __repr__(self) -> str:
        return f"Compaction({self.table.name!r})"

    def options(self, *, target_file_size: int | None = None, small_file_ratio: float | None = None,
                min_input_files: int | None = None, max_group_size: int | None = None,
                min_age_seconds: float | None = None, max_concurrent_groups: int | None = None,
                read_mb_per_s: float | None = None, quiet_windows: str | None = None,
                zstd_level: int | None = None, lease_seconds: float | None = None, verify: str | None = None,
                sorted_row_group_rows: int | None = None, sorted_page_size_bytes: int | None = None,
                delete_ratio_threshold: float | None = None, sort_memory_bytes: int | None = None, **unknown: Any) -> CompactionOptions:
        """The effective options: table properties, overridden by the non-None arguments (COMPACT-1).

        Raises:
            ValidationError: an option this method does not know (a typo stays no silent no-op).
        """
        if unknown:
            known = sorted(p for p in inspect.signature(Compaction.options).parameters if p not in {"self", "unknown"})
            raise ValidationError(f"unknown compaction option(s) {', '.join(sorted(unknown))}; "
                                  f"the options are: {', '.join(known)}")
        return resolve_options(
            self.table.metadata.properties, target_file_size=target_file_size, small_file_ratio=small_file_ratio,
            min_input_files=min_input_files, max_group_size=max_group_size, min_age_seconds=min_age_seconds,
            max_concurrent_groups=max_concurrent_groups, read_mb_per_s=read_mb_per_s,
            quiet_windows=quiet_windows, zstd_level=zstd_level, lease_seconds=lease_seconds, verify=verify,
            sorted_row_group_rows=sorted_row_group_rows, sorted_page_size_bytes=sorted_page_size_bytes,
            delete_ratio_threshold=delete_ratio_threshold, sort_memory_bytes=sort_memory_bytes)

    def plan(self, strategy: Strategy = "binpack", *, sort_by: Sequence[str] | None = None,
             columns: Sequence[str] | None = None, filter: str | Expression | None = None,
             now: datetime | None = None, **options: Any) -> CompactionPlan:
        """What :meth:`run` would do, without writing anything (COMPACT-11).

        ``options`` are the keyword arguments of :meth:`options` (``min_age_seconds=0``, ...).
        """
        self.table.refresh()
        return plan_table(self.table, self.options(**options), strategy=strategy, sort_by=sort_by,
                          columns=columns, filter=filter, now=now)

    def run(self, strategy: Strategy = "binpack", *, sort_by: Sequence[str] | None = None,
            columns: Sequence[str] | None = None, filter: str | Expression | None = None,
            respect_windows: bool = False, should_pause: Callable[[], float] | None = None,
            progress: Progress | None = None, hook: Callable[[str, dict[str, Any]], None] | None = None,
            use_leases: bool = True, owner: str | None = None, engine: str | Rewriter = "local", spark: Any = None,
            should_stop: Callable[[], bool] | None = None, **options: Any) -> CompactionResult:
        """Plan and compact: each group is rewritten, verified and committed on its own (COMPACT-18).

        Args:
            strategy: ``"binpack"``, ``"sort"`` (by ``sort_by`` or the table's sort order) or
                ``"zorder"`` (over ``columns``, default the sort order's columns).
            filter: only files that may hold matching rows are compacted (COMPACT-10).
            respect_windows: do nothing inside a quiet window, and start no partition once
                one begins (COMPACT-26).
            should_pause: back-off hook, asked before every input file; returns seconds to wait.
            progress: called as ``progress(groups_done, groups_total, group_result)``.
            hook: test seam, called as ``hook(point, info)`` at ``"outputs-written"`` and
                ``"before-commit"``.
            use_leases: take a per-partition lease in the catalog (COMPACT-22).
            should_stop: asked before each partition starts; once True, no further partition
                starts and running groups finish and commit (COMPACT-31). A service's shutdown.
            engine: where groups are rewritten: ``"local"`` (threads of this process), ``"spark"``
                (one Spark task per group, on ``spark`` or the active session; spec/spark.md), or
                a callable ``RewriteTask -> RewriteResult``. Planning and commits stay here.
            options: keyword arguments of :meth:`options`.
        """
        rewriter = resolve_engine(engine, self.table, **({"spark": spark} if spark is not None else {}))
        opts = self.options(**options)
        leases = PartitionLeases(self.table, owner=owner or default_owner(), ttl=opts.lease_seconds,
                                 enabled=use_leases)
        if respect_windows and QuietWindows.parse(opts.quiet_windows).contains():
            plan = CompactionPlan(strategy, opts, (), int(time.time() * 1000))  # not even planned (COMPACT-26)
        else:
            try:
                plan = _plan_with_write_lease(
                    self.table, opts, strategy=strategy, sort_by=sort_by, columns=columns, filter=filter,
                    take_leases=lambda s, planned: leases.take_in(s, first_lease_keys(self.table, planned)))
            except BaseException:
                leases.close()  # any taken early
                raise
        return run_plan(self.table, plan, respect_windows=respect_windows, should_pause=should_pause,
                        progress=progress, hook=hook, rewriter=rewriter, should_stop=should_stop, leases=leases)

    def rewrite_manifests(self, *, target_size: int | None = None,
                          probe_filter: str | Expression | None = None) -> ManifestRewriteResult:
        """Merge small manifests into few, clustered by partition, as a metadata-only commit (COMPACT-29)."""
        return rewrite_manifests(self.table, target_size=target_size, probe_filter=probe_filter)


def _plan_with_write_lease(table: Table, opts: CompactionOptions, *,
                           take_leases: Callable[[CatalogSession, CompactionPlan], object] | None = None,
                           **kwargs: Any) -> CompactionPlan:
    """Plan the table's current snapshot while, on a thread, one catalog session reads the table's
    pointer and takes the run's write lease (CAT-10), which :func:`run_plan` then holds.

    Planning starts on the handle's metadata; if the pointer read shows that it was stale, the
    table is refreshed and planned again. One session instead of a refresh and a lease of their
    own: a session costs about 2.5 ms of CPU, and this one waits on the disk while planning runs.
    If the lease cannot be taken here, run_plan's own attempt raises the error. When the plan
    of the current metadata is ready within :data:`PLAN_WAIT_SECONDS` of that work, the same
    session calls ``take_leases(session, plan)`` (the first partitions' leases, COMPACT-37): a
    small run then starts rewriting without another session; a longer plan does not keep the
    catalog locked, and its leases are taken when its partitions start.
    """
    found: list[str] = []
    failed: list[BaseException] = []
    planned_now: list[CompactionPlan] = []
    ready = threading.Event()
    namespace, name = table.identifier
    planned = table.metadata_location

    def locate_and_lease() -> None:
        try:
            with table.catalog.session() as s:
                found.append(s.current_location(namespace, name))
                with contextlib.suppress(Exception):
                    table.write_token_in(s)
                if take_leases is not None and found[0] == planned and ready.wait(PLAN_WAIT_SECONDS) and planned_now:
                    take_leases(s, planned_now[0])
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread below
            failed.append(exc)

    leasing = threading.Thread(target=locate_and_lease, name="lakefmt-compact-write-lease", daemon=True)
    leasing.start()
    error: LakefmtError | None = None
    try:
        planned_now.append(plan_table(table, opts, **kwargs))
    except LakefmtError as exc:  # say, a stale snapshot's manifests expired: raised below if the handle is current
        error = exc
    finally:
        ready.set()
        leasing.join()
    if failed:
        raise failed[0]
    if found[0] != planned:  # the handle was stale: plan the current snapshot
        table.refresh(found[0])
        return plan_table(table, opts, **kwargs)
    if error is not None:
        raise error
    return planned_now[0]
