"""The compaction service: ``lakefmt serve`` (spec/service.md).

A long-running process that compacts every table of a warehouse on a cron schedule
(and optionally compacts manifests, expires snapshots and removes orphans on their own
schedules), with an HTTP API to see and steer it, Prometheus metrics, structured JSON
logs, and jobs and history persisted in the warehouse's catalog.

Modules, bottom to top: :mod:`.cron` (cron expressions), :mod:`.config` (TOML + environment),
:mod:`.jobs` (persistence in the catalog), :mod:`.tasks` (what a job does to one table),
:mod:`.metrics`, :mod:`.logs`, :mod:`.scheduler`, :mod:`.daemon` (the service: workers,
schedules, clean stop), :mod:`.models` and :mod:`.api` (HTTP, FastAPI), :mod:`.server`
(uvicorn, signals) and :mod:`.cli` (``lakefmt serve``). The package needs the ``service``
extra: croniter (schedules), prometheus_client (metrics), and for HTTP FastAPI, uvicorn and
swagger-ui-bundle (``/docs`` without a CDN); :mod:`.cli` imports them only when ``serve`` runs.

Example:
    $ lakefmt serve --warehouse warehouse --config lakefmt.toml
"""

from __future__ import annotations

from lakefmt.service.config import ServiceConfig, load_config
from lakefmt.service.cron import CronSchedule
from lakefmt.service.daemon import CompactionService, ServiceStoppingError
from lakefmt.service.jobs import JobRecord, JobStore

__all__ = ["CompactionService", "CronSchedule", "JobRecord", "JobStore", "ServiceConfig", "ServiceStoppingError",
           "load_config"]
