"""Jobs and service instances, persisted in the catalog (spec/service.md §Persistence, SERVICE-20..SERVICE-25).

The service keeps two tables in the warehouse's DuckDB catalog, created on first use
through :meth:`lakefmt.Catalog.session` (the catalog's lock and one transaction per
call; the core catalog tables are never touched):

* ``lakefmt_service_jobs``: one row per job, from ``queued`` to a final status, with
  its totals as columns (for cheap sums) and its per-table outcomes as JSON;
* ``lakefmt_service_instances``: one row per ``lakefmt serve`` process, with a
  heartbeat. A job left ``queued`` or ``running`` by an instance whose heartbeat has
  stopped is marked ``abandoned`` by any live instance (SERVICE-23).

Times are UTC epoch microseconds.

Example:
    >>> store = JobStore(catalog)
    >>> job = store.create("compaction", trigger="api", scope="artemis.downlinks", instance_id=me)
    >>> store.history(limit=10)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from lakefmt.catalog import Catalog

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted", "abandoned"]
ACTIVE: tuple[JobStatus, ...] = ("queued", "running")
FINAL: tuple[JobStatus, ...] = ("succeeded", "failed", "cancelled", "interrupted", "abandoned")
JOBS_TABLE = "lakefmt_service_jobs"
INSTANCES_TABLE = "lakefmt_service_instances"
TOTAL_COLUMNS = ("files_rewritten", "files_written", "bytes_rewritten", "bytes_written", "groups_committed",
                 "groups_failed", "groups_conflict", "bytes_freed")
_SCHEMA_SQL = (
    f"""CREATE TABLE IF NOT EXISTS {JOBS_TABLE} (
        job_id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, trigger VARCHAR NOT NULL, scope VARCHAR,
        status VARCHAR NOT NULL, instance_id VARCHAR NOT NULL, created_us BIGINT NOT NULL, started_us BIGINT,
        finished_us BIGINT, tables_total INTEGER NOT NULL DEFAULT 0, tables_done INTEGER NOT NULL DEFAULT 0,
        files_rewritten BIGINT NOT NULL DEFAULT 0, files_written BIGINT NOT NULL DEFAULT 0,
        bytes_rewritten BIGINT NOT NULL DEFAULT 0, bytes_written BIGINT NOT NULL DEFAULT 0,
        groups_committed BIGINT NOT NULL DEFAULT 0, groups_failed BIGINT NOT NULL DEFAULT 0,
        groups_conflict BIGINT NOT NULL DEFAULT 0, bytes_freed BIGINT NOT NULL DEFAULT 0,
        result VARCHAR, error VARCHAR)""",
    f"""CREATE TABLE IF NOT EXISTS {INSTANCES_TABLE} (
        instance_id VARCHAR PRIMARY KEY, host VARCHAR, pid INTEGER, address VARCHAR,
        started_us BIGINT NOT NULL, heartbeat_us BIGINT NOT NULL, stopped_us BIGINT)""",
)
_JOB_COLUMNS = ("job_id", "kind", "trigger", "scope", "status", "instance_id", "created_us", "started_us",
                "finished_us", "tables_total", "tables_done", *TOTAL_COLUMNS, "result", "error")


def now_us() -> int:
    return time.time_ns() // 1000


def iso(us: int | None) -> str | None:
    """Epoch microseconds -> ISO 8601 in UTC, or None."""
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1_000_000, timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class JobRecord:
    """One row of ``lakefmt_service_jobs`` (SERVICE-21)."""

    job_id: str
    kind: str
    trigger: str
    scope: str | None
    status: JobStatus
    instance_id: str
    created_us: int
    started_us: int | None = None
    finished_us: int | None = None
    tables_total: int = 0
    tables_done: int = 0
    files_rewritten: int = 0
    files_written: int = 0
    bytes_rewritten: int = 0
    bytes_written: int = 0
    groups_committed: int = 0
    groups_failed: int = 0
    groups_conflict: int = 0
    bytes_freed: int = 0
    tables: tuple[dict[str, Any], ...] = field(default=())
    error: str | None = None

    @property
    def seconds(self) -> float | None:
        if self.started_us is None:
            return None
        end = self.finished_us if self.finished_us is not None else now_us()
        return (end - self.started_us) / 1_000_000

    def to_dict(self, *, details: bool = True) -> dict[str, Any]:
        """The job as the HTTP API returns it (SERVICE-21)."""
        out = {k: v for k, v in asdict(self).items() if not k.endswith("_us") and k != "tables"}
        out.update(created_at=iso(self.created_us), started_at=iso(self.started_us),
                   finished_at=iso(self.finished_us), seconds=self.seconds)
        if details:
            out["tables"] = list(self.tables)
        return out


@dataclass(frozen=True)
class InstanceRecord:
    instance_id: str
    host: str
    pid: int
    address: str | None
    started_us: int
    heartbeat_us: int
    stopped_us: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "host": self.host, "pid": self.pid, "address": self.address,
                "started_at": iso(self.started_us), "heartbeat_at": iso(self.heartbeat_us),
                "stopped_at": iso(self.stopped_us)}


class JobStore:
    """Job and instance rows in the catalog; each method is one short catalog session."""

    def __init__(self, catalog: Catalog, *, create: bool = True) -> None:
        self.catalog = catalog
        if create:
            with catalog.session() as s:
                for sql in _SCHEMA_SQL:
                    s.con.execute(sql)

    # -- jobs ------------------------------------------------------------------------------------
    def create(self, kind: str, *, trigger: str, scope: str | None, instance_id: str, tables_total: int = 0
               ) -> JobRecord:
        job = JobRecord(job_id=uuid.uuid4().hex, kind=kind, trigger=trigger, scope=scope, status="queued",
                        instance_id=instance_id, created_us=now_us(), tables_total=tables_total)
        with self.catalog.session() as s:
            s.con.execute(f"INSERT INTO {JOBS_TABLE} (job_id, kind, trigger, scope, status, instance_id, created_us, "
                          "tables_total) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          [job.job_id, kind, trigger, scope, "queued", instance_id, job.created_us, tables_total])
        return job

    def save(self, job: JobRecord) -> None:
        """Write every mutable column of ``job`` (its owner is the only writer of a job row)."""
        columns = ("status", "started_us", "finished_us", "tables_total", "tables_done", *TOTAL_COLUMNS)
        values = [getattr(job, c) for c in columns]
        with self.catalog.session() as s:
            s.con.execute(f"UPDATE {JOBS_TABLE} SET {', '.join(f'{c} = ?' for c in columns)}, result = ?, error = ? "
                          "WHERE job_id = ?", [*values, json.dumps(list(job.tables)), job.error, job.job_id])

    def get(self, job_id: str) -> JobRecord | None:
        rows = self._select("WHERE job_id = ?", [job_id])
        return rows[0] if rows else None

    def active(self) -> list[JobRecord]:
        """Queued and running jobs of every instance, oldest first."""
        return self._select("WHERE status IN ('queued', 'running') ORDER BY created_us, job_id", [])

    def history(self, *, limit: int = 100, offset: int = 0, table: str | None = None, kind: str | None = None,
                status: str | None = None) -> list[JobRecord]:
        """Finished jobs, newest first; with ``table``, the jobs scoped to it or whose outcomes include it."""
        where = ["status IN ('succeeded', 'failed', 'cancelled', 'interrupted', 'abandoned')"]
        params: list[Any] = []
        if table is not None:
            where.append("(scope = ? OR (scope IS NULL AND position(? IN result) > 0))")
            params += [table, json.dumps(table)]  # a cheap pre-filter; outcomes are checked below
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = f"WHERE {' AND '.join(where)} ORDER BY finished_us DESC, job_id LIMIT ? OFFSET ?"
        if table is None:
            return self._select(sql, [*params, int(limit), int(offset)])
        out: list[JobRecord] = []
        chunk, start = 200, 0
        while len(out) < offset + limit:
            rows = self._select(sql, [*params, chunk, start])
            out += [r for r in rows if r.scope == table or any(t.get("table") == table for t in r.tables)]
            if len(rows) < chunk:
                break
            start += chunk
        return out[offset:offset + limit]

    def last(self, kind: str) -> JobRecord | None:
        """The most recently started job of ``kind`` (any instance)."""
        rows = self._select("WHERE kind = ? AND started_us IS NOT NULL ORDER BY started_us DESC LIMIT 1", [kind])
        return rows[0] if rows else None

    def totals(self, kind: str | None = None) -> dict[str, int]:
        """Job counts by status and summed totals, over every instance (SERVICE-13)."""
        where, params = ("WHERE kind = ?", [kind]) if kind else ("", [])
        with self.catalog.session() as s:
            by_status = dict(s.con.execute(f"SELECT status, count(*) FROM {JOBS_TABLE} {where} GROUP BY status",
                                           params).fetchall())
            sums = s.con.execute(f"SELECT {', '.join(f'coalesce(sum({c}), 0)' for c in TOTAL_COLUMNS)} "
                                 f"FROM {JOBS_TABLE} {where}", params).fetchone()
        out = {"total_jobs": sum(by_status.values()), **{f"{st}_jobs": int(by_status.get(st, 0))
                                                         for st in (*ACTIVE, *FINAL)}}
        out.update({c: int(v) for c, v in zip(TOTAL_COLUMNS, sums or (0,) * len(TOTAL_COLUMNS))})
        return out

    def _select(self, tail: str, params: Sequence[Any]) -> list[JobRecord]:
        with self.catalog.session() as s:
            rows = s.con.execute(f"SELECT {', '.join(_JOB_COLUMNS)} FROM {JOBS_TABLE} {tail}", list(params)).fetchall()
        out = []
        for row in rows:
            values = dict(zip(_JOB_COLUMNS, row))
            tables = tuple(json.loads(values.pop("result") or "[]"))
            out.append(JobRecord(**values, tables=tables))
        return out

    # -- instances -------------------------------------------------------------------------------
    def register(self, instance_id: str, *, host: str, pid: int, address: str | None) -> None:
        t = now_us()
        with self.catalog.session() as s:
            s.con.execute(f"INSERT INTO {INSTANCES_TABLE} VALUES (?, ?, ?, ?, ?, ?, NULL)",
                          [instance_id, host, pid, address, t, t])

    def heartbeat(self, instance_id: str) -> None:
        with self.catalog.session() as s:
            s.con.execute(f"UPDATE {INSTANCES_TABLE} SET heartbeat_us = ? WHERE instance_id = ?",
                          [now_us(), instance_id])

    def unregister(self, instance_id: str) -> None:
        with self.catalog.session() as s:
            s.con.execute(f"UPDATE {INSTANCES_TABLE} SET stopped_us = ? WHERE instance_id = ?",
                          [now_us(), instance_id])

    def instances(self, *, live_within_us: int | None = None) -> list[InstanceRecord]:
        sql = f"SELECT * FROM {INSTANCES_TABLE}"
        params: list[Any] = []
        if live_within_us is not None:
            sql += " WHERE stopped_us IS NULL AND heartbeat_us >= ?"
            params.append(now_us() - live_within_us)
        with self.catalog.session() as s:
            return [InstanceRecord(*r) for r in s.con.execute(sql + " ORDER BY started_us", params).fetchall()]

    def mark_abandoned(self, *, stale_after_us: int) -> list[str]:
        """Mark ``abandoned`` the active jobs of instances stopped or silent for ``stale_after_us`` (SERVICE-23)."""
        t = now_us()
        with self.catalog.session() as s:
            s.con.execute("BEGIN TRANSACTION")
            rows = s.con.execute(
                f"SELECT j.job_id FROM {JOBS_TABLE} j LEFT JOIN {INSTANCES_TABLE} i USING (instance_id) "
                "WHERE j.status IN ('queued', 'running') AND (i.instance_id IS NULL OR i.stopped_us IS NOT NULL "
                "OR i.heartbeat_us < ?)", [t - stale_after_us]).fetchall()
            stale = [r[0] for r in rows]
            for job_id in stale:
                s.con.execute(f"UPDATE {JOBS_TABLE} SET status = 'abandoned', finished_us = ?, error = coalesce("
                              "error, 'the service running this job stopped without finishing it') WHERE job_id = ?",
                              [t, job_id])
            s.con.execute("COMMIT")
        return stale


def stored_history(catalog: Catalog, *, table: str, limit: int = 50) -> list[JobRecord]:
    """Finished jobs that touched ``table``, newest first; [] when no service ever ran here (read-only)."""
    with catalog.session() as s:
        exists = s.con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [JOBS_TABLE]).fetchone()
    if not exists:
        return []
    return JobStore(catalog, create=False).history(limit=limit, table=table)
