"""Cron expressions, read with croniter (spec/service.md SERVICE-3)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lakefmt.errors import ValidationError
from lakefmt.service.config import load_config
from lakefmt.service.cron import CronSchedule

UTC = timezone.utc


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(("expression", "after", "expected"), [
    ("5 * * * *", at(2026, 1, 1, 10, 7), at(2026, 1, 1, 11, 5)),          # the default: hourly at :05
    ("5 * * * *", at(2026, 1, 1, 10, 4, 59), at(2026, 1, 1, 10, 5)),
    ("5 * * * *", at(2026, 1, 1, 10, 5), at(2026, 1, 1, 11, 5)),           # strictly after
    ("0 */2 * * *", at(2026, 1, 1, 1, 0), at(2026, 1, 1, 2, 0)),
    ("0 2 * * *", at(2026, 1, 1, 3, 0), at(2026, 1, 2, 2, 0)),
    ("30 3 * * sun", at(2026, 1, 1, 0, 0), at(2026, 1, 4, 3, 30)),          # 2026-01-04 is a Sunday
    ("30 3 * * 7", at(2026, 1, 1, 0, 0), at(2026, 1, 4, 3, 30)),            # 7 is Sunday too
    ("0 0 1 jan *", at(2026, 3, 1), at(2027, 1, 1)),
    ("0 0 29 2 *", at(2026, 3, 1), at(2028, 2, 29)),                        # next leap day
    ("0 0 13 * fri", at(2026, 1, 1), at(2026, 1, 2)),                       # day OR weekday when both are set
    ("15-45/15 9-17 * * mon-fri", at(2026, 1, 2, 17, 50), at(2026, 1, 5, 9, 15)),
    ("*/2 * * * * *", at(2026, 1, 1, 0, 0, 0), at(2026, 1, 1, 0, 0, 2)),    # six fields: seconds first
    ("*/20 * * * * *", at(2026, 1, 1, 0, 0, 41), at(2026, 1, 1, 0, 1, 0)),
    ("@hourly", at(2026, 12, 31, 23, 30), at(2027, 1, 1, 0, 0)),
    ("@daily", at(2026, 1, 1, 0, 0), at(2026, 1, 2, 0, 0)),
    ("0 12 * * *", datetime(2026, 1, 1, 11, 0), at(2026, 1, 1, 12, 0)),    # naive times are UTC
])
def test_next_fire_time(expression, after, expected):
    assert CronSchedule.parse(expression).next_after(after) == expected


@pytest.mark.parametrize("expression", [
    "* * * *", "1 2 3 4 5 6 7", "@reboot", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8",
    "*/0 * * * *", "a * * * *", "1,,2 * * * *", "0 0 31 2 *",
])
def test_bad_expressions_are_refused_naming_the_config_key(expression):
    """SERVICE-1: a bad schedule is refused before the service starts, naming the key and the expression."""
    with pytest.raises(ValidationError, match=r"config \[expire\] schedule: ") as info:
        load_config(environ={"LAKEFMT_EXPIRE_SCHEDULE": expression})
    assert repr(expression) in str(info.value)


def test_an_expression_that_never_fires_is_reported():
    with pytest.raises(ValidationError, match="never fires") as info:
        CronSchedule.parse("0 0 31 2 *")
    assert info.value.__cause__ is not None
