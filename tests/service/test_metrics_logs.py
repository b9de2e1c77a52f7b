"""Prometheus metrics (prometheus_client) and JSON logs (spec/service.md SERVICE-11, SERVICE-26, SERVICE-27)."""

from __future__ import annotations

import io
import json
import logging

from prometheus_client.parser import text_string_to_metric_families

from lakefmt.service.logs import JsonFormatter, RedactFilter, configure_logging, log_event
from lakefmt.service.metrics import ServiceMetrics, counter_total
from tests.service.conftest import metric_samples


def test_service_metrics_render_even_when_empty():
    """SERVICE-26: every metric is declared (HELP and TYPE) before it has a sample."""
    types = {f.name: f.type for f in text_string_to_metric_families(ServiceMetrics().render())}
    for name in ("lakefmt_service_runs", "lakefmt_service_errors", "lakefmt_service_job_duration_seconds",
                 "lakefmt_compaction_files_rewritten", "lakefmt_compaction_bytes_rewritten",
                 "lakefmt_compaction_groups_committed", "lakefmt_compaction_conflicts",
                 "lakefmt_service_retries", "lakefmt_table_data_files", "lakefmt_table_small_files"):
        assert name in types, name
    assert types["lakefmt_service_job_duration_seconds"] == "histogram"
    assert types["lakefmt_service_runs"] == "counter" and types["lakefmt_table_data_files"] == "gauge"


def test_each_service_has_its_own_registry():
    """Two services in one process count separately (no global registry), and labels are escaped."""
    a, b = ServiceMetrics(), ServiceMetrics()
    a.jobs.labels(kind="compaction", status="succeeded").inc()
    a.files_rewritten.labels(table='we"ird\\name\n').inc(18)
    a.duration.labels(kind="compaction").observe(3)
    b.table_files.labels(table="a.b").set(7)
    b.table_files.labels(table="gone.t").set(1)
    b.table_files.remove("gone.t")
    samples = metric_samples(a.render())
    assert samples[("lakefmt_service_jobs_total", (("kind", "compaction"), ("status", "succeeded")))] == 1
    assert samples[("lakefmt_compaction_files_rewritten_total", (("table", 'we"ird\\name\n'),))] == 18
    assert samples[("lakefmt_service_job_duration_seconds_bucket", (("kind", "compaction"), ("le", "5.0")))] == 1
    assert samples[("lakefmt_service_job_duration_seconds_bucket", (("kind", "compaction"), ("le", "1.0")))] == 0
    assert not [k for k in samples if k[0] == "lakefmt_table_data_files"]
    other = metric_samples(b.render())
    assert [k for k in other if k[0] == "lakefmt_table_data_files"] == [("lakefmt_table_data_files", (("table", "a.b"),))]
    assert not [k for k in other if k[0] == "lakefmt_service_jobs_total"]
    assert a.value("lakefmt_service_jobs_total", kind="compaction", status="succeeded") == 1
    assert counter_total(a.files_rewritten) == 18 and counter_total(b.files_rewritten) == 0


def test_json_lines_with_fields_and_redaction():
    stream = io.StringIO()
    handler = configure_logging("info", secrets=["tok-123"], stream=stream)
    try:
        logger = logging.getLogger("lakefmt.service")
        log_event(logger, "job.finished", job_id="j1", files_in=3, seconds=0.5, note="Bearer tok-123")
        logger.info("plain %s message", "tok-123")
        logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET",
                                                 "/api/v1/status?x=tok-123", "1.1", 200)
        logger.debug("hidden at info level")
    finally:
        for name in ("lakefmt.service", "lakefmt", "uvicorn", "uvicorn.error", "uvicorn.access", "fastapi"):
            logging.getLogger(name).handlers = []
            logging.getLogger(name).propagate = True
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 3
    assert lines[0]["event"] == "job.finished" and lines[0]["files_in"] == 3 and lines[0]["level"] == "info"
    assert lines[0]["ts"].endswith("+00:00")
    assert "tok-123" not in stream.getvalue() and stream.getvalue().count("[redacted]") == 3
    assert isinstance(handler.formatter, JsonFormatter)


def test_redact_filter_leaves_records_alone_without_secrets():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    assert RedactFilter([None, ""]).filter(record) and record.getMessage() == "hello world"
