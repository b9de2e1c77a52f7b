"""Named points of the commit protocol where a test can stop a writer (spec/notes.md, non-normative).

Crash tests kill a writer with SIGKILL at each step of COMMIT-1..6. A process
started with ``LAKEFMT_PAUSE_AT=<point>`` and ``LAKEFMT_PAUSE_FILE=<path>`` writes
``<path>`` when it reaches that point and then sleeps until it is killed. Without
those variables :func:`checkpoint` does nothing.

Points: ``after-data-files``, ``after-manifests``, ``after-manifest-list``,
``after-metadata-file``, ``before-swap``, ``after-swap``, and
``compaction-before-commit``.
"""

from __future__ import annotations

import os
import time

POINTS = ("after-data-files", "after-manifests", "after-manifest-list", "after-metadata-file",
          "before-swap", "after-swap", "compaction-before-commit")


def checkpoint(point: str) -> None:
    """Pause forever at ``point`` if this process was asked to (test hook)."""
    if os.environ.get("LAKEFMT_PAUSE_AT") != point:
        return
    marker = os.environ.get("LAKEFMT_PAUSE_FILE")
    if marker:
        with open(marker, "w") as f:
            f.write(f"{os.getpid()} {point}\n")
    while True:
        time.sleep(3600)
