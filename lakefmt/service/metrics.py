"""The service's Prometheus metrics, kept with ``prometheus_client`` (spec/service.md SERVICE-26).

Every :class:`ServiceMetrics` has its own :class:`~prometheus_client.CollectorRegistry`
(never the library's global one), so several services — or several tests — can live in
one process. ``/metrics`` serves :meth:`ServiceMetrics.render` in the text exposition
format 0.0.4::

    # HELP lakefmt_service_jobs_total Jobs finished, by kind and final status.
    # TYPE lakefmt_service_jobs_total counter
    lakefmt_service_jobs_total{kind="compaction",status="succeeded"} 3.0

Metrics are the library's objects: ``m.jobs.labels(kind="compaction", status="succeeded").inc()``.

Example:
    >>> m = ServiceMetrics()
    >>> m.runs.labels(kind="compaction", trigger="api").inc()
    >>> m.value("lakefmt_service_runs_total", kind="compaction", trigger="api")
    1.0
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

DEFAULT_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


def counter_total(counter: Counter) -> float:
    """The sum of a counter over every label set (the service's ``since_start`` totals)."""
    return sum(s.value for family in counter.collect() for s in family.samples if s.name.endswith("_total"))


def label_sets(metric: Gauge) -> list[dict[str, str]]:
    """The label sets a labelled gauge currently has a value for."""
    return [dict(s.labels) for family in metric.collect() for s in family.samples]


class ServiceMetrics:
    """The metrics ``lakefmt serve`` exports (SERVICE-26); names are prefixed ``lakefmt_``."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...]) -> Histogram:
            return Histogram(name, doc, labels, registry=r, buckets=DEFAULT_BUCKETS)

        self.up = gauge("lakefmt_service_up", "1 while the service runs.")
        self.jobs = counter("lakefmt_service_jobs_total", "Jobs finished, by kind and final status.",
                            ("kind", "status"))
        self.runs = counter("lakefmt_service_runs_total", "Runs started, by kind and trigger (schedule or api).",
                            ("kind", "trigger"))
        self.errors = counter("lakefmt_service_errors_total", "Table jobs that ended in an error, by kind.",
                              ("kind",))
        self.duration = histogram("lakefmt_service_job_duration_seconds", "Duration of finished jobs.", ("kind",))
        self.table_duration = histogram("lakefmt_service_table_job_duration_seconds",
                                        "Duration of one table's part of a job.", ("kind",))
        self.running = gauge("lakefmt_service_running_jobs", "Jobs running in this process.")
        self.queued = gauge("lakefmt_service_queued_table_jobs", "Table jobs waiting for a worker.")
        self.files_rewritten = counter("lakefmt_compaction_files_rewritten_total",
                                       "Data files removed by committed compaction groups.", ("table",))
        self.files_written = counter("lakefmt_compaction_files_written_total",
                                     "Data files added by committed compaction groups.", ("table",))
        self.bytes_rewritten = counter("lakefmt_compaction_bytes_rewritten_total",
                                       "Bytes of the files removed by committed compaction groups.", ("table",))
        self.bytes_written = counter("lakefmt_compaction_bytes_written_total",
                                     "Bytes of the files added by committed compaction groups.", ("table",))
        self.groups = counter("lakefmt_compaction_groups_total",
                              "Compaction groups by outcome: committed, conflict, lease-held, quiet-window, "
                              "stopped, failed.", ("table", "status"))
        self.groups_committed = counter("lakefmt_compaction_groups_committed_total",
                                        "Compaction groups committed.", ("table",))
        self.conflicts = counter("lakefmt_compaction_conflicts_total",
                                 "Compaction groups dropped because a concurrent commit removed their inputs.",
                                 ("table",))
        self.retries = counter("lakefmt_service_retries_total",
                               "Table jobs re-planned and run again after a conflict or a transient error.",
                               ("kind", "table"))
        self.bytes_freed = counter("lakefmt_maintenance_bytes_freed_total",
                                   "Bytes deleted by snapshot expiry and orphan removal.", ("kind", "table"))
        self.table_files = gauge("lakefmt_table_data_files", "Live data files of a table.", ("table",))
        self.table_small_files = gauge("lakefmt_table_small_files",
                                       "Live data files below the table's compaction threshold.", ("table",))
        self.table_manifests = gauge("lakefmt_table_manifests", "Manifests of a table's current snapshot.",
                                     ("table",))
        self.commits_waiting = gauge("lakefmt_catalog_commits_waiting",
                                     "Commit requests waiting for a table's commit turn (CATHTTP-21).")
        self.commit_turns = counter("lakefmt_catalog_commit_turns_total",
                                    "Commit turns given with a refused commit (CATHTTP-22).")
        self.http_requests = counter("lakefmt_service_http_requests_total", "HTTP requests answered.",
                                     ("method", "route", "status"))

    def value(self, sample: str, **labels: Any) -> float:
        """The current value of one sample (e.g. ``lakefmt_service_jobs_total``), 0 if it has none yet."""
        found = self.registry.get_sample_value(sample, {k: str(v) for k, v in labels.items()})
        return 0.0 if found is None else found

    def render(self) -> str:
        """Every metric in the text exposition format 0.0.4 (served with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry).decode()
