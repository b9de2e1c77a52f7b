"""NOT push-down: an equivalent filter without NOT nodes (spec/expressions.md EXPR-6).

NOT is pushed onto the leaves (De Morgan; ``NOT x < 5`` -> ``x >= 5``, ``NOT x IS NULL`` ->
``x IS NOT NULL``, IN <-> NOT IN, starts_with <-> not_starts_with). On float/double columns an
ordering comparison negates to ``x >= 5 OR isnan(x)``, since NaN makes ``x < 5`` FALSE and so
``NOT x < 5`` TRUE (READ-8). The result is equivalent to the original under SQL three-valued
logic, NULLs included. Every evaluator (:mod:`lakefmt.evaluators`, :mod:`lakefmt.row_filters`)
works on NOT-free filters.
"""

from __future__ import annotations

from dataclasses import replace

from lakefmt.errors import FilterError
from lakefmt.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    NEGATED_OP,
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundPredicate,
    Expression,
    Not,
    Or,
    Predicate,
    and_,
    operands,
    or_,
)

__all__ = ["require_bound", "rewrite_not"]

FLOATS = frozenset({"float", "double"})
ORDERING = frozenset({"lt", "le", "gt", "ge"})


def rewrite_not(expr: Expression) -> Expression:
    """An equivalent expression without Not nodes (EXPR-6); AND/OR chains come out balanced (EXPR-11)."""
    if isinstance(expr, Not):
        return _negate(expr.child)
    if isinstance(expr, And):
        return and_(*(rewrite_not(e) for e in operands(expr, And)))
    if isinstance(expr, Or):
        return or_(*(rewrite_not(e) for e in operands(expr, Or)))
    return expr


def _negate(expr: Expression) -> Expression:
    if isinstance(expr, AlwaysTrue):
        return ALWAYS_FALSE
    if isinstance(expr, AlwaysFalse):
        return ALWAYS_TRUE
    if isinstance(expr, Not):
        return rewrite_not(expr.child)
    if isinstance(expr, And):
        return or_(*(_negate(e) for e in operands(expr, And)))
    if isinstance(expr, Or):
        return and_(*(_negate(e) for e in operands(expr, Or)))
    if isinstance(expr, BoundPredicate) and expr.type.name in FLOATS and expr.op in ORDERING:
        nan = BoundPredicate("is_nan", expr.field_id, expr.name, expr.type)
        return Or(replace(expr, op=NEGATED_OP[expr.op]), nan)
    if isinstance(expr, (BoundPredicate, Predicate)):
        return replace(expr, op=NEGATED_OP[expr.op])
    raise FilterError(f"cannot negate {expr!r}")



def require_bound(expr: Expression) -> Expression:
    """``expr`` without NOT nodes (EXPR-6), checked to be bound: a row filter needs field ids."""
    expr = rewrite_not(expr)
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Predicate):
            raise FilterError(f"predicate {e} is not bound; call lakefmt.expressions.bind first")
        if isinstance(e, (And, Or)):
            stack += (e.left, e.right)
    return expr

