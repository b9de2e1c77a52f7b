"""Cron expressions: parse one, and find when it next fires (spec/service.md, SERVICE-3).

Five fields, ``minute hour day-of-month month day-of-week``, as in crontab(5); or six,
with a leading ``second`` field (for tests and short intervals). Each field is ``*``,
a number, a range ``a-b``, a step ``*/n`` or ``a-b/n`` or ``a/n``, or a comma-separated
list of those. Months and weekdays also take names (``jan``, ``mon``); weekday 0 and
7 are Sunday. As in cron, when both day-of-month and day-of-week are restricted, a
day matches if either does. Macros: ``@yearly``, ``@monthly``, ``@weekly``, ``@daily``,
``@hourly``. Times are UTC.

Example:
    >>> s = CronSchedule.parse("5 * * * *")              # hourly at :05 (the default)
    >>> s.next_after(datetime(2026, 1, 1, 10, 7, tzinfo=timezone.utc))
    datetime.datetime(2026, 1, 1, 11, 5, tzinfo=datetime.timezone.utc)
    >>> CronSchedule.parse("*/2 * * * * *").next_after(datetime(2026, 1, 1, tzinfo=timezone.utc)).second
    2
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from lakefmt.errors import ValidationError

MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
# (name, low, high, names)
FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("second", 0, 59, {}), ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}),
          ("month", 1, 12, MONTHS), ("day-of-week", 0, 7, WEEKDAYS))
MAX_YEARS = 5  # no match within this many years (e.g. "0 0 31 2 *") means the expression never fires


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron expression: the allowed values of each field (UTC)."""

    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_restricted: bool
    weekday_restricted: bool

    @staticmethod
    def parse(expression: str) -> CronSchedule:
        """Parse ``expression``; raises :class:`ValidationError` naming the bad field."""
        text = " ".join(str(expression).split())
        parts = MACROS.get(text.lower(), text).split(" ")
        if len(parts) == 5:
            parts = ["0", *parts]
        if len(parts) != 6:
            raise ValidationError(f"cron expression {expression!r}: expected 5 fields (minute hour day month "
                                  "weekday) or 6 (second first), or a macro such as @hourly")
        values = [_parse_field(part, *spec, expression) for part, spec in zip(parts, FIELDS)]
        return CronSchedule(expression=text, seconds=values[0], minutes=values[1], hours=values[2], days=values[3],
                            months=values[4], weekdays=frozenset(v % 7 for v in values[5]),
                            day_restricted=parts[3] != "*", weekday_restricted=parts[5] != "*")

    def matches_day(self, when: datetime) -> bool:
        dom = when.day in self.days
        dow = (when.weekday() + 1) % 7 in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return dom or dow
        return dom and dow

    def next_after(self, when: datetime) -> datetime:
        """The first time strictly after ``when`` (naive = UTC) that the expression matches."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        t = when.astimezone(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
        limit = t.year + MAX_YEARS
        while t.year <= limit:
            if t.month not in self.months:
                t = _first_of_next_month(t)
                continue
            if not self.matches_day(t):
                t = (t + timedelta(days=1)).replace(hour=0, minute=0, second=0)
                continue
            if t.hour not in self.hours:
                t = (t + timedelta(hours=1)).replace(minute=0, second=0)
                continue
            if t.minute not in self.minutes:
                t = (t + timedelta(minutes=1)).replace(second=0)
                continue
            if t.second not in self.seconds:
                t = t + timedelta(seconds=1)
                continue
            return t
        raise ValidationError(f"cron expression {self.expression!r} never fires")

    def __str__(self) -> str:
        return self.expression


def _first_of_next_month(t: datetime) -> datetime:
    year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    return t.replace(year=year, month=month, day=1, hour=0, minute=0, second=0)


def _parse_field(text: str, name: str, low: int, high: int, names: dict[str, int], expression: str
                 ) -> frozenset[int]:
    def bad(why: str) -> ValidationError:
        return ValidationError(f"cron expression {expression!r}: {name} field {text!r}: {why}")

    def number(token: str) -> int:
        token = token.strip().lower()
        if token in names:
            return names[token]
        if not token.isdigit():
            raise bad(f"{token!r} is not a number" + (f" or a name ({', '.join(names)})" if names else ""))
        value = int(token)
        if not low <= value <= high:
            raise bad(f"{value} is outside {low}-{high}")
        return value

    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise bad("empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise bad(f"step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = number(first), number(last)
            if start > end:
                raise bad(f"range {base!r} runs backwards")
        else:
            start = number(base)
            end = high if slash else start
        out.update(range(start, end + 1, step))
    return frozenset(out)
