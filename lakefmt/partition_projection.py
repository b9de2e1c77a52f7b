"""Inclusive projection of a row filter onto partition fields (spec/expressions.md EXPR-7).

The projected predicate holds for every partition that may contain a matching row: an identity
field takes the predicate as it is, order-preserving transforms take bounds, ``bucket`` takes
``=`` and ``IN`` only, anything else becomes TRUE. :class:`lakefmt.evaluators.PartitionEvaluator`
evaluates the projection on partition tuples.
"""

from __future__ import annotations

from typing import Any

from lakefmt.errors import ValidationError
from lakefmt.expressions import ALWAYS_TRUE, And, BoundPredicate, Expression, Or, and_, bind, or_
from lakefmt.negation import rewrite_not
from lakefmt.partitioning import PartitionField, PartitionSpec
from lakefmt.schema import Schema
from lakefmt.types import LakeType

_INTEGRAL_RANGE = {"int": (-2**31, 2**31 - 1), "date": (-2**31, 2**31 - 1),
                   "long": (-2**63, 2**63 - 1), "timestamp": (-2**63, 2**63 - 1),
                   "timestamptz": (-2**63, 2**63 - 1)}


def project_inclusive(expr: Expression | str | None, spec: PartitionSpec, schema: Schema) -> Expression:
    """A predicate over partition fields, true for every partition that may hold a matching row.

    Leaves of the result are BoundPredicates whose ``field_id`` is the partition field id and whose
    ``type`` is the partition result type; literals are transformed physical values.
    """
    bound = rewrite_not(bind(expr, schema))
    types = result_types(spec, schema)

    def project(e: Expression) -> Expression:
        if isinstance(e, And):
            return and_(project(e.left), project(e.right))
        if isinstance(e, Or):
            return or_(project(e.left), project(e.right))
        if isinstance(e, BoundPredicate):
            parts = [_project_leaf(e, pf, types[pf.field_id])
                     for pf in spec.fields if pf.source_id == e.field_id]
            return and_(*parts)
        return e

    return project(bound)


def result_types(spec: PartitionSpec, schema: Schema) -> dict[int, LakeType]:
    """Result type per partition field id, for fields whose source column is still in ``schema``.

    An older spec may use a column dropped since; predicates cannot reference it, so it is skipped.
    """
    out = {}
    for pf in spec.fields:
        src = schema.field_by_id(pf.source_id)
        if src is not None:
            out[pf.field_id] = pf.transform.result_type(src.type)
    return out


def _project_leaf(pred: BoundPredicate, pf: PartitionField, rtype: LakeType) -> Expression:
    transform, src, op = pf.transform, pred.type, pred.op

    def make(new_op: str, literals: tuple[Any, ...] = ()) -> Expression:
        return BoundPredicate(new_op, pf.field_id, pf.name, rtype, literals)

    if op in ("is_null", "not_null"):
        return make(op)
    if transform.name == "identity":
        return make(op, pred.literals)
    if op in ("is_nan", "not_nan"):
        return ALWAYS_TRUE  # unreachable: only identity accepts float columns
    try:
        if op in ("eq", "in"):
            values = tuple(sorted({transform.apply_value(v, src) for v in pred.literals}))
            return make("eq" if len(values) == 1 else "in", values)
        if transform.name == "bucket" or op in ("ne", "not_in"):
            return ALWAYS_TRUE
        if op in ("starts_with", "not_starts_with"):
            if transform.name != "truncate" or src.name not in ("string", "binary"):
                return ALWAYS_TRUE
            prefix, width = pred.literal, transform.param or 0
            if op == "starts_with":
                return make("eq", (prefix[:width],)) if len(prefix) >= width else make(op, (prefix,))
            return make(op, (prefix,)) if len(prefix) <= width else ALWAYS_TRUE
        value = pred.literal
        limits = _INTEGRAL_RANGE.get(src.name)
        if op == "lt" and limits and value - 1 >= limits[0]:
            return make("le", (transform.apply_value(value - 1, src),))
        if op == "gt" and limits and value + 1 <= limits[1]:
            return make("ge", (transform.apply_value(value + 1, src),))
        new_op = "le" if op in ("lt", "le") else "ge"
        return make(new_op, (transform.apply_value(value, src),))
    except (ValidationError, OverflowError):
        return ALWAYS_TRUE
