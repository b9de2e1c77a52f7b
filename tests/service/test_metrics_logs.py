"""Prometheus text format and JSON logs (spec/service.md SERVICE-11, SERVICE-26, SERVICE-27)."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from lakefmt.service.logs import JsonFormatter, RedactFilter, configure_logging, log_event
from lakefmt.service.metrics import Registry, ServiceMetrics

# One sample line of the text exposition format 0.0.4.
SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*",?)*\})? '
                    r'(-?[0-9.e+]+|NaN|[+-]Inf)$')


def check_exposition(text: str) -> dict[str, str]:
    """Every line is a HELP, a TYPE or a well-formed sample; returns name -> type."""
    types: dict[str, str] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram")
            types[name] = kind
            continue
        assert SAMPLE.match(line), line
        base = re.sub(r"_(bucket|sum|count)$", "", line.split("{")[0].split(" ")[0])
        assert base in types or line.split("{")[0].split(" ")[0] in types, line
    return types


def test_counter_gauge_histogram_text():
    r = Registry()
    c = r.counter("jobs_total", "Jobs.\nTwo lines \\ here.", ("kind",))
    g = r.gauge("files", "Files.", ("table",))
    h = r.histogram("seconds", "Durations.", ("kind",), buckets=(1, 5))
    c.inc(kind="compaction")
    c.inc(2, kind='we"ird\\name\n')
    g.set(7, table="a.b")
    g.inc(-2, table="a.b")
    for v in (0.5, 3, 10):
        h.observe(v, kind="compaction")
    text = r.render()
    assert check_exposition(text) == {"jobs_total": "counter", "files": "gauge", "seconds": "histogram"}
    assert "# HELP jobs_total Jobs.\\nTwo lines \\\\ here." in text
    assert 'jobs_total{kind="compaction"} 1' in text
    assert 'jobs_total{kind="we\\"ird\\\\name\\n"} 2' in text
    assert 'files{table="a.b"} 5' in text
    assert 'seconds_bucket{kind="compaction",le="1"} 1' in text
    assert 'seconds_bucket{kind="compaction",le="5"} 2' in text
    assert 'seconds_bucket{kind="compaction",le="+Inf"} 3' in text
    assert 'seconds_sum{kind="compaction"} 13.5' in text and 'seconds_count{kind="compaction"} 3' in text
    with pytest.raises(ValueError):
        c.inc(-1, kind="x")
    with pytest.raises(ValueError):
        c.inc(kind="x", extra="y")


def test_service_metrics_render_even_when_empty():
    m = ServiceMetrics()
    types = check_exposition(m.render())
    for name in ("lakefmt_service_runs_total", "lakefmt_service_errors_total", "lakefmt_service_job_duration_seconds",
                 "lakefmt_compaction_files_rewritten_total", "lakefmt_compaction_bytes_rewritten_total",
                 "lakefmt_compaction_groups_committed_total", "lakefmt_compaction_conflicts_total",
                 "lakefmt_service_retries_total", "lakefmt_table_data_files", "lakefmt_table_small_files"):
        assert name in types


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
