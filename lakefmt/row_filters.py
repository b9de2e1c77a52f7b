"""Row filters: the rows of Arrow data where a bound filter is TRUE (spec/expressions.md EXPR-10, EXPR-11).

* EXPR-10 ``to_arrow_expression`` selects exactly the rows where the filter is TRUE (EXPR-5); a
  column missing from a file reads as all null. ``row_mask`` computes the same selection with
  compute kernels directly (no query plan per call), comparing dictionary-encoded columns on
  their dictionary. ``matching_positions`` returns the same rows as row numbers, evaluating an
  AND term by term on the rows still selected.
* EXPR-11 Long AND/OR chains are translated without overflowing Arrow's recursion.

Filters are NOT-free (:mod:`lakefmt.negation`) and bound; pruning with partitions and
statistics is in :mod:`lakefmt.evaluators`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import arrow_values
from lakefmt.errors import FilterError
from lakefmt.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundPredicate,
    Expression,
    Or,
    operands,
    referenced_field_ids,
)
from lakefmt.identity_memo import IdentityMemo
from lakefmt.negation import require_bound

__all__ = ["matching_positions", "row_mask", "to_arrow_expression"]

# Arrow booleans built once: pa.scalar(True) would make pyarrow import pandas (see lakefmt.arrow_values).
_TRUE, _FALSE = arrow_values.scalar(True, pa.bool_()), arrow_values.scalar(False, pa.bool_())


# -- row filter (EXPR-10) ----------------------------------------------------------------------------

def to_arrow_expression(expr: Expression, column_name: Callable[[int], str | None]) -> pc.Expression:
    """A pyarrow filter selecting exactly the rows where the bound ``expr`` is TRUE (EXPR-10).

    ``column_name(field_id)`` names the column in the data being filtered, or returns None if the
    data lacks it (it then reads as all null). Columns must already have the table's Arrow types.
    """
    return _to_arrow(require_bound(expr), column_name, 0)


# Arrow flattens a run of nested and_kleene (or or_kleene) calls into one chain and walks it
# recursively: about 9,000 terms overflow an 8 MiB stack and crash the process. Every
# _BARRIER_LEVELS levels of the (balanced) tree, a node is written in an equivalent form that
# Arrow does not flatten, so no run is longer than 2**_BARRIER_LEVELS terms (EXPR-11).
_BARRIER_LEVELS = 6


def _kleene_and(a: pc.Expression, b: pc.Expression, barrier: bool) -> pc.Expression:
    if not barrier:
        return a & b
    return pc.and_not_kleene(a, pc.invert(b))  # a AND NOT (NOT b)


def _kleene_or(a: pc.Expression, b: pc.Expression, barrier: bool) -> pc.Expression:
    if not barrier:
        return a | b
    return pc.invert(pc.and_not_kleene(pc.invert(a), b))  # NOT (NOT a AND NOT b)


def _to_arrow(expr: Expression, column_name: Callable[[int], str | None], level: int) -> pc.Expression:
    if isinstance(expr, AlwaysTrue):
        return pc.scalar(_TRUE)
    if isinstance(expr, AlwaysFalse):
        return pc.scalar(_FALSE)
    if isinstance(expr, (And, Or)):
        left = _to_arrow(expr.left, column_name, level + 1)
        right = _to_arrow(expr.right, column_name, level + 1)
        barrier = level % _BARRIER_LEVELS == _BARRIER_LEVELS - 1
        return (_kleene_and if isinstance(expr, And) else _kleene_or)(left, right, barrier)
    if not isinstance(expr, BoundPredicate):
        raise FilterError(f"cannot translate {expr!r}")
    name = column_name(expr.field_id)
    op = expr.op
    if name is None:
        return pc.scalar(_TRUE if op == "is_null" else _FALSE)
    field = pc.field(name)
    if op == "is_null":
        return field.is_null()
    if op == "not_null":
        return field.is_valid()
    if op in ("is_nan", "not_nan"):
        nan = pc.is_nan(field)  # NULL for NULL
        return nan if op == "is_nan" else ~nan
    atype = expr.type.to_arrow()
    if op in ("in", "not_in"):
        values = list(expr.literals)
        if pa.types.is_floating(atype) and any(v == 0.0 for v in values):
            # isin hashes values, so -0.0 and 0.0 differ there; IEEE 754 says they are equal (EXPR-5).
            values += [0.0, -0.0]
        member = field.isin(arrow_values.array(values, atype))
        return member if op == "in" else field.is_valid() & ~member
    if op in ("starts_with", "not_starts_with"):
        match = pc.starts_with(field, pattern=expr.literal)
        return match if op == "starts_with" else field.is_valid() & ~match
    lit = pc.scalar(arrow_values.scalar(expr.literal, atype))
    if op == "eq":
        return field == lit
    if op == "ne":
        return field != lit
    if op == "lt":
        return field < lit
    if op == "le":
        return field <= lit
    if op == "gt":
        return field > lit
    return field >= lit


def row_mask(expr: Expression, data: pa.Table, column_name: Callable[[int], str | None], *,
             prepared: bool = False) -> pa.ChunkedArray:
    """A boolean mask without nulls, True exactly for the rows of ``data`` where ``expr`` is TRUE (EXPR-10).

    The rows are those ``data.filter(to_arrow_expression(expr, column_name))`` keeps, but the
    kernels run directly rather than through a query plan, which costs about a millisecond per
    call. After NOT push-down (EXPR-6) a row satisfies an AND or OR exactly when its operands are
    (both, either) TRUE, so each node only needs the rows where it is TRUE: an AND whose left
    side is TRUE nowhere skips its right side. A dictionary-encoded column is compared on its
    dictionary, and the result taken through the indices. Columns must have the table's Arrow
    types, or be dictionaries of them. ``prepared``: ``expr`` is already bound and NOT-free.
    """
    if not prepared:
        expr = require_bound(expr)
    n = data.num_rows

    def evaluate(e: Expression) -> pa.ChunkedArray | bool:
        if isinstance(e, (AlwaysTrue, AlwaysFalse)):
            return isinstance(e, AlwaysTrue)
        if isinstance(e, (And, Or)):
            is_and = isinstance(e, And)
            left = evaluate(e.left)
            if isinstance(left, bool):
                return evaluate(e.right) if left == is_and else left
            if is_and and not pc.any(left).as_py():
                return left
            right = evaluate(e.right)
            if isinstance(right, bool):
                return left if right == is_and else right
            return pc.and_kleene(left, right) if is_and else pc.or_kleene(left, right)
        if not isinstance(e, BoundPredicate):
            raise FilterError(f"cannot evaluate {e!r}")
        name = column_name(e.field_id)
        if name is None:
            return e.op == "is_null"  # a column the data lacks reads as all null
        column = data.column(name)
        if not pa.types.is_dictionary(column.type):
            return _leaf_mask(e, column)
        chunks = []
        dictionary = per_value = None
        for chunk in column.chunks:
            if e.op not in _DICTIONARY_OPS:
                chunks.append(_leaf_mask(e, chunk.dictionary_decode()))
                continue
            if per_value is None or not _same_values(chunk.dictionary, dictionary):
                dictionary, per_value = chunk.dictionary, _no_nulls(_leaf_mask(e, chunk.dictionary))
            chunks.append(_no_nulls(pc.take(per_value, chunk.indices)))  # a null index: not TRUE
        return pa.chunked_array(chunks, pa.bool_())

    result = evaluate(expr)
    if isinstance(result, bool):
        return pa.chunked_array([pa.repeat(_TRUE if result else _FALSE, n)])
    return _no_nulls(result)


# Chunks of one column (files of one batch, READ-16) often have equal dictionaries: a leaf is evaluated on
# the values of a dictionary once, and again only for a dictionary that differs (compared when small).
_COMPARED_DICTIONARY = 256


def _same_values(dictionary: pa.Array, previous: pa.Array | None) -> bool:
    if previous is None:
        return False
    if dictionary is previous:
        return True
    return len(dictionary) == len(previous) <= _COMPARED_DICTIONARY and dictionary.equals(previous)


def _no_nulls(mask: Any) -> Any:
    """NULL as FALSE (a mask without nulls is returned as it is: most are)."""
    return pc.fill_null(mask, _FALSE) if mask.null_count else mask


def matching_positions(expr: Expression, data: pa.Table, column_name: Callable[[int], str | None], *,
                       prepared: bool = False) -> pa.Array:
    """The row numbers (ascending) of the rows of ``data`` where ``expr`` is TRUE: the rows ``row_mask`` selects.

    An AND is evaluated one term at a time: the first term on every row, each next one only on
    the rows still selected, taken from ``data``, once they are few. A row satisfies a NOT-free
    AND exactly when it satisfies every term (EXPR-5), so evaluating a term on fewer rows never
    changes which rows are returned, and a selective first term (``payload_id = 1234``) spares
    evaluating the others on every row. Equalities are evaluated first, then the other terms,
    each group in the filter's order. ``prepared``: ``expr`` is already bound and NOT-free.
    """
    if not prepared:
        expr = require_bound(expr)
    n = data.num_rows
    terms = operands(expr, And)
    if len(terms) > 1:
        terms = sorted(terms, key=_term_cost)
    positions = pc.indices_nonzero(row_mask(terms[0], data, column_name, prepared=True))
    for term in terms[1:]:
        if len(positions) == 0:
            break
        columns = [c for c in (column_name(fid) for fid in sorted(referenced_field_ids(term))) if c is not None]
        if columns and len(positions) * _SPARSE < n:  # few rows left: evaluate the term on those rows only
            keep = row_mask(term, data.select(columns).take(positions), column_name, prepared=True)
        else:
            keep = pc.take(row_mask(term, data, column_name, prepared=True), positions)
        positions = pc.filter(positions, keep.combine_chunks() if isinstance(keep, pa.ChunkedArray) else keep)
    return positions


# A term is evaluated on the rows still selected, rather than on every row, once they are fewer
# than one in _SPARSE: taking them costs about what evaluating a term on every row does.
_SPARSE = 8


def _term_cost(term: Expression) -> int:
    """Equalities first (most selective, cheapest to evaluate), then anything else (sort is stable)."""
    return 0 if isinstance(term, BoundPredicate) and term.op in ("eq", "in") else 1


# Leaves whose TRUE rows are exactly the rows whose dictionary value satisfies them: a null
# index then yields null, which is not TRUE, as the leaf is not TRUE on a NULL value.
_DICTIONARY_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "starts_with",
                             "not_starts_with"})


def _leaf_mask(pred: BoundPredicate, column: Any) -> Any:
    """The leaf's Kleene value per row, with the kernels ``_to_arrow`` names."""
    op = pred.op
    if op == "is_null":
        return pc.is_null(column)
    if op == "not_null":
        return pc.is_valid(column)
    if op in ("is_nan", "not_nan"):
        nan = pc.is_nan(column)
        return nan if op == "is_nan" else pc.invert(nan)
    atype = pred.type.to_arrow()
    if op in ("in", "not_in"):
        values = list(pred.literals)
        if pa.types.is_floating(atype) and any(v == 0.0 for v in values):
            values += [0.0, -0.0]  # as in _to_arrow: isin hashes -0.0 and 0.0 apart (EXPR-5)
        member = pc.is_in(column, value_set=arrow_values.array(values, atype))
        return member if op == "in" else pc.and_kleene(pc.is_valid(column), pc.invert(member))
    if op in ("starts_with", "not_starts_with"):
        match = pc.starts_with(column, pattern=pred.literal)
        return match if op == "starts_with" else pc.and_kleene(pc.is_valid(column), pc.invert(match))
    return _COMPARE[op](column, _literal(pred, atype))


_LITERALS = IdentityMemo(1024)


def _literal(pred: BoundPredicate, atype: pa.DataType) -> pa.Scalar:
    """A comparison's literal as an Arrow scalar, kept per predicate object: the scans of one filter
    share its bound predicates (READ-19), and building a scalar costs ~10 us."""
    lit = _LITERALS.get(pred)
    if lit is None:
        lit = _LITERALS.put(pred, arrow_values.scalar(pred.literal, atype))
    return lit


_COMPARE = {"eq": pc.equal, "ne": pc.not_equal, "lt": pc.less, "le": pc.less_equal, "gt": pc.greater,
            "ge": pc.greater_equal}

