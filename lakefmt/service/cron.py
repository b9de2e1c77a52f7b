"""Cron expressions of the service's schedules, read with ``croniter`` (spec/service.md SERVICE-3).

Five fields, ``minute hour day-of-month month day-of-week``, as in crontab(5); or six,
with a leading ``second`` field (for tests and short intervals). The macros ``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight`` and ``@hourly`` are
accepted. Times are UTC. This module only checks the number of fields (croniter would
also take a seventh, a year), turns croniter's errors into a :class:`ValidationError`
naming the configuration key, and refuses an expression that never fires.

Example:
    >>> s = CronSchedule.parse("5 * * * *")              # hourly at :05 (the default)
    >>> s.next_after(datetime(2026, 1, 1, 10, 7, tzinfo=timezone.utc))
    datetime.datetime(2026, 1, 1, 11, 5, tzinfo=datetime.timezone.utc)
    >>> CronSchedule.parse("*/2 * * * * *").next_after(datetime(2026, 1, 1, tzinfo=timezone.utc)).second
    2
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from croniter import CroniterBadDateError, CroniterError, croniter

from lakefmt.errors import ValidationError

MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
FORMAT = ("5 fields (minute hour day-of-month month day-of-week), 6 (a second field first), "
          "or a macro such as @hourly")
_REFERENCE = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class CronSchedule:
    """A valid cron expression (UTC), normalized to single spaces."""

    expression: str

    @staticmethod
    def parse(expression: str, *, what: str = "cron expression") -> CronSchedule:
        """Check ``expression``; a bad one raises :class:`ValidationError` starting with ``what`` (the config key)."""
        text = " ".join(str(expression).split())
        fields = text.split(" ") if text else []
        prefix = f"{what}: {expression!r}"
        if text.lower() in MACROS:
            text = text.lower()
        elif len(fields) not in (5, 6):
            raise ValidationError(f"{prefix} has {len(fields)} field(s); expected {FORMAT}")
        schedule = CronSchedule(text)
        try:
            schedule._iterator(_REFERENCE).get_next(datetime)
        except CroniterBadDateError as exc:
            raise ValidationError(f"{prefix} never fires (no matching date within croniter's search window)") from exc
        except (CroniterError, ValueError, KeyError) as exc:
            raise ValidationError(f"{prefix} is not a valid cron expression ({exc}); expected {FORMAT}") from exc
        return schedule

    def _iterator(self, start: datetime) -> croniter:
        return croniter(self.expression, start, second_at_beginning=True)

    def next_after(self, when: datetime) -> datetime:
        """The first time strictly after ``when`` (naive = UTC) that the expression matches, in UTC."""
        start = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
        nxt: datetime = self._iterator(start).get_next(datetime)
        return nxt.astimezone(timezone.utc)

    def __str__(self) -> str:
        return self.expression
