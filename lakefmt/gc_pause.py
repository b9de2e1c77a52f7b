"""Pausing Python's cyclic garbage collector while a burst of long-lived objects is built.

Used by planning (spec/reading.md READ-5: the manifests' entries and scan tasks), by the
decoding of a manifest's statistics maps (MAN-6, MAN-7: four dicts per file, kept with the
manifest) and by unfiltered scans of many files (READ-17: a fragment and a footer object per file).

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

When the last pause ends after a burst (:data:`PROMOTE_MIN_OBJECTS` new objects or more),
the objects built meanwhile are promoted to the oldest generation at once (``gc.freeze()`` then ``gc.unfreeze()``: two list splices, no traversal), instead of
being traversed by the youngest generation's collection the next allocation starts and by the
middle generation's after it. They are kept (cached manifests, scan tasks), so those two
traversals free nothing. Measured on 2 shared cores, in a process that had built the
benchmark's table of 10,000 files: that first collection took 5.6 ms of a 45 ms cold plan.
Every other object young at that moment is promoted too, so a reference cycle that became
garbage just before is freed by the next full collection instead of a younger one. Nothing
is promoted while the process holds frozen objects of its own (``gc.get_freeze_count()``):
unfreezing would undo its ``gc.freeze()``.

Example:
    >>> with gc_paused():
    ...     rows = [{"row": i} for i in range(3)]
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.RLock()  # re-entrant: the collections that end a pause run gc.callbacks, which may pause
_depth = 0
_resume = False
# The three-generation collector of CPython 3.10-3.13, which the promotion below was measured on; 3.14's
# incremental collector counts and collects differently (and PyPy has no freeze).
_PROMOTE = sys.implementation.name == "cpython" and sys.version_info < (3, 14) and hasattr(gc, "get_freeze_count")
# Promotion pays only after a burst: a pause that left fewer new objects than this (a warm plan of a
# few files leaves ~2,000, mostly its own temporaries) promotes nothing. Promoting after every warm
# plan moved each scan's young garbage to the oldest generation: a repeated selective scan of a
# sorted file then took 6 ms instead of 1.7 in one run of ten (full collections), against 2 ms.
PROMOTE_MIN_OBJECTS = 10_000


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
                if _PROMOTE and not gc.get_freeze_count() and gc.get_count()[0] >= PROMOTE_MIN_OBJECTS:
                    _promote_all()
                gc.enable()


def _promote_all() -> None:
    """Every tracked object to the oldest generation, without traversing any; the collections' cadence kept.

    ``gc.freeze()`` zeroes the three generations' counters; they are set back by collecting
    the then empty younger generations (a collection of generation ``g`` adds one to the
    count of ``g + 1``; ~0.1 us each): the old generation's count as it was, the middle
    one's plus the youngest collection the promotion stands for. So the middle and full
    collections come as often as they would have.
    """
    _, middle, old = gc.get_count()
    _, threshold_middle, threshold_old = gc.get_threshold()
    gc.freeze()
    gc.unfreeze()
    for _ in range(min(old, threshold_old + 1) - gc.get_count()[2]):
        gc.collect(1)
    for _ in range(min(middle + 1, threshold_middle + 1) - gc.get_count()[1]):
        gc.collect(0)
