"""Outcomes of conformance cases, and the comparison of rows as multisets.

A case collects :class:`Check` results; it passes when every check does. Rows are
compared as multisets (readers need not keep any row order, META-10), column names and
order exactly, and Arrow types up to the variants READ-7 lets a file use (``string`` /
``large_string`` / ``string_view``, and the same for binary).

Example:
    >>> diff_rows(expected, actual)    # None when equal, else a one-line reason
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

STATUSES = ("pass", "fail", "error")


@dataclass
class Check:
    """One verified statement of a case: what was checked, and why not, if it failed."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class CaseResult:
    """The outcome of one case: ``pass``, ``fail`` (a check failed) or ``error`` (the adapter raised)."""

    case_id: str
    kind: str
    spec_ids: list[str]
    title: str
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    raised: tuple[str, ...] = ()
    """Negative cases: the class names (with base classes) of the exception the adapter raised."""

    @property
    def status(self) -> str:
        if self.error is not None:
            return "error"
        return "pass" if all(c.ok for c in self.checks) else "fail"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return bool(ok)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def describe(exc: BaseException) -> str:
    """An exception as ``Type: message`` on one line, cut to 300 characters."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type)
    return t


def _canonical(value: Any) -> Any:
    """A hashable value that compares equal exactly when the two values are the same table value."""
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        return ("float", value, math.copysign(1.0, value))  # -0.0 and 0.0 are different values
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(value))
    return value


def row_multiset(table: pa.Table) -> Counter[tuple[Any, ...]]:
    columns = [[_canonical(v) for v in c.to_pylist()] for c in table.columns]
    return Counter(zip(*columns)) if columns else Counter({(): table.num_rows})


def diff_rows(expected: pa.Table, actual: Any) -> str | None:
    """None if ``actual`` holds the rows of ``expected`` (as a multiset), else why not."""
    if not isinstance(actual, pa.Table):
        return f"expected a pyarrow.Table, got {type(actual).__name__}"
    if actual.column_names != expected.column_names:
        return f"columns {actual.column_names}, expected {expected.column_names}"
    for name, e_type, a_type in zip(expected.column_names, expected.schema.types, actual.schema.types):
        if _plain_type(e_type) != _plain_type(a_type):
            return f"column {name!r} has type {a_type}, expected {e_type} (TYPE-1, READ-7)"
    if actual.num_rows != expected.num_rows:
        return f"{actual.num_rows} rows, expected {expected.num_rows}"
    plain = pa.schema([pa.field(f.name, _plain_type(f.type)) for f in expected.schema])
    want = row_multiset(expected.cast(plain))
    got = row_multiset(actual.cast(plain))
    if want == got:
        return None
    missing = list((want - got).elements())[:2]
    extra = list((got - want).elements())[:2]
    return f"rows differ: missing e.g. {missing}, unexpected e.g. {extra}"
