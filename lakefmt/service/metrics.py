"""Prometheus metrics in the text exposition format 0.0.4, without a client library (spec/service.md SERVICE-26).

A :class:`Registry` holds counters, gauges and histograms, each with a fixed tuple of
label names; :meth:`Registry.render` writes them as ``/metrics`` serves them::

    # HELP lakefmt_service_jobs_total Jobs finished, by kind and final status.
    # TYPE lakefmt_service_jobs_total counter
    lakefmt_service_jobs_total{kind="compaction",status="succeeded"} 3

Every method is thread-safe.

Example:
    >>> r = Registry()
    >>> runs = r.counter("runs_total", "Runs.", ("kind",))
    >>> runs.inc(kind="compaction")
    >>> print(r.render())
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

DEFAULT_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LabelValues = tuple[str, ...]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


class Metric:
    kind = "untyped"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help
        self.labels = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, values: dict[str, str]) -> LabelValues:
        if set(values) != set(self.labels):
            raise ValueError(f"metric {self.name} takes labels {self.labels}, got {tuple(values)}")
        return tuple(str(values[n]) for n in self.labels)

    def _label_text(self, key: LabelValues, extra: tuple[tuple[str, str], ...] = ()) -> str:
        pairs = [*zip(self.labels, key), *extra]
        if not pairs:
            return ""
        return "{" + ",".join(f'{n}="{escape_label(v)}"' for n, v in pairs) + "}"

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(Metric):
    """A value that only goes up."""

    kind = "counter"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help, labels)
        self._values: dict[LabelValues, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"counter {self.name} cannot decrease")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def total(self) -> float:
        """The sum over every label set."""
        with self._lock:
            return sum(self._values.values())

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        if not items and not self.labels:
            items = [((), 0.0)]
        return [f"{self.name}{self._label_text(k)} {format_value(v)}" for k, v in items]


class Gauge(Counter):
    """A value that goes up and down; :meth:`set` replaces it, :meth:`remove` forgets a label set."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def remove(self, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values.pop(key, None)

    def label_sets(self) -> list[dict[str, str]]:
        with self._lock:
            return [dict(zip(self.labels, k)) for k in self._values]


class Histogram(Metric):
    """Observations counted into cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help: str, labels: Sequence[str] = (),
                 buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help, labels)
        if "le" in self.labels:
            raise ValueError("a histogram cannot have a label named 'le'")
        self.buckets = tuple(sorted(float(b) for b in buckets))
        self._data: dict[LabelValues, tuple[list[int], float, int]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            counts, total, n = self._data.get(key) or ([0] * len(self.buckets), 0.0, 0)
            for i, upper in enumerate(self.buckets):
                if value <= upper:
                    counts[i] += 1
            self._data[key] = (counts, total + value, n + 1)

    def count(self, **labels: str) -> int:
        with self._lock:
            data = self._data.get(self._key(labels))
        return data[2] if data else 0

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted((k, (list(c), s, n)) for k, (c, s, n) in self._data.items())
        lines = []
        for key, (counts, total, n) in items:
            for upper, c in zip(self.buckets, counts):
                lines.append(f"{self.name}_bucket{self._label_text(key, (('le', format_value(upper)),))} {c}")
            lines.append(f"{self.name}_bucket{self._label_text(key, (('le', '+Inf'),))} {n}")
            lines.append(f"{self.name}_sum{self._label_text(key)} {format_value(total)}")
            lines.append(f"{self.name}_count{self._label_text(key)} {n}")
        return lines


class Registry:
    """The metrics of one process, rendered in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._lock = threading.Lock()

    def _add(self, metric: Metric) -> Metric:
        with self._lock:
            if metric.name in self._metrics:
                raise ValueError(f"metric {metric.name} is already registered")
            self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, help, labels))  # type: ignore[return-value]

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(name, help, labels))  # type: ignore[return-value]

    def histogram(self, name: str, help: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._add(Histogram(name, help, labels, buckets))  # type: ignore[return-value]

    def render(self) -> str:
        with self._lock:
            metrics = list(self._metrics.values())
        lines: list[str] = []
        for m in metrics:
            lines += m.header() + m.samples()
        return "\n".join(lines) + "\n"


class ServiceMetrics:
    """The metrics ``lakefmt serve`` exports (SERVICE-26); names are prefixed ``lakefmt_``."""

    def __init__(self) -> None:
        r = self.registry = Registry()
        self.up = r.gauge("lakefmt_service_up", "1 while the service runs.")
        self.jobs = r.counter("lakefmt_service_jobs_total", "Jobs finished, by kind and final status.",
                              ("kind", "status"))
        self.runs = r.counter("lakefmt_service_runs_total", "Runs started, by kind and trigger (schedule or api).",
                              ("kind", "trigger"))
        self.errors = r.counter("lakefmt_service_errors_total", "Table jobs that ended in an error, by kind.",
                                ("kind",))
        self.duration = r.histogram("lakefmt_service_job_duration_seconds", "Duration of finished jobs.",
                                    ("kind",))
        self.table_duration = r.histogram("lakefmt_service_table_job_duration_seconds",
                                          "Duration of one table's part of a job.", ("kind",))
        self.running = r.gauge("lakefmt_service_running_jobs", "Jobs running in this process.")
        self.queued = r.gauge("lakefmt_service_queued_table_jobs", "Table jobs waiting for a worker.")
        self.files_rewritten = r.counter("lakefmt_compaction_files_rewritten_total",
                                         "Data files removed by committed compaction groups.", ("table",))
        self.files_written = r.counter("lakefmt_compaction_files_written_total",
                                       "Data files added by committed compaction groups.", ("table",))
        self.bytes_rewritten = r.counter("lakefmt_compaction_bytes_rewritten_total",
                                         "Bytes of the files removed by committed compaction groups.", ("table",))
        self.bytes_written = r.counter("lakefmt_compaction_bytes_written_total",
                                       "Bytes of the files added by committed compaction groups.", ("table",))
        self.groups = r.counter("lakefmt_compaction_groups_total",
                                "Compaction groups by outcome: committed, conflict, lease-held, quiet-window, "
                                "stopped, failed.", ("table", "status"))
        self.groups_committed = r.counter("lakefmt_compaction_groups_committed_total",
                                          "Compaction groups committed.", ("table",))
        self.conflicts = r.counter("lakefmt_compaction_conflicts_total",
                                   "Compaction groups dropped because a concurrent commit removed their inputs.",
                                   ("table",))
        self.retries = r.counter("lakefmt_service_retries_total",
                                 "Table jobs re-planned and run again after a conflict or a transient error.",
                                 ("kind", "table"))
        self.bytes_freed = r.counter("lakefmt_maintenance_bytes_freed_total",
                                     "Bytes deleted by snapshot expiry and orphan removal.", ("kind", "table"))
        self.table_files = r.gauge("lakefmt_table_data_files", "Live data files of a table.", ("table",))
        self.table_small_files = r.gauge("lakefmt_table_small_files",
                                         "Live data files below the table's compaction threshold.", ("table",))
        self.table_manifests = r.gauge("lakefmt_table_manifests", "Manifests of a table's current snapshot.",
                                       ("table",))
        self.http_requests = r.counter("lakefmt_service_http_requests_total", "HTTP requests answered.",
                                       ("method", "route", "status"))

    def render(self) -> str:
        return self.registry.render()
