"""Named points of the commit protocol where a test can stop a writer (spec/notes.md, non-normative).

Crash tests kill a writer with SIGKILL at each step of COMMIT-1..6. A process
started with ``LAKEFMT_PAUSE_AT=<point>`` and ``LAKEFMT_PAUSE_FILE=<path>`` writes
``<path>`` when it reaches that point and then sleeps until it is killed. Without
those variables :func:`checkpoint` does nothing. With ``LAKEFMT_RESUME_FILE=<path>`` as
well, the process continues once ``<path>`` exists instead of sleeping until killed,
so that a test can interleave two real processes at named points.

Points: ``after-data-files``, ``after-manifests``, ``after-manifest-list``,
``after-metadata-file``, ``before-swap``, ``after-swap``,
``compaction-before-commit``; of maintenance (spec/maintenance.md): ``expire-before-commit``,
``expire-after-swap``, ``orphans-listing`` (after the first listed file) and
``orphans-before-reachability``; of the catalog server's commit handler (spec/catalog-http.md):
``catalog-http-before-swap`` and ``catalog-http-after-swap`` (committed, answer not yet sent).
"""

from __future__ import annotations

import os
import time

POINTS = ("after-data-files", "after-manifests", "after-manifest-list", "after-metadata-file",
          "before-swap", "after-swap", "compaction-before-commit", "expire-before-commit",
          "expire-after-swap", "orphans-listing", "orphans-before-reachability", "catalog-http-before-swap",
          "catalog-http-after-swap")


def checkpoint(point: str) -> None:
    """Pause forever at ``point`` if this process was asked to (test hook)."""
    if os.environ.get("LAKEFMT_PAUSE_AT") != point:
        return
    marker = os.environ.get("LAKEFMT_PAUSE_FILE")
    if marker:
        with open(marker, "w") as f:
            f.write(f"{os.getpid()} {point}\n")
    resume = os.environ.get("LAKEFMT_RESUME_FILE")
    while not (resume and os.path.exists(resume)):
        time.sleep(0.01 if resume else 3600)
