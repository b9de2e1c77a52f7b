"""Checking the options of maintenance operations (spec/maintenance.md, MAINT-3, MAINT-9).

Snapshot expiry and orphan removal take the same kinds of options and refuse bad ones
the same way: a :class:`~lakefmt.errors.ValidationError` that names the parameter, the
types it accepts and what it got, raised before anything is read, committed or deleted.

Example:
    >>> check_age("older_than", 5, allow_datetime=False)
    Traceback (most recent call last):
    ...
    lakefmt.errors.ValidationError: older_than must be a datetime.timedelta (an age such as timedelta(days=3)), got int 5
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from lakefmt.errors import ValidationError


def _got(value: Any) -> str:
    return f"got {type(value).__name__} {value!r}"


def check_age(name: str, value: Any, *, allow_datetime: bool) -> timedelta | datetime:
    """A non-negative ``timedelta`` (or, with ``allow_datetime``, a ``datetime``)."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValidationError(f"{name} must not be negative, got {value}")
        return value
    if allow_datetime and isinstance(value, datetime):
        return value
    accepted = ("a datetime.timedelta (an age such as timedelta(days=3)) or a datetime.datetime "
                "(a point in time; naive means UTC)" if allow_datetime
                else "a datetime.timedelta (an age such as timedelta(days=3))")
    raise ValidationError(f"{name} must be {accepted}, {_got(value)}")


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False``; anything else (``"false"``, ``0``) is refused rather than guessed."""
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be a bool (True or False), {_got(value)}")
    return value


def check_count(name: str, value: Any, *, minimum: int) -> int:
    """An ``int`` of at least ``minimum`` (``bool`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an int of at least {minimum}, {_got(value)}")
    if value < minimum:
        raise ValidationError(f"{name} must be at least {minimum}, got {value}")
    return value


def check_snapshot_ids(name: str, value: Any) -> list[int]:
    """An iterable of snapshot ids (ints); a single int or a string is refused."""
    if isinstance(value, (str, bytes, int)) or not isinstance(value, Iterable):
        raise ValidationError(f"{name} must be an iterable of int snapshot ids such as [id1, id2], "
                              f"{_got(value)}")
    ids = list(value)
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if bad:
        raise ValidationError(f"{name} must hold int snapshot ids, {_got(bad[0])}")
    return ids
