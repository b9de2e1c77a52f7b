"""Progress bars on stderr for long commands (``compact``, ``demo``), drawn by tqdm.

On a terminal the bar is redrawn in place. When stderr is a file or a pipe (CI logs,
``2> log``), carriage returns would pile up on one line, so the bar is written as
whole lines instead, at most one every ``LOG_INTERVAL`` seconds plus the final state.

Example:
    >>> bar = progress_bar(10, "commits")
    >>> for _ in range(10):
    ...     bar.update(1)
    >>> bar.close()
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

from tqdm import tqdm

LOG_INTERVAL = 10.0
_TTY_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}]{postfix}"
_LINE_FORMAT = "{n_fmt}/{total_fmt} {unit} {elapsed}{postfix}"


class _LineStream:
    """A stream for tqdm that turns its in-place redraws into one line per state."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._last = ""

    def write(self, text: str) -> None:
        line = text.replace("\r", "").replace("\x1b[A", "").strip()
        if line and line != self._last:
            self.out.write(line + "\n")
            self._last = line

    def flush(self) -> None:
        self.out.flush()


def progress_bar(total: int, unit: str, *, stream: IO[str] | None = None) -> tqdm[Any]:
    """A tqdm bar on ``stream`` (default stderr) counting ``unit``s up to ``total``."""
    out = stream if stream is not None else sys.stderr
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return tqdm(total=total, unit=unit, file=out, bar_format=_TTY_FORMAT, dynamic_ncols=True, leave=True)
    return tqdm(total=total, unit=unit, file=_LineStream(out), bar_format=_LINE_FORMAT, ascii=True,
                mininterval=LOG_INTERVAL, leave=True)


def group_progress(bar: tqdm[Any]) -> Callable[[int, int, Any], None]:
    """A ``progress(done, total, group)`` callback for ``Compaction.run`` that moves ``bar``."""
    def update(done: int, total: int, group: Any) -> None:
        bar.total = total
        bar.set_postfix_str(f"{group.partition} {group.status}", refresh=False)
        bar.update(done - bar.n)

    return update
