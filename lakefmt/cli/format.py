"""Output formatting for the ``lakefmt`` command line: aligned text tables, CSV and JSON.

Values are shown in a form a person (or ``jq``) can read back: timestamps in ISO 8601,
decimals as exact strings, binary as ``0x``-prefixed hex, nulls as ``null`` in text
tables, empty cells in CSV and ``null`` in JSON.

Example:
    >>> print_rows(["id", "name"], [(1, "a"), (2, None)], fmt="table", out=sys.stdout)
    id  name
    --  ----
    1   a
    2   null
    (2 rows)
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
from collections.abc import Iterable, Sequence
from typing import IO, Any, Literal

Format = Literal["table", "csv", "json", "jsonl"]
FORMATS = ("table", "csv", "json", "jsonl")
MAX_CELL = 60


def show_value(value: Any) -> str:
    """A value as text for a table cell or a CSV field (``None`` is handled by the caller)."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "0x" + bytes(value).hex()
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value).lower()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def json_value(value: Any) -> Any:
    """A value for ``json.dumps``: numbers and strings stay, the rest becomes text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value).lower()
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return show_value(value)


def _cell(value: Any) -> str:
    text = "null" if value is None else show_value(value)
    text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 3] + "..."


def print_rows(names: Sequence[str], rows: Iterable[Sequence[Any]], *, fmt: Format, out: IO[str],
               footer: bool = True) -> int:
    """Print ``rows`` (tuples in the order of ``names``) in ``fmt``; returns the number printed."""
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        count = 0
        for row in rows:
            writer.writerow(["" if v is None else show_value(v) for v in row])
            count += 1
        return count
    if fmt == "jsonl":
        count = 0
        for row in rows:
            out.write(json.dumps({n: json_value(v) for n, v in zip(names, row)}, ensure_ascii=False) + "\n")
            count += 1
        return count
    if fmt == "json":
        objects = [{n: json_value(v) for n, v in zip(names, row)} for row in rows]
        json.dump(objects, out, ensure_ascii=False, indent=1)
        out.write("\n")
        return len(objects)
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(n) for n in names]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    out.write("  ".join(n.ljust(w) for n, w in zip(names, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write("  ".join(t.ljust(w) for t, w in zip(row, widths)).rstrip() + "\n")
    if footer:
        out.write(f"({len(cells)} row{'s' if len(cells) != 1 else ''})\n")
    return len(cells)


def print_records(records: Sequence[dict[str, Any]], *, fmt: Format, out: IO[str], footer: bool = True) -> int:
    """Print dicts with the same keys (the first record's keys name the columns)."""
    if not records:
        names: list[str] = []
        if fmt in ("json",):
            out.write("[]\n")
        elif fmt == "table" and footer:
            out.write("(0 rows)\n")
        return 0
    names = list(records[0])
    return print_rows(names, ([r.get(n) for n in names] for r in records), fmt=fmt, out=out, footer=footer)


def human_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``; exact byte counts are printed next to it where it matters."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
