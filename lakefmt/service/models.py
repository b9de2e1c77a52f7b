"""Request and response bodies of the HTTP API, as pydantic models (spec/service.md §HTTP API).

They exist for the OpenAPI document: every field is typed and described once here,
and FastAPI validates requests and serializes answers against them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["compaction", "manifests", "expire", "orphans"]
JobStatusName = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted", "abandoned"]
KindParam = Annotated[Kind | None, Query(description="only jobs of this kind")]
StatusParam = Annotated[JobStatusName | None, Query(description="only jobs that ended with this status")]
TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}\.[A-Za-z_][A-Za-z0-9_]{0,127}$"


class ErrorBody(BaseModel):
    detail: str = Field(description="What went wrong")


class Root(BaseModel):
    service: str
    version: str
    docs: str
    openapi: str
    api: str
    metrics: str


class Liveness(BaseModel):
    status: Literal["ok", "stopping"]


class TriggerRequest(BaseModel):
    """``POST /api/v1/trigger``: run a job now (SERVICE-15)."""

    model_config = ConfigDict(extra="forbid")
    kind: Kind = Field("compaction", description="what to run")
    table: str | None = Field(None, pattern=TABLE_PATTERN,
                              description="namespace.table; default: every table the service looks after")
    respect_windows: bool | None = Field(
        None, description="compaction only: honour quiet windows (default: [compaction] respect_windows)")


class Totals(BaseModel):
    """Job counts by status and summed results, over every instance (SERVICE-13)."""

    total_jobs: int
    queued_jobs: int
    running_jobs: int
    succeeded_jobs: int
    failed_jobs: int
    cancelled_jobs: int
    interrupted_jobs: int
    abandoned_jobs: int
    files_rewritten: int
    files_written: int
    bytes_rewritten: int
    bytes_written: int
    groups_committed: int
    groups_failed: int
    groups_conflict: int
    bytes_freed: int


class Schedule(BaseModel):
    enabled: bool
    schedule: str = Field(description="cron expression, UTC")
    next_run: str | None = Field(description="next fire time of this instance's scheduler")
    last_run: str | None = Field(description="when the last job of this kind started (any instance)")
    last_status: JobStatusName | None


class Instance(BaseModel):
    instance_id: str
    host: str
    pid: int
    address: str | None
    started_at: str | None
    heartbeat_at: str | None
    stopped_at: str | None


class Status(BaseModel):
    """``GET /api/v1/status`` (SERVICE-12)."""

    instance_id: str
    version: str
    warehouse: str
    started_at: str | None
    enabled: bool = Field(description="whether scheduled compaction is enabled")
    running: bool = Field(description="whether this instance is running a job")
    jobs_running: int
    jobs_queued: int
    last_run: str | None
    next_run: str | None
    schedules: dict[str, Schedule]
    stats: Totals
    instances: list[Instance] = Field(description="live service instances on this warehouse")


class Stats(BaseModel):
    """``GET /api/v1/stats`` (SERVICE-13)."""

    all: Totals
    by_kind: dict[str, Totals]
    since_start: dict[str, int] = Field(description="this process's compaction counters")


class Candidate(BaseModel):
    """One partition as compaction sees it (SERVICE-14)."""

    table: str
    partition: str
    file_count: int
    total_bytes: int
    candidate_files: int = Field(description="files below the small-file threshold")
    candidate_bytes: int
    age_seconds: float | None = Field(description="seconds since the partition's last ingest (COMPACT-5)")
    eligible: bool = Field(description="whether a run now would rewrite files of this partition")
    reason: str | None = Field(description="why not: too-young, too-few-files, too-big, already-compacted")
    groups: int
    bytes_to_rewrite: int
    leased: bool = Field(description="whether a compactor holds this partition's lease now")


class Candidates(BaseModel):
    candidates: list[Candidate]
    total_candidates: int = Field(description="eligible partitions")
    total_partitions: int


class TableHealth(BaseModel):
    """A table's file layout (SERVICE-14)."""

    table: str
    snapshot_id: int | None
    snapshots: int
    data_files: int
    small_files: int
    manifests: int
    eligible_partitions: int
    live_bytes: int
    live_records: int
    historical_bytes: int = Field(description="bytes only older snapshots reach: freed by snapshot expiry")
    orphan_bytes: int = Field(description="unreferenced bytes: freed by orphan removal")
    bytes_reclaimable: int
    partitions: int


class Health(BaseModel):
    tables: list[TableHealth]


class Job(BaseModel):
    """A job and its results (SERVICE-17, SERVICE-21)."""

    job_id: str
    kind: Kind
    trigger: Literal["schedule", "api"]
    scope: str | None = Field(description="the table, or null for every table")
    status: JobStatusName
    instance_id: str
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    seconds: float | None
    tables_total: int
    tables_done: int
    files_rewritten: int
    files_written: int
    bytes_rewritten: int
    bytes_written: int
    groups_committed: int
    groups_failed: int
    groups_conflict: int
    bytes_freed: int
    error: str | None
    tables: list[dict[str, Any]] | None = Field(None, description="per-table outcomes, with compaction groups")


class Jobs(BaseModel):
    jobs: list[Job]


class History(BaseModel):
    jobs: list[Job]
    limit: int
    offset: int
