"""Pausing Python's cyclic garbage collector while a burst of long-lived objects is built.

Used by planning (spec/reading.md READ-5: the manifests' entries and scan tasks) and by
unfiltered scans of many files (READ-17: a fragment and a footer object per file).

Decoding the manifests of a table of many files builds a few Python objects per file
(a :class:`~lakefmt.manifest.DataFile`, its attribute dict, a scan task), all of them kept
in the manifest cache afterwards. Each 700 such allocations start a collection of the
youngest generation, and every ten of those one of the next: the objects are traversed
again and again while they are still being built, and the full collections they trigger
traverse every object of the process (pyarrow's and DuckDB's modules included). Paused,
the objects built are traversed once, at the first collection after. Measured on 2 shared
cores, a cold plan of a table of 10,000 files (10 manifests, pyarrow.dataset, DuckDB and
deltalake imported, 60 plans interleaved): CPU median 37.6 -> 30.2 ms, mean 48.2 -> 32.4 ms.

Pausing is counted: the collector runs again when the last pause of any thread ends, and
only if it was enabled when the first one began. Code that turns the collector off or on
itself while a pause is held may see its change undone when the pause ends.

Example:
    >>> with gc_paused():
    ...     rows = [{"row": i} for i in range(3)]
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection starts while the block runs (reference counting still frees objects)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
