"""The service itself: jobs on a bounded worker pool, schedules, heartbeat, clean stop (spec/service.md).

:class:`CompactionService` owns one catalog, the job store, the metrics and a pool of
``max_concurrent_jobs`` worker threads. A job (one kind, one table or every table the
service looks after) is split into one *table job* per table; the pool runs at most
``max_concurrent_jobs`` table jobs at once, across all jobs and tables (SERVICE-4).
The :class:`~lakefmt.service.scheduler.Scheduler` triggers jobs on cron schedules; the
HTTP API triggers them on request. The HTTP layer is elsewhere (:mod:`.api`,
:mod:`.server`): this module has no web dependency and is usable in-process.

:meth:`CompactionService.stop` is the clean shutdown (SERVICE-8): no new job or table
job starts; running compactions start no further partition (COMPACT-31) and get
``shutdown_grace_seconds`` to finish their groups; then running groups are abandoned at
their next input file; leases are released by the runner; every unfinished job is
recorded ``interrupted``.

Example:
    >>> service = CompactionService(load_config("lakefmt.toml"))
    >>> service.start()
    >>> job = service.trigger("compaction", table="artemis.downlinks")
    >>> service.stop()
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import duckdb

from lakefmt import __version__
from lakefmt.catalog import Catalog, parse_identifier
from lakefmt.compaction.results import GroupResult
from lakefmt.errors import LakefmtError, NoSuchTableError, ValidationError
from lakefmt.service.config import JOB_KINDS, ServiceConfig
from lakefmt.service.jobs import FINAL, TOTAL_COLUMNS, JobRecord, JobStore, now_us
from lakefmt.service.logs import LOGGER_NAME, log_event
from lakefmt.service.metrics import ServiceMetrics, label_sets
from lakefmt.service.scheduler import Scheduler
from lakefmt.service.tasks import Control, TableOutcome, group_dict, layout_counts, run_table_job

logger = logging.getLogger(LOGGER_NAME)


class ServiceStoppingError(LakefmtError):
    """The service is shutting down and accepts no new job."""


@dataclasses.dataclass
class _Job:
    """A job this process runs: its record, its control and its table outcomes so far."""

    record: JobRecord
    control: Control
    tables: list[str]
    outcomes: dict[str, TableOutcome] = dataclasses.field(default_factory=dict)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    cancelled: bool = False


SESSION_LINGER = 0.05
"""Seconds the service keeps its catalog file between sessions (CAT-23): the catalog server answers a stream
of commits, each a session; keeping the file attached saves ~3.8 ms of CPU per session (measured, 1 writer)."""


class CompactionService:
    """Scheduled, observable compaction and maintenance of one warehouse (spec/service.md)."""

    def __init__(self, config: ServiceConfig, *, catalog: Catalog | None = None) -> None:
        self.config = config
        self.catalog = catalog or Catalog(config.warehouse, catalog_path=config.catalog_path,
                                          storage_options=dict(config.storage_options),
                                          session_linger=SESSION_LINGER)
        self.store = JobStore(self.catalog)
        self.metrics = ServiceMetrics()
        self.instance_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.address: str | None = None
        self.started_us: int | None = None
        self.scheduler = Scheduler(self)
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._abort = threading.Event()
        self._pending = 0
        self._threads: list[threading.Thread] = []

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, address: str | None = None, *, schedule: bool = True) -> None:
        """Register this instance, recover abandoned jobs, start the workers, heartbeat and scheduler."""
        self.address = address
        self.started_us = now_us()
        self._pool = ThreadPoolExecutor(max_workers=self.config.max_concurrent_jobs,
                                        thread_name_prefix="lakefmt-service-job")
        self.store.register(self.instance_id, host=socket.gethostname(), pid=os.getpid(), address=address)
        self._recover()
        self.metrics.up.set(1)
        self._spawn(self._heartbeat_loop, "lakefmt-service-heartbeat")
        if schedule:
            self.scheduler.start()
        log_event(logger, "service.started", instance_id=self.instance_id, address=address,
                  warehouse=self.catalog.warehouse, version=__version__, auth=self.config.auth_enabled,
                  max_concurrent_jobs=self.config.max_concurrent_jobs,
                  schedules={k: self.config.job(k).schedule for k in JOB_KINDS if self.config.job(k).enabled})

    def stop(self, grace: float | None = None) -> None:
        """Clean shutdown (SERVICE-8). Returns when every worker has finished."""
        if self._stopping.is_set():
            return
        grace = self.config.shutdown_grace_seconds if grace is None else grace
        log_event(logger, "service.stopping", instance_id=self.instance_id, grace_seconds=grace)
        with self._lock:
            self._stopping.set()
        self.scheduler.stop()
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.control.stop.set()
        deadline = time.monotonic() + grace
        for job in jobs:
            job.done.wait(max(0.0, deadline - time.monotonic()))
        self.abort_running()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=False)
        for job in jobs:  # table jobs never started (the pool drained them as "stopped")
            job.done.wait(5)
        for t in self._threads:
            t.join(timeout=5)
        self.metrics.up.set(0)
        self.store.unregister(self.instance_id)
        self.catalog.release()  # CAT-23: the catalog file is let go before the process ends
        log_event(logger, "service.stopped", instance_id=self.instance_id)

    def abort_running(self) -> None:
        """Abandon running groups at their next input file (a second signal, or the grace is over)."""
        self._abort.set()
        with self._lock:
            for job in self._jobs.values():
                job.control.stop.set()
                job.control.abort.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _recover(self) -> None:
        stale = int(max(6 * self.config.heartbeat_seconds, 30.0) * 1_000_000)  # SERVICE-23
        for job_id in self.store.mark_abandoned(stale_after_us=stale):
            log_event(logger, "job.abandoned", job_id=job_id)

    def _heartbeat_loop(self) -> None:
        next_gauges = 0.0
        while not self._stopping.wait(self.config.heartbeat_seconds):
            try:
                self.store.heartbeat(self.instance_id)
                self._recover()
                if self.config.gauge_refresh_seconds and time.monotonic() >= next_gauges:
                    next_gauges = time.monotonic() + self.config.gauge_refresh_seconds
                    self.refresh_gauges()
            except Exception as exc:  # noqa: BLE001 - the heartbeat must outlive a transient catalog error
                log_event(logger, "service.heartbeat-failed", level=logging.WARNING, error=f"{type(exc).__name__}: {exc}")

    # -- tables ----------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """The tables this service looks after: ``include`` patterns (default all) minus ``exclude``."""
        names = self.catalog.list_tables()
        if self.config.include:
            names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in self.config.include)]
        return [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in self.config.exclude)]

    def resolve_tables(self, kind: str, table: str | None) -> list[str]:
        if table is not None:
            parse_identifier(table)
            if not self.catalog.table_exists(table):
                raise NoSuchTableError(f"table {table} does not exist")
            return [table]
        names = self.tables()
        if kind == "compaction":
            names = [n for n in names if self.config.policy(n).enabled]
        return names

    def refresh_gauges(self, names: list[str] | None = None) -> None:
        """Per-table file, small-file and manifest gauges (SERVICE-26)."""
        known = set(self.tables()) if names is None else None
        for name in names if names is not None else sorted(known or ()):
            try:
                counts = layout_counts(self.catalog.load_table(name), self.config)
            except (LakefmtError, OSError):
                continue
            self.metrics.table_files.labels(table=name).set(counts["data_files"])
            self.metrics.table_small_files.labels(table=name).set(counts["small_files"])
            self.metrics.table_manifests.labels(table=name).set(counts["manifests"])
        if known is not None:  # forget dropped tables
            for gauge in (self.metrics.table_files, self.metrics.table_small_files, self.metrics.table_manifests):
                for labels in label_sets(gauge):
                    if labels["table"] not in known:
                        gauge.remove(labels["table"])

    # -- jobs ------------------------------------------------------------------------------------
    def trigger(self, kind: str = "compaction", *, table: str | None = None, trigger: str = "api",
                respect_windows: bool | None = None) -> JobRecord:
        """Queue a job of ``kind`` on ``table`` (default: every table looked after); returns its record."""
        if kind not in JOB_KINDS:
            raise ValidationError(f"unknown job kind {kind!r}; use one of {', '.join(JOB_KINDS)}")
        if self._stopping.is_set() or self._pool is None:
            raise ServiceStoppingError("the service is shutting down (or not started); no new job is accepted")
        names = self.resolve_tables(kind, table)
        record = self.store.create(kind, trigger=trigger, scope=table, instance_id=self.instance_id,
                                   tables_total=len(names))
        control = Control(owner=f"service:{self.instance_id}")
        options = {"respect_windows": respect_windows} if kind == "compaction" else {}
        job = _Job(record, control, names, options=options)
        with self._lock:  # stop() sets _stopping under this lock: a job is either submitted or refused
            stopping = self._stopping.is_set()
            if not stopping:
                self._jobs[record.job_id] = job
                self._pending += len(names)
                for name in names:
                    self._pool.submit(self._run_table, job, name)
        if stopping:
            self.store.save(dataclasses.replace(record, status="cancelled", finished_us=now_us(),
                                                error="the service was shutting down"))
            raise ServiceStoppingError("the service is shutting down; no new job is accepted")
        self.metrics.runs.labels(kind=kind, trigger=trigger).inc()
        self.metrics.queued.set(self._pending)
        log_event(logger, "job.queued", job_id=record.job_id, kind=kind, trigger=trigger, scope=table,
                  tables=len(names))
        if not names:
            self._finish(job)
        return job.record

    def cancel(self, job_id: str) -> JobRecord | None:
        """Stop a job of this process: queued tables are skipped, running ones start no new partition."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or job.done.is_set() or job.record.status in FINAL:
            return None
        job.cancelled = True
        job.control.stop.set()
        log_event(logger, "job.cancel-requested", job_id=job_id)
        return job.record

    def running_jobs(self) -> list[JobRecord]:
        """This process's unfinished jobs, with up-to-date progress."""
        with self._lock:
            jobs = list(self._jobs.values())
        return [j.record for j in jobs]

    def active_jobs(self) -> list[JobRecord]:
        """Queued and running jobs of every instance; this process's with live progress (SERVICE-17)."""
        mine = {r.job_id: r for r in self.running_jobs()}
        rows = [mine.pop(r.job_id, r) for r in self.store.active()]
        return sorted([*rows, *mine.values()], key=lambda r: (r.created_us, r.job_id))

    def job(self, job_id: str) -> JobRecord | None:
        with self._lock:
            job = self._jobs.get(job_id)
        return job.record if job is not None else self.store.get(job_id)

    def _run_table(self, job: _Job, name: str) -> None:
        with self._lock:
            self._pending -= 1
            self.metrics.queued.set(self._pending)
        started = time.perf_counter()
        if job.control.stop.is_set():
            outcome = TableOutcome(name, "cancelled" if job.cancelled else "stopped",
                                   error="the job was " + ("cancelled" if job.cancelled else "stopped by shutdown")
                                   + " before this table started")
        else:
            self._mark_running(job)
            control = dataclasses.replace(job.control, on_group=lambda g: self._on_group(job, name, g))
            try:
                table = self.catalog.load_table(name)
                outcome = run_table_job(job.record.kind, table, self.config, control, **job.options)
            except (LakefmtError, OSError) as exc:
                outcome = TableOutcome(name, "failed", 1, time.perf_counter() - started,
                                       error=f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a bug in one table's job must not kill the worker
                logger.exception("table job crashed")
                outcome = TableOutcome(name, "failed", 1, time.perf_counter() - started,
                                       error=f"{type(exc).__name__}: {exc}")
            self._observe_table(job, outcome)
            if name in self.tables():  # gauges cover the tables the service looks after (SERVICE-26)
                self.refresh_gauges([name])
        with job.lock:  # saves of one job are serialized, so the final status is written last
            job.outcomes[name] = outcome
            finished = len(job.outcomes) == len(job.tables)
            if not finished:
                job.record = self._record_with_outcomes(job, final=False)
                self._save(job.record)
        if finished:
            self._finish(job)

    def _save(self, record: JobRecord) -> None:
        """Persist a job row; a failure is logged, and the next save (or SERVICE-23) repairs the row."""
        try:
            self.store.save(record)
        except (LakefmtError, OSError, duckdb.Error) as exc:
            log_event(logger, "job.save-failed", level=logging.WARNING, job_id=record.job_id,
                      error=f"{type(exc).__name__}: {exc}")

    def _mark_running(self, job: _Job) -> None:
        with job.lock:
            if job.record.status != "queued":
                return
            job.record = dataclasses.replace(job.record, status="running", started_us=now_us())
            self.metrics.running.inc()
            self._save(job.record)
        log_event(logger, "job.started", job_id=job.record.job_id, kind=job.record.kind, trigger=job.record.trigger,
                  scope=job.record.scope, tables=len(job.tables))

    def _record_with_outcomes(self, job: _Job, *, final: bool) -> JobRecord:
        outcomes = [job.outcomes[n] for n in job.tables if n in job.outcomes]
        totals: dict[str, Any] = {c: sum(o.totals.get(c, 0) for o in outcomes) for c in TOTAL_COLUMNS}
        record = dataclasses.replace(job.record, tables_done=len(outcomes), tables=tuple(o.to_dict() for o in outcomes),
                                     **totals)
        if not final:
            return record
        statuses = {o.status for o in outcomes}
        errors = [f"{o.table}: {o.error}" for o in outcomes if o.status == "failed"]
        if job.cancelled:
            status = "cancelled"
        elif "stopped" in statuses or (self._stopping.is_set() and len(outcomes) < len(job.tables)):
            status = "interrupted"
        elif errors:
            status = "failed"
        else:
            status = "succeeded"
        error = "; ".join(errors)[:4000] or None
        if status == "interrupted" and error is None:
            error = "the service shut down before this job finished"
        return dataclasses.replace(record, status=status, finished_us=now_us(),  # type: ignore[arg-type]
                                   started_us=record.started_us or now_us(), error=error)

    def _finish(self, job: _Job) -> None:
        with job.lock:
            was_running = job.record.status == "running"
            job.record = self._record_with_outcomes(job, final=True)
            record = job.record
            self._save(record)
        with self._lock:
            self._jobs.pop(record.job_id, None)
        if was_running:
            self.metrics.running.dec()
        self.metrics.jobs.labels(kind=record.kind, status=record.status).inc()
        self.metrics.duration.labels(kind=record.kind).observe(record.seconds or 0.0)
        log_event(logger, "job.finished", level=logging.WARNING if record.status == "failed" else logging.INFO,
                  **record.to_dict(details=False))
        job.done.set()

    def _observe_table(self, job: _Job, outcome: TableOutcome) -> None:
        kind = job.record.kind
        m = self.metrics
        m.table_duration.labels(kind=kind).observe(outcome.seconds)
        if outcome.status == "failed":
            m.errors.labels(kind=kind).inc()
        if outcome.attempts > 1:
            m.retries.labels(kind=kind, table=outcome.table).inc(outcome.attempts - 1)
        if outcome.totals.get("bytes_freed"):
            m.bytes_freed.labels(kind=kind, table=outcome.table).inc(outcome.totals["bytes_freed"])
        log_event(logger, "table.finished", level=logging.WARNING if outcome.status == "failed" else logging.INFO,
                  job_id=job.record.job_id, kind=kind, table=outcome.table, status=outcome.status,
                  attempts=outcome.attempts, seconds=round(outcome.seconds, 3), error=outcome.error,
                  **{k: v for k, v in outcome.totals.items() if v}, summary=outcome.summary)

    def _on_group(self, job: _Job, table: str, g: GroupResult) -> None:
        """One compaction group finished: count it and log one line (SERVICE-27)."""
        d = group_dict(g)
        m = self.metrics
        m.groups.labels(table=table, status=d["status"]).inc()
        if g.committed:
            m.groups_committed.labels(table=table).inc()
            m.files_rewritten.labels(table=table).inc(g.input_files)
            m.files_written.labels(table=table).inc(g.output_files)
            m.bytes_rewritten.labels(table=table).inc(g.input_bytes)
            m.bytes_written.labels(table=table).inc(g.output_bytes)
        elif g.status == "conflict":
            m.conflicts.labels(table=table).inc()
        log_event(logger, "compaction.group", level=logging.WARNING if d["status"] == "failed" else logging.INFO,
                  job_id=job.record.job_id, table=table, partition=g.partition, group_id=g.group_id,
                  status=d["status"], files_in=g.input_files, files_out=g.output_files, bytes_in=g.input_bytes,
                  bytes_out=g.output_bytes, rows=g.rows, seconds=round(g.seconds, 3), rewritten=g.method is not None,
                  error=g.error)
