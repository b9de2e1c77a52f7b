"""Structured logs: one JSON object per line on stderr (spec/service.md SERVICE-27, SERVICE-11).

Every line has ``ts`` (UTC, ISO 8601), ``level``, ``logger`` and ``event``, plus the
event's fields. The service writes one line per job (``job.finished``) and per
compaction group (``compaction.group``) with table, partition, files in and out,
bytes and seconds. A :class:`RedactFilter` replaces every configured secret (the
bearer token) with ``[redacted]`` wherever it appears, as a second line of defence:
no code path logs the token or request headers in the first place.

Example:
    >>> configure_logging("info", secrets=[token])
    >>> log_event(logger, "job.finished", job_id="...", kind="compaction", status="succeeded")
    {"ts": "2026-01-01T10:05:02.114+00:00", "level": "info", "logger": "lakefmt.service", "event": "job.finished", ...}
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, TextIO

LOGGER_NAME = "lakefmt.service"
REDACTED = "[redacted]"
_FIELDS = "lakefmt_fields"
_THIRD_PARTY = ("uvicorn", "uvicorn.error", "uvicorn.access", "fastapi")


def log_event(logger: logging.Logger, event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``event`` with ``fields`` as one JSON line."""
    logger.log(level, event, extra={_FIELDS: fields})


class JsonFormatter(logging.Formatter):
    """A record -> one line of JSON; values JSON cannot hold are written with ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        out.update(getattr(record, _FIELDS, None) or {})
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(", ", ": "))


class RedactFilter(logging.Filter):
    """Replace each secret by ``[redacted]`` in the message, its arguments and its fields."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {k: self._clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._clean(v) for v in value)
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        record.msg = self._clean(str(record.msg))
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(self._clean(a if isinstance(a, (int, float)) else str(a)) for a in args)
        fields = getattr(record, _FIELDS, None)
        if fields:
            setattr(record, _FIELDS, self._clean(fields))
        return True


def configure_logging(level: str = "info", *, secrets: Iterable[str | None] = (), stream: TextIO | None = None
                      ) -> logging.Handler:
    """Send the service's and uvicorn's loggers to one JSON handler on ``stream`` (stderr)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactFilter(secrets))
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    for name in (LOGGER_NAME, "lakefmt", *_THIRD_PARTY):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(numeric)
    return handler
