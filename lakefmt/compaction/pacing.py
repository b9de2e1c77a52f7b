"""Resource budget and pacing of compaction (spec/compaction.md §Pacing, COMPACT-25..COMPACT-28).

Compaction competes with ingest and queries for bandwidth and CPU, so a run is
paced: a read budget in MB/s (:class:`TokenBucket`), quiet windows in which
scheduled runs do nothing (:class:`QuietWindows`), a cap on concurrent group
rewrites (the runner's thread pool) and a back-off hook, a callable
``should_pause() -> seconds`` consulted before every input file (:class:`Pacer`).

Example:
    >>> bucket = TokenBucket(50 * 10**6)          # 50 MB/s
    >>> bucket.consume(100 * 10**6)               # returns after about 2 s
    >>> QuietWindows.parse("09:00-17:00").contains(datetime(2026, 1, 1, 10, tzinfo=timezone.utc))
    True
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from lakefmt.errors import ValidationError

MB = 1_000_000
_WINDOW = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


class TokenBucket:
    """A read budget of ``rate`` bytes per second, shared by threads (COMPACT-25).

    Tokens accrue at ``rate`` up to ``burst`` bytes; :meth:`consume` takes tokens and,
    when there are too few, sleeps until the debt is paid. With the default burst of
    0 a run that reads Y bytes takes at least Y / rate seconds.
    """

    def __init__(self, rate: float, *, burst: float = 0.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0:
            raise ValidationError(f"a token bucket needs a positive rate, got {rate!r}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._tokens = 0.0
        self._last = clock()
        self.consumed = 0

    @staticmethod
    def from_mb_per_s(mb_per_s: float) -> TokenBucket | None:
        """A bucket for a budget in MB/s, or None for 0 (unlimited)."""
        return TokenBucket(mb_per_s * MB) if mb_per_s > 0 else None

    def consume(self, nbytes: int) -> float:
        """Take ``nbytes`` tokens, sleeping as long as needed; returns the seconds slept."""
        if nbytes <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= nbytes
            self.consumed += nbytes
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


@dataclass(frozen=True)
class QuietWindows:
    """Daily UTC time windows, as minutes since midnight ``[start, end)`` (COMPACT-26).

    A window whose end is not after its start wraps past midnight (``22:00-02:00``).
    """

    windows: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def parse(text: str) -> QuietWindows:
        return QuietWindows(parse_quiet_windows(text))

    def contains(self, when: datetime | None = None) -> bool:
        """Whether ``when`` (default: now; naive datetimes are UTC) falls in a window."""
        when = datetime.now(timezone.utc) if when is None else when
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        when = when.astimezone(timezone.utc)
        minute = when.hour * 60 + when.minute
        for start, end in self.windows:
            if (start <= minute < end) if start < end else (minute >= start or minute < end):
                return True
        return False

    def __str__(self) -> str:
        return ",".join(f"{s // 60:02d}:{s % 60:02d}-{e // 60:02d}:{e % 60:02d}" for s, e in self.windows)


def parse_quiet_windows(text: str) -> tuple[tuple[int, int], ...]:
    """``"09:00-17:00,22:00-23:00"`` -> ``((540, 1020), (1320, 1380))``; empty text means none."""
    out = []
    for part in (p for p in str(text).split(",") if p.strip()):
        match = _WINDOW.match(part)
        if not match:
            raise ValidationError(f"property compaction.quiet-windows: cannot parse {part.strip()!r}; "
                                  "use HH:MM-HH:MM[,HH:MM-HH:MM...] in UTC")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        if h1 > 24 or h2 > 24 or m1 > 59 or m2 > 59 or (h1 == 24 and m1) or (h2 == 24 and m2):
            raise ValidationError(f"property compaction.quiet-windows: {part.strip()!r} is not a time of day")
        start, end = h1 * 60 + m1, h2 * 60 + m2
        if start == end:
            raise ValidationError(f"property compaction.quiet-windows: {part.strip()!r} is empty")
        out.append((start, end))
    return tuple(out)


class Pacer:
    """What a rewrite calls before reading each input file: back-off hook, then read budget (COMPACT-28).

    ``should_pause()`` returns how many seconds to wait (0 or less: go on); it is asked
    again after every wait, so a hook that watches query latency holds compaction
    back for as long as the pressure lasts.
    """

    def __init__(self, bucket: TokenBucket | None = None, should_pause: Callable[[], float] | None = None, *,
                 sleep: Callable[[float], None] = time.sleep, max_pause: float = 3600.0) -> None:
        self.bucket = bucket
        self.should_pause = should_pause
        self._sleep = sleep
        self.max_pause = max_pause
        self.paused_seconds = 0.0
        self.throttled_seconds = 0.0
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> None:
        self.before_read(nbytes)

    def wait_while_paused(self) -> None:
        if self.should_pause is None:
            return
        while True:
            seconds = float(self.should_pause() or 0.0)
            if seconds <= 0:
                return
            seconds = min(seconds, self.max_pause)
            self._sleep(seconds)
            with self._lock:
                self.paused_seconds += seconds

    def before_read(self, nbytes: int) -> None:
        self.wait_while_paused()
        if self.bucket is not None:
            waited = self.bucket.consume(nbytes)
            with self._lock:
                self.throttled_seconds += waited
