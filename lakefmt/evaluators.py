"""Evaluating bound filters on metadata: pruning with partitions and statistics, residual filters.

Spec: spec/expressions.md, and spec/reading.md READ-7 (projection), READ-8 (semantics),
READ-10 (conservative pruning, NaN).

* EXPR-6  Every evaluator works on the filter after NOT push-down (:mod:`lakefmt.negation`).
* EXPR-7  Inclusive projection onto partition fields (:mod:`lakefmt.partition_projection`,
  re-exported here): the projected predicate holds for every
  partition that may contain a matching row (identity: same predicate; order-preserving
  transforms: bounds; bucket: = and IN only; else TRUE).
* EXPR-8  Inclusive pruning: ``PartitionEvaluator`` (partition tuples), ``ManifestEvaluator``
  (manifest partition summaries), ``MetricsEvaluator`` (file column statistics) never reject a
  partition, manifest or file that holds a matching row. Missing statistics never prune.
  Float/double bounds exclude NaN: ordering comparisons may prune on them, but ``!=`` and
  ``NOT IN`` (which NaN satisfies) never do.
* EXPR-9  Strict evaluation: ``StrictMetricsEvaluator.must_match`` is True only if every row of
  the file satisfies the filter (identity partition values decide exactly).
* READ-13 Residual filters: ``residual`` drops from a filter the leaves a file's statistics
  decide for every row of the file, so a reader evaluates (and reads the columns of) only the rest;
  ``Residuals`` does it for the many files of a scan.

Row filters over Arrow data (EXPR-10: ``to_arrow_expression``, ``row_mask``,
``matching_positions``) live in :mod:`lakefmt.row_filters` and are re-exported here, as is
``rewrite_not``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakefmt.conversions import from_bytes
from lakefmt.errors import FilterError, ValidationError
from lakefmt.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundPredicate,
    Expression,
    Not,
    Or,
    and_,
    bind,
    or_,
)
from lakefmt.identity_memo import IdentityMemo
from lakefmt.manifest import DataFile, ManifestFile
from lakefmt.negation import FLOATS as _FLOATS
from lakefmt.negation import rewrite_not
from lakefmt.partition_projection import project_inclusive, result_types
from lakefmt.partitioning import PartitionSpec
from lakefmt.row_filters import matching_positions, row_mask, to_arrow_expression
from lakefmt.schema import Schema
from lakefmt.types import LakeType

__all__ = ["ManifestEvaluator", "MetricsEvaluator", "PartitionEvaluator", "Residuals", "StrictMetricsEvaluator",
           "decode_bound", "eval_leaf", "matching_positions", "project_inclusive", "residual", "rewrite_not",
           "row_mask", "to_arrow_expression"]

# -- NOT push-down (EXPR-6, lakefmt.negation) ----------------------------------------------------

def _prepare(expr: Expression | str | None, schema: Schema) -> Expression:
    return rewrite_not(bind(expr, schema))



# -- exact evaluation on concrete values ----------------------------------------------------------

def eval_leaf(op: str, value: Any, literals: tuple[Any, ...]) -> bool:
    """Whether one physical value satisfies a leaf (EXPR-5: NULL satisfies only IS NULL)."""
    if op == "is_null":
        return value is None
    if op == "not_null":
        return value is not None
    if value is None:
        return False
    if op in ("is_nan", "not_nan"):
        return math.isnan(value) == (op == "is_nan")
    if op == "in":
        return any(value == v for v in literals)
    if op == "not_in":
        return not any(value == v for v in literals)
    lit = literals[0]
    if op == "eq":
        return bool(value == lit)
    if op == "ne":
        return bool(value != lit)
    if op == "lt":
        return bool(value < lit)
    if op == "le":
        return bool(value <= lit)
    if op == "gt":
        return bool(value > lit)
    if op == "ge":
        return bool(value >= lit)
    if op == "starts_with":
        return bool(value.startswith(lit))
    return not value.startswith(lit)


def _evaluate(expr: Expression, leaf: Callable[[BoundPredicate], bool]) -> bool:
    if isinstance(expr, AlwaysTrue):
        return True
    if isinstance(expr, AlwaysFalse):
        return False
    if isinstance(expr, And):
        return _evaluate(expr.left, leaf) and _evaluate(expr.right, leaf)
    if isinstance(expr, Or):
        return _evaluate(expr.left, leaf) or _evaluate(expr.right, leaf)
    if isinstance(expr, BoundPredicate):
        return leaf(expr)
    raise FilterError(f"cannot evaluate {expr!r}; bind it first")


class PartitionEvaluator:
    """Whether a partition (tuple of physical values, spec order) may hold matching rows (EXPR-8)."""

    def __init__(self, expr: Expression | str | None, spec: PartitionSpec, schema: Schema) -> None:
        self.spec = spec
        self.projected = project_inclusive(expr, spec, schema)
        self._index = {pf.field_id: i for i, pf in enumerate(spec.fields)}

    def might_match(self, partition: tuple[Any, ...]) -> bool:
        if len(partition) != len(self.spec.fields):
            raise ValidationError(f"partition {partition!r} does not match spec {self.spec.spec_id} "
                                  f"with {len(self.spec.fields)} fields")
        return _evaluate(self.projected,
                         lambda p: eval_leaf(p.op, partition[self._index[p.field_id]], p.literals))


# -- inclusive pruning on bounds (EXPR-8) ------------------------------------------------------------

@dataclass(frozen=True)
class _Stats:
    lower: Any
    upper: Any
    may_have_nulls: bool
    all_null: bool


def decode_bound(ltype: LakeType, data: bytes | None) -> Any:
    """A bound's physical value, tolerating promoted types; None if absent, unreadable or NaN."""
    if data is None:
        return None
    try:
        value = from_bytes(ltype, data)  # handles bounds written before int->long, float->double
    except (struct.error, UnicodeDecodeError, ValueError, ArithmeticError):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _might_match(pred: BoundPredicate, st: _Stats) -> bool:
    op, lits = pred.op, pred.literals
    if op == "is_null":
        return st.may_have_nulls
    if st.all_null:
        return False
    if op in ("not_null", "is_nan", "not_nan"):
        return True  # no NaN counts in v1
    lo, hi = st.lower, st.upper
    if op in ("ne", "not_in", "not_starts_with"):
        if lo is None or hi is None or pred.type.name in _FLOATS:
            return True
        if op == "ne":
            return not lo == hi == lits[0]
        if op == "not_in":
            return not (lo == hi and any(lo == v for v in lits))
        return not (lo.startswith(lits[0]) and hi.startswith(lits[0]))
    if op == "starts_with":
        prefix = lits[0]
        n = len(prefix)
        return (lo is None or lo[:n] <= prefix) and (hi is None or hi[:n] >= prefix)
    if op in ("eq", "in"):
        return any((lo is None or lo <= v) and (hi is None or hi >= v) for v in lits)
    v = lits[0]
    if op == "lt":
        return lo is None or lo < v
    if op == "le":
        return lo is None or lo <= v
    if op == "gt":
        return hi is None or hi > v
    return hi is None or hi >= v  # ge


class ManifestEvaluator:
    """Whether a manifest may list files with matching rows, from its partition summaries (EXPR-8)."""

    def __init__(self, expr: Expression | str | None, spec: PartitionSpec, schema: Schema) -> None:
        self.spec = spec
        self.projected = project_inclusive(expr, spec, schema)
        types = result_types(spec, schema)
        self._index = {pf.field_id: (i, types[pf.field_id]) for i, pf in enumerate(spec.fields)
                       if pf.field_id in types}
        self._verdicts = IdentityMemo()

    def might_match(self, manifest: ManifestFile) -> bool:
        known = self._verdicts.get(manifest)
        if known is None:
            known = self._verdicts.put(manifest, self._verdict(manifest))
        return known

    def _verdict(self, manifest: ManifestFile) -> bool:
        if manifest.spec_id != self.spec.spec_id or len(manifest.partitions) != len(self.spec.fields):
            return True

        def leaf(pred: BoundPredicate) -> bool:
            i, rtype = self._index[pred.field_id]
            summary = manifest.partitions[i]
            stats = _Stats(decode_bound(rtype, summary.lower_bound),
                           decode_bound(rtype, summary.upper_bound),
                           may_have_nulls=bool(summary.contains_null), all_null=False)
            return _might_match(pred, stats)

        return _evaluate(self.projected, leaf)


def _file_stats(f: DataFile, pred: BoundPredicate) -> tuple[int | None, int | None, Any, Any]:
    fid = pred.field_id
    return (f.value_counts.get(fid), f.null_value_counts.get(fid),
            decode_bound(pred.type, f.lower_bounds.get(fid)),
            decode_bound(pred.type, f.upper_bounds.get(fid)))


class MetricsEvaluator:
    """Whether a data file may hold matching rows, from its column statistics (EXPR-8)."""

    def __init__(self, expr: Expression | str | None, schema: Schema) -> None:
        self.expr = _prepare(expr, schema)
        self._residuals: Residuals | None = None
        # What readers derive from this filter and a data file that is never modified (READ-19), such as the
        # row groups its statistics keep (lakefmt.file_layout); bounded by those readers.
        self.derived: dict[Any, Any] = {}

    @property
    def residuals(self) -> Residuals:
        """The residual filters of files (READ-13), kept with this evaluator (its verdicts per file too)."""
        if self._residuals is None:
            self._residuals = Residuals(self.expr)
        return self._residuals

    def might_match(self, f: DataFile) -> bool:
        if f.record_count == 0:
            return False

        def leaf(pred: BoundPredicate) -> bool:
            values, nulls, lo, hi = _file_stats(f, pred)
            all_null = nulls is not None and (nulls == values or nulls == f.record_count)
            return _might_match(pred, _Stats(lo, hi, nulls is None or nulls > 0, all_null))

        return _evaluate(self.expr, leaf)


# -- strict evaluation (EXPR-9) --------------------------------------------------------------------

def _must_match(pred: BoundPredicate, f: DataFile,
                stats: tuple[int | None, int | None, Any, Any] | None = None) -> bool:
    op, lits = pred.op, pred.literals
    values, nulls, lo, hi = stats or _file_stats(f, pred)
    if op == "is_null":
        return nulls is not None and (nulls == values or nulls == f.record_count)
    if op == "not_null":
        return nulls == 0
    if pred.type.name in _FLOATS or nulls != 0 or lo is None or hi is None:
        return False
    if op == "starts_with":
        return lo.startswith(lits[0]) and hi.startswith(lits[0])
    if op == "not_starts_with":
        n = len(lits[0])
        return lo[:n] > lits[0] or hi[:n] < lits[0]
    if op == "in":
        return lo == hi and any(lo == v for v in lits)
    if op == "not_in":
        return all(v < lo or v > hi for v in lits)
    v = lits[0]
    if op == "eq":
        return lo == hi == v
    if op == "ne":
        return v < lo or v > hi
    if op == "lt":
        return hi < v
    if op == "le":
        return hi <= v
    if op == "gt":
        return lo > v
    return lo >= v  # ge


class StrictMetricsEvaluator:
    """Whether every row of a data file satisfies the filter (EXPR-9); conservative."""

    def __init__(self, expr: Expression | str | None, schema: Schema) -> None:
        self.expr = _prepare(expr, schema)

    def must_match(self, f: DataFile, spec: PartitionSpec | None = None) -> bool:
        """True only if all rows of ``f`` match; ``spec`` (the file's spec) enables partition values."""
        if f.record_count == 0:
            return True
        identity: dict[int, Any] = {}
        if spec is not None and f.spec_id == spec.spec_id and len(f.partition) == len(spec.fields):
            for pf, value in zip(spec.fields, f.partition):
                if pf.transform.name == "identity":
                    identity[pf.source_id] = value

        def leaf(pred: BoundPredicate) -> bool:
            if pred.field_id in identity:
                return eval_leaf(pred.op, identity[pred.field_id], pred.literals)
            return _must_match(pred, f)

        return _evaluate(self.expr, leaf)


# -- residual filter per file (READ-13) -----------------------------------------------------------

MAX_RESIDUAL_LEAVES = 64


def residual(expr: Expression, f: DataFile) -> Expression:
    """The part of a NOT-free bound filter that the rows of ``f`` still have to be checked against (READ-13).

    A leaf that ``f``'s statistics prove TRUE for every row (EXPR-9) becomes TRUE, and one they
    prove TRUE for no row (EXPR-8) becomes FALSE. In a NOT-free formula, AND and OR are TRUE
    exactly when their operands are (both, either) TRUE, so a row satisfies the result exactly
    when it satisfies ``expr``. Filters of more than :data:`MAX_RESIDUAL_LEAVES` leaves are
    returned unchanged (the walk per file would cost more than it saves).
    """
    return Residuals(expr).of(f)


class Residuals:
    """:func:`residual` for the many files of one scan (READ-13).

    The leaves are listed once; per file, each leaf gets a verdict from the file's statistics
    (TRUE for every row, for no row, or undecided), bounds decoded once per column; and the
    remainder is built once per combination of verdicts, so files alike share one remainder
    object (and whatever a reader keeps per remainder).
    """

    _MEMO = 256

    def __init__(self, expr: Expression) -> None:
        self.expr = expr
        self.leaves: list[BoundPredicate] | None = []
        stack = [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, (And, Or)):
                stack += (e.right, e.left)  # left first: the order ``_rebuild`` walks
            elif isinstance(e, Not) or len(self.leaves) >= MAX_RESIDUAL_LEAVES and isinstance(e, BoundPredicate):
                self.leaves = None
                break
            elif isinstance(e, BoundPredicate):
                self.leaves.append(e)
        self._memo: dict[tuple[int, ...], Expression] = {}
        self._of = IdentityMemo()  # per file, by identity (READ-19)

    def of(self, f: DataFile) -> Expression:
        found = self._of.get(f)
        if found is None:
            found = self._of.put(f, self._residual(f))
        return found

    def _residual(self, f: DataFile) -> Expression:
        if f.record_count == 0:
            return ALWAYS_FALSE
        if not self.leaves:
            return self.expr
        decoded: dict[tuple[int, LakeType], tuple[int | None, int | None, Any, Any]] = {}
        verdicts = []
        for leaf in self.leaves:
            key = (leaf.field_id, leaf.type)
            stats = decoded.get(key)
            if stats is None:
                stats = decoded[key] = _file_stats(f, leaf)
            if _must_match(leaf, f, stats):
                verdicts.append(1)
                continue
            values, nulls, lo, hi = stats
            all_null = nulls is not None and (nulls == values or nulls == f.record_count)
            verdicts.append(2 if _might_match(leaf, _Stats(lo, hi, nulls is None or nulls > 0, all_null)) else 0)
        key_ = tuple(verdicts)
        found = self._memo.get(key_)
        if found is None:
            found = self.expr if 0 not in key_ and 1 not in key_ else self._rebuild(iter(key_))
            if len(self._memo) < self._MEMO:
                self._memo[key_] = found
        return found

    def _rebuild(self, verdicts: Any) -> Expression:
        def walk(e: Expression) -> Expression:
            if isinstance(e, And):
                left = walk(e.left)
                return and_(left, walk(e.right))
            if isinstance(e, Or):
                left = walk(e.left)
                return or_(left, walk(e.right))
            if not isinstance(e, BoundPredicate):
                return e
            verdict = next(verdicts)
            return ALWAYS_TRUE if verdict == 1 else ALWAYS_FALSE if verdict == 0 else e

        return walk(self.expr)
