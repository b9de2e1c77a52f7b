"""What the service does to one table: the four job kinds, and the read-only views (spec/service.md SERVICE-6).

Each job kind is one function ``(table, config, control) -> TableOutcome`` built on the
public table API only: ``t.compaction.run`` (COMPACT-18..31), ``t.compaction.rewrite_manifests``
(COMPACT-29), ``t.maintenance.expire_snapshots`` and ``t.maintenance.remove_orphan_files``
(MAINT-3..10). :func:`candidates` and :func:`health` are the API's views of a table:
what compaction would do per partition, and how healthy its file layout is.

Example:
    >>> outcome = run_table_job("compaction", t, config, Control())
    >>> outcome.status, outcome.totals["files_rewritten"]
    ('succeeded', 24)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from lakefmt.compaction.leasing import LEASE_KIND
from lakefmt.compaction.results import GroupResult
from lakefmt.compaction.runner import lease_key
from lakefmt.errors import CatalogLockTimeoutError, LakefmtError
from lakefmt.leases import Leases
from lakefmt.manifest_cache import read_list
from lakefmt.service.config import ServiceConfig, parse_seconds
from lakefmt.service.jobs import TOTAL_COLUMNS

if TYPE_CHECKING:
    from lakefmt.compaction import CompactionPlan
    from lakefmt.table import Table

TableStatus = Literal["succeeded", "failed", "stopped", "cancelled"]
TRANSIENT = (CatalogLockTimeoutError, OSError)
RETRY_PAUSE_SECONDS = 0.5


class JobAborted(LakefmtError):
    """Raised inside a group's rewrite when the service aborts running work (shutdown past its grace)."""


@dataclass
class Control:
    """How the service steers a running table job: stop starting work, abort running work, see groups."""

    stop: threading.Event = field(default_factory=threading.Event)
    abort: threading.Event = field(default_factory=threading.Event)
    on_group: Callable[[GroupResult], None] | None = None
    owner: str | None = None  # lease owner (the service instance)

    def should_pause(self) -> float:
        """The compaction back-off hook (COMPACT-28): raises once the job is aborted."""
        if self.abort.is_set():
            raise JobAborted("the service is shutting down; this group was abandoned before commit")
        return 0.0


@dataclass(frozen=True)
class TableOutcome:
    """One table's part of a job, as stored in the job's ``tables`` (SERVICE-21)."""

    table: str
    status: TableStatus
    attempts: int = 0
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    groups: tuple[dict[str, Any], ...] = ()
    error: str | None = None
    totals: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "status": self.status, "attempts": self.attempts,
                "seconds": round(self.seconds, 3), "summary": self.summary, "groups": list(self.groups),
                "error": self.error, **{k: self.totals.get(k, 0) for k in TOTAL_COLUMNS}}


def strategy_for(table: Table, config: ServiceConfig) -> tuple[str, dict[str, Any]]:
    """The table's compaction strategy and layout arguments: its ``[table]`` policy, else the job's setting.

    ``auto`` means ``sort`` when the table has a sort order and ``binpack`` otherwise.
    """
    policy = config.policy(table.name)
    strategy = policy.strategy or config.compaction.strategy
    if strategy == "auto":
        strategy = "binpack" if table.sort_order().is_unsorted else "sort"
    layout: dict[str, Any] = {}
    if policy.columns and strategy == "sort":
        layout["sort_by"] = list(policy.columns)
    elif policy.columns and strategy == "zorder":
        layout["columns"] = list(policy.columns)
    return strategy, layout


def option_overrides(config: ServiceConfig) -> dict[str, Any]:
    job = config.compaction
    return {k: v for k, v in (("read_mb_per_s", job.read_mb_per_s), ("min_age_seconds", job.min_age_seconds))
            if v is not None}


def group_dict(g: GroupResult) -> dict[str, Any]:
    status = "aborted" if g.status == "failed" and (g.error or "").startswith(JobAborted.__name__) else g.status
    return {"group_id": g.group_id, "partition": g.partition, "status": status, "input_files": g.input_files,
            "input_bytes": g.input_bytes, "output_files": g.output_files, "output_bytes": g.output_bytes,
            "rows": g.rows, "method": g.method, "seconds": round(g.seconds, 3), "snapshot_id": g.snapshot_id,
            "error": g.error}


def compact(table: Table, config: ServiceConfig, control: Control, *, respect_windows: bool | None = None
            ) -> TableOutcome:
    """Compact the table's eligible partitions; re-plan after a conflict or a transient error (SERVICE-16)."""
    started = time.perf_counter()
    strategy, layout = strategy_for(table, config)
    windows = config.compaction.respect_windows if respect_windows is None else respect_windows
    on_group = control.on_group
    progress = (lambda _done, _total, g: on_group(g)) if on_group is not None else None
    groups: list[dict[str, Any]] = []
    totals = dict.fromkeys(TOTAL_COLUMNS, 0)
    summary: dict[str, Any] = {"strategy": strategy, "runs": []}
    attempts, error, status = 0, None, "succeeded"
    while True:
        attempts += 1
        try:
            result = table.compaction.run(
                strategy, **layout, **option_overrides(config), respect_windows=windows,  # type: ignore[arg-type]
                should_pause=control.should_pause, should_stop=control.stop.is_set, owner=control.owner,
                progress=progress)
        except TRANSIENT as exc:
            error = f"{type(exc).__name__}: {exc}"
            if attempts > config.compaction.retries or control.stop.is_set():
                status = "failed"
                break
            time.sleep(RETRY_PAUSE_SECONDS)
            continue
        except LakefmtError as exc:
            error, status = f"{type(exc).__name__}: {exc}", "failed"
            break
        error = None
        groups += [group_dict(g) for g in result.groups]
        for name in ("files_rewritten", "files_written", "bytes_rewritten", "bytes_written", "groups_committed"):
            totals[name] += getattr(result, name)
        failed = [g for g in result.groups if g.status == "failed" and group_dict(g)["status"] != "aborted"]
        conflicts = [g for g in result.groups if g.status == "conflict"]
        totals["groups_failed"] += len(failed)
        totals["groups_conflict"] += len(conflicts)
        summary["runs"].append({"status": result.status, "groups_planned": result.groups_planned,
                                "files_before": result.files_before, "files_after": result.files_after,
                                "bytes_before": result.bytes_before, "bytes_after": result.bytes_after,
                                "throttled_seconds": round(result.throttled_seconds, 3)})
        if control.stop.is_set() and (result.status == "stopped" or control.abort.is_set()
                                      or any(g["status"] == "aborted" for g in groups)):
            status = "stopped"
            break
        if failed:
            status, error = "failed", f"{len(failed)} group(s) failed; first: {failed[0].error}"
            break
        if conflicts and attempts <= config.compaction.retries and not control.stop.is_set():
            continue  # inputs changed under us: plan again from the new snapshot
        break
    return TableOutcome(table.name, status, attempts, time.perf_counter() - started,  # type: ignore[arg-type]
                        summary, tuple(groups), error, totals)


def rewrite_manifests(table: Table, config: ServiceConfig, control: Control) -> TableOutcome:
    started = time.perf_counter()
    r = table.compaction.rewrite_manifests()
    return TableOutcome(table.name, "succeeded", 1, time.perf_counter() - started, {
        "manifests_before": r.manifests_before, "manifests_after": r.manifests_after,
        "manifests_rewritten": r.manifests_rewritten, "snapshot_id": r.snapshot_id,
        "planning_seconds_before": round(r.planning_seconds_before, 6),
        "planning_seconds_after": round(r.planning_seconds_after, 6)})


def expire(table: Table, config: ServiceConfig, control: Control) -> TableOutcome:
    started = time.perf_counter()
    job = config.expire
    older = timedelta(seconds=parse_seconds(job.older_than, "older_than")) if job.older_than else None
    r = table.maintenance.expire_snapshots(older_than=older, retain_last=job.retain_last)
    status: TableStatus = "failed" if r.failed_deletes else "succeeded"
    error = f"{len(r.failed_deletes)} file(s) could not be deleted" if r.failed_deletes else None
    return TableOutcome(table.name, status, 1, time.perf_counter() - started, {
        "expired_snapshots": len(r.expired_snapshot_ids), "files_deleted": r.files_deleted,
        "bytes_freed": r.bytes_freed}, error=error, totals={"bytes_freed": r.bytes_freed})


def remove_orphans(table: Table, config: ServiceConfig, control: Control) -> TableOutcome:
    started = time.perf_counter()
    older = timedelta(seconds=parse_seconds(config.orphans.older_than, "older_than"))
    r = table.maintenance.remove_orphan_files(older_than=older, dry_run=False)
    status: TableStatus = "failed" if r.failed_deletes else "succeeded"
    error = f"{len(r.failed_deletes)} orphan(s) could not be deleted" if r.failed_deletes else None
    freed = r.orphan_bytes if not r.failed_deletes else 0
    return TableOutcome(table.name, status, 1, time.perf_counter() - started, {
        "orphans_deleted": len(r.orphan_files) - len(r.failed_deletes), "orphan_bytes": r.orphan_bytes,
        "listed_files": r.listed_files, "in_flight_files": r.in_flight_files}, error=error,
        totals={"bytes_freed": freed})


KINDS: dict[str, Callable[..., TableOutcome]] = {
    "compaction": compact, "manifests": rewrite_manifests, "expire": expire, "orphans": remove_orphans}


def run_table_job(kind: str, table: Table, config: ServiceConfig, control: Control, **options: Any) -> TableOutcome:
    """Run one kind of job on one table; an error becomes a ``failed`` outcome, never an exception."""
    if control.stop.is_set():
        return TableOutcome(table.name, "stopped", error="the job was stopped before this table started")
    started = time.perf_counter()
    try:
        return KINDS[kind](table, config, control, **options)
    except (LakefmtError, OSError) as exc:
        return TableOutcome(table.name, "failed", 1, time.perf_counter() - started,
                            error=f"{type(exc).__name__}: {exc}")


# -- views ---------------------------------------------------------------------------------------

def plan_for(table: Table, config: ServiceConfig) -> CompactionPlan:
    strategy, layout = strategy_for(table, config)
    return table.compaction.plan(strategy, **layout, **option_overrides(config))  # type: ignore[arg-type]


def candidates(table: Table, config: ServiceConfig) -> list[dict[str, Any]]:
    """Per partition: file count, size, age, whether compaction would rewrite it and, if not, why (SERVICE-14)."""
    plan = plan_for(table, config)
    meta = table.metadata
    leased = {lease.key for lease in Leases(table.catalog).live(meta.table_uuid, LEASE_KIND)}
    out = []
    for p in plan.partitions:
        files = {f.path: f.file_size_bytes for f in p.candidates}
        files.update({s.data_file.path: s.data_file.file_size_bytes for s in p.skipped})
        age = None if p.ingested_ms is None else max(0.0, (plan.now_ms - p.ingested_ms) / 1000)
        eligible = bool(p.groups)
        out.append({
            "table": table.name, "partition": p.label, "file_count": p.files_total,
            "total_bytes": sum(files.values()), "candidate_files": len(p.candidates),
            "candidate_bytes": sum(f.file_size_bytes for f in p.candidates), "age_seconds": age,
            "eligible": eligible, "reason": None if eligible else (p.reason or "too-few-files"),
            "groups": len(p.groups), "bytes_to_rewrite": sum(g.input_bytes for g in p.groups),
            "leased": lease_key(meta, p.spec_id, p.partition) in leased})
    return out


def layout_counts(table: Table, config: ServiceConfig) -> dict[str, int]:
    """Live data files, small files (compaction candidates) and manifests: what the gauges show (SERVICE-26)."""
    plan = plan_for(table, config)
    snapshot = table.metadata.current_snapshot
    manifests = 0
    if snapshot is not None:
        manifests = len(read_list(table.io, f"{table.metadata.location}/{snapshot.manifest_list}"))
    return {"data_files": sum(p.files_total for p in plan.partitions),
            "small_files": sum(len(p.candidates) for p in plan.partitions), "manifests": manifests,
            "eligible_partitions": sum(1 for p in plan.partitions if p.groups)}


def health(table: Table, config: ServiceConfig) -> dict[str, Any]:
    """Small-file count, manifest count and bytes reclaimable by expiry and orphan removal (SERVICE-14)."""
    counts = layout_counts(table, config)
    stats = table.maintenance.stats()
    return {"table": table.name, "snapshot_id": stats.snapshot_id, "snapshots": stats.snapshots, **counts,
            "live_bytes": stats.live_bytes, "live_records": stats.live_records,
            "historical_bytes": stats.historical_bytes, "orphan_bytes": stats.orphan_bytes,
            "bytes_reclaimable": stats.historical_bytes + stats.orphan_bytes, "partitions": len(stats.partitions)}
