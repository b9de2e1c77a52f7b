"""Encodings chosen for one file reused for the next small files of the same table (spec/commits.md WRITE-11).

A small append's file is its whole WRITE-7 sample: choosing its encodings (one
``count_distinct`` per column, :func:`lakefmt.encoding.choose_encodings`) cost 1.35 ms of
CPU for 10,000 Artemis rows and 2.4 ms for 10,000 telemetry rows (their 200-byte strings
hashed): more than writing the file with them (1.2 ms), and 7-9% of the whole append. A
stream of small appends to one table brings rows of one shape, so a choice made from one
file's rows serves the next small files of the same table, Arrow schema and write options
in this process: at most :data:`REUSE_FILES` of them within :data:`REUSE_SECONDS`, after
which the next file chooses again from its own rows.

Example:
    >>> key = (location, rows.schema, options.compression_level, options.min_compression_saving)
    >>> encodings = CHOSEN.get(key) if reusable(rows.num_rows) else None
    >>> CHOSEN.put(key, writer.encodings)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from lakefmt.encoding import MIN_SAMPLE_ROWS, SAMPLE_ROWS, Encodings

REUSE_FILES = 64  # a choice serves at most this many later files ...
REUSE_SECONDS = 60.0  # ... and for at most this long after it was made
MAX_KEYS = 256  # tables x schemas x options remembered per process


def reusable(rows: int) -> bool:
    """Whether a file whose first write brings ``rows`` rows may take an earlier choice: rows enough to
    have told (WRITE-7's 1,024), and fewer than a whole sample (16,384), which is cheap to judge by itself."""
    return MIN_SAMPLE_ROWS <= rows < SAMPLE_ROWS


class EncodingsMemo:
    """The encodings last chosen per key, each with the uses and the time it has left. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[Encodings, int, float]] = {}

    def get(self, key: Hashable) -> Encodings | None:
        """The choice for ``key``, counting one use; None once it is used up or too old."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            encodings, uses, until = entry
            if uses <= 0 or time.monotonic() > until:
                del self._entries[key]
                return None
            self._entries[key] = (encodings, uses - 1, until)
            return encodings

    def put(self, key: Hashable, encodings: Encodings) -> None:
        """Remember a choice made from a file's own rows (at least :data:`MIN_SAMPLE_ROWS` of them)."""
        with self._lock:
            if len(self._entries) >= MAX_KEYS and key not in self._entries:
                self._entries.clear()  # many tables in one process: start over rather than grow
            self._entries[key] = (encodings, REUSE_FILES, time.monotonic() + REUSE_SECONDS)


CHOSEN = EncodingsMemo()
"""This process's memo; a forked child inherits it, which is harmless: a choice changes no value."""
