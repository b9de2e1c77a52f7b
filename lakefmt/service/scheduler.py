"""The scheduler: trigger each enabled job kind when its cron expression fires (spec/service.md SERVICE-3..SERVICE-5).

One thread sleeps until the earliest next fire time of the enabled schedules (waking
at once on stop), then triggers a job of every kind that is due. A kind whose previous
scheduled job in this process has not finished is not triggered again: the run is
skipped and logged (SERVICE-5), so a slow run never piles up behind itself. A fire time
missed while the process was down is not made up for.

Example:
    >>> scheduler = Scheduler(service)
    >>> scheduler.start()
    >>> scheduler.next_run("compaction")
    datetime.datetime(2026, 1, 1, 11, 5, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakefmt.service.config import JOB_KINDS
from lakefmt.service.cron import CronSchedule
from lakefmt.service.logs import LOGGER_NAME, log_event

if TYPE_CHECKING:
    from lakefmt.service.daemon import CompactionService

logger = logging.getLogger(LOGGER_NAME)


class Scheduler:
    """Cron-driven triggers for one service."""

    def __init__(self, service: CompactionService) -> None:
        self.service = service
        config = service.config
        self.schedules: dict[str, CronSchedule] = {kind: CronSchedule.parse(config.job(kind).schedule) for kind in JOB_KINDS
                          if config.job(kind).enabled}
        self._next: dict[str, datetime] = {}
        self._last_job: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        now = datetime.now(timezone.utc)
        with self._lock:
            self._next = {kind: s.next_after(now) for kind, s in self.schedules.items()}
        if self.schedules:
            self._thread = threading.Thread(target=self._loop, name="lakefmt-service-scheduler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def next_run(self, kind: str) -> datetime | None:
        with self._lock:
            return self._next.get(kind)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                upcoming = min(self._next.values())
            delay = (upcoming - datetime.now(timezone.utc)).total_seconds()
            if delay > 0 and self._stop.wait(min(delay, 60.0)):  # re-check the clock at least once a minute
                return
            now = datetime.now(timezone.utc)
            with self._lock:
                due = [kind for kind, when in self._next.items() if when <= now]
                for kind in due:
                    self._next[kind] = self.schedules[kind].next_after(now)
            for kind in due:
                self._fire(kind)

    def _fire(self, kind: str) -> None:
        previous = self._last_job.get(kind)
        if previous is not None and any(r.job_id == previous for r in self.service.running_jobs()):
            log_event(logger, "schedule.skipped", kind=kind, reason="the previous scheduled job is still running",
                      job_id=previous)
            return
        try:
            record = self.service.trigger(kind, trigger="schedule")
        except Exception as exc:  # noqa: BLE001 - a failed trigger must not stop the schedule
            log_event(logger, "schedule.failed", level=logging.WARNING, kind=kind,
                      error=f"{type(exc).__name__}: {exc}")
            return
        self._last_job[kind] = record.job_id
        log_event(logger, "schedule.fired", kind=kind, job_id=record.job_id, next_run=str(self.next_run(kind)))
