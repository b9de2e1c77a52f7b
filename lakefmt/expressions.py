"""Filter expressions: unbound trees, binding to a schema, literal coercion (spec/expressions.md).

* EXPR-1  Predicates: ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``NOT IN``, ``IS NULL``,
  ``IS NOT NULL``, ``starts_with`` (``LIKE 'prefix%'``), ``is_nan``, combined with AND, OR, NOT.
* EXPR-2  SQL-like text syntax (lakefmt.expression_parser.parse_filter).
* EXPR-3  Binding: a column name resolves to its field id in the schema (case-sensitive);
  an unknown name raises UnknownColumnError naming the column and listing the table's columns.
* EXPR-4  Binding coerces each literal to the column's *physical* value (lakefmt.literals);
  a literal that does not fit the column type (wrong kind, out of range, lossy) raises FilterError.
* EXPR-5  Row semantics (spec READ-8): SQL three-valued logic, a row is selected when the
  filter is TRUE; a comparison with NULL is NULL (so ``x != 1`` does not select nulls), IN is
  the OR of equalities. Float comparisons follow IEEE 754: with NaN they are FALSE, except
  ``!=``; so ``NOT (f < 5)`` holds for NaN. ``is_nan``/``not_nan`` test for NaN (NULL on NULL).
* EXPR-11 Limits: filter text nests parentheses and NOT at most ``MAX_FILTER_DEPTH`` deep and
  integer literals have at most ``MAX_INTEGER_DIGITS`` digits; AND/OR chains of any length
  work, because ``and_``/``or_`` build balanced trees and binding flattens chains.

Example:
    >>> bind((col("id") >= 3) & col("name").starts_with("ab"), schema)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lakefmt.conversions import to_python
from lakefmt.errors import FilterError
from lakefmt.literals import (
    coerce_literal,
    parse_iso_temporal,  # noqa: F401 - re-exported: the parser imports it from here
)
from lakefmt.schema import Schema
from lakefmt.types import LakeType, can_promote

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
SET_OPS = ("in", "not_in")
UNARY_OPS = ("is_null", "not_null")
NAN_OPS = ("is_nan", "not_nan")
PREFIX_OPS = ("starts_with", "not_starts_with")
ALL_OPS = COMPARISONS + SET_OPS + UNARY_OPS + NAN_OPS + PREFIX_OPS
NEGATED_OP = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le",
              "in": "not_in", "not_in": "in", "is_null": "not_null", "not_null": "is_null",
              "is_nan": "not_nan", "not_nan": "is_nan",
              "starts_with": "not_starts_with", "not_starts_with": "starts_with"}
MAX_FILTER_DEPTH = 100
"""How deep parentheses and NOT may nest in filter text (EXPR-11); chains of AND/OR are not limited."""
MAX_INTEGER_DIGITS = 38
"""The most digits an integer literal may have (EXPR-11): the widest decimal, decimal(38, 0)."""


class Expression:
    """Base of every expression node, bound or unbound; combine with ``&``, ``|``, ``~``."""

    def __and__(self, other: Expression) -> Expression:
        return and_(self, other)

    def __or__(self, other: Expression) -> Expression:
        return or_(self, other)

    def __invert__(self) -> Expression:
        return not_(self)

    @property
    def is_always_true(self) -> bool:
        return isinstance(self, AlwaysTrue)

    @property
    def is_always_false(self) -> bool:
        return isinstance(self, AlwaysFalse)


@dataclass(frozen=True)
class AlwaysTrue(Expression):
    """Matches every row."""

    def __str__(self) -> str:
        return "TRUE"


@dataclass(frozen=True)
class AlwaysFalse(Expression):
    """Matches no row."""

    def __str__(self) -> str:
        return "FALSE"


ALWAYS_TRUE = AlwaysTrue()
ALWAYS_FALSE = AlwaysFalse()


@dataclass(frozen=True)
class And(Expression):
    left: Expression
    right: Expression

    def __str__(self) -> str:
        return "(" + " AND ".join(str(e) for e in operands(self, And)) + ")"


@dataclass(frozen=True)
class Or(Expression):
    left: Expression
    right: Expression

    def __str__(self) -> str:
        return "(" + " OR ".join(str(e) for e in operands(self, Or)) + ")"


@dataclass(frozen=True)
class Not(Expression):
    child: Expression

    def __str__(self) -> str:
        return f"(NOT {self.child})"


def and_(*exprs: Expression) -> Expression:
    """Conjunction, simplified around ALWAYS_TRUE/ALWAYS_FALSE (EXPR-11: a balanced tree)."""
    terms: list[Expression] = []
    for e in exprs:
        _check_expr(e)
        if isinstance(e, AlwaysFalse):
            return ALWAYS_FALSE
        if not isinstance(e, AlwaysTrue):
            terms.append(e)
    return _balanced(And, terms) if terms else ALWAYS_TRUE


def or_(*exprs: Expression) -> Expression:
    """Disjunction, simplified around ALWAYS_TRUE/ALWAYS_FALSE (EXPR-11: a balanced tree)."""
    terms: list[Expression] = []
    for e in exprs:
        _check_expr(e)
        if isinstance(e, AlwaysTrue):
            return ALWAYS_TRUE
        if not isinstance(e, AlwaysFalse):
            terms.append(e)
    return _balanced(Or, terms) if terms else ALWAYS_FALSE


def _balanced(node: type[And | Or], terms: list[Expression]) -> Expression:
    """Combine ``terms`` pairwise, level by level: depth log2(n), and left-deep up to three terms.

    A chain of n terms must not become a tree of depth n, or every walk over it (binding,
    pruning, equality, printing) would recurse n deep (EXPR-11).
    """
    while len(terms) > 1:
        paired = [node(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            paired.append(terms[-1])
        terms = paired
    return terms[0]


def operands(expr: Expression, node: type[And | Or]) -> list[Expression]:
    """The terms of the ``node`` chain rooted at ``expr``, left to right, found without recursion.

    ``operands(a & (b & c), And) == [a, b, c]``; an ``expr`` that is not a ``node`` is its own
    single term.
    """
    out: list[Expression] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if type(e) is node:
            stack.append(e.right)
            stack.append(e.left)
        else:
            out.append(e)
    return out


def not_(expr: Expression) -> Expression:
    _check_expr(expr)
    if isinstance(expr, AlwaysTrue):
        return ALWAYS_FALSE
    if isinstance(expr, AlwaysFalse):
        return ALWAYS_TRUE
    if isinstance(expr, Not):
        return expr.child
    return Not(expr)


def _check_expr(e: Any) -> None:
    if not isinstance(e, Expression):
        raise FilterError(f"expected a filter expression, got {e!r} (wrap literals with col(...) "
                          "comparisons; use & | ~ rather than and/or/not)")


@dataclass(frozen=True)
class Predicate(Expression):
    """An unbound leaf: ``op`` on the column named ``column`` with Python literals (EXPR-1)."""

    op: str
    column: str
    literals: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.op not in ALL_OPS:
            raise FilterError(f"unknown predicate operator {self.op!r}")

    def __str__(self) -> str:
        from lakefmt.expression_parser import leaf_sql
        return leaf_sql(self.op, self.column, self.literals)


@dataclass(frozen=True)
class BoundPredicate(Expression):
    """A leaf bound to a field id, with literals as physical values of ``type`` (EXPR-3/4)."""

    op: str
    field_id: int
    name: str
    type: LakeType
    literals: tuple[Any, ...] = ()

    @property
    def literal(self) -> Any:
        return self.literals[0]

    def __str__(self) -> str:
        from lakefmt.expression_parser import leaf_sql
        return leaf_sql(self.op, self.name, tuple(to_python(self.type, v) for v in self.literals))


# Bound trees use the same And/Or/Not/AlwaysTrue/AlwaysFalse nodes with BoundPredicate leaves.
BoundExpression = Expression


class Reference:
    """A column reference with a fluent API: ``col("x") >= 3``, ``col("s").starts_with("ab")``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise FilterError(f"a column name must be a non-empty string, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"col({self.name!r})"

    def __hash__(self) -> int:
        return hash(("col", self.name))

    def __eq__(self, value: object) -> Predicate:  # type: ignore[override]
        return Predicate("eq", self.name, (value,))

    def __ne__(self, value: object) -> Predicate:  # type: ignore[override]
        return Predicate("ne", self.name, (value,))

    def __lt__(self, value: Any) -> Predicate:
        return Predicate("lt", self.name, (value,))

    def __le__(self, value: Any) -> Predicate:
        return Predicate("le", self.name, (value,))

    def __gt__(self, value: Any) -> Predicate:
        return Predicate("gt", self.name, (value,))

    def __ge__(self, value: Any) -> Predicate:
        return Predicate("ge", self.name, (value,))

    def isin(self, values: Iterable[Any]) -> Predicate:
        return Predicate("in", self.name, _as_tuple(values))

    def not_in(self, values: Iterable[Any]) -> Predicate:
        return Predicate("not_in", self.name, _as_tuple(values))

    def is_null(self) -> Predicate:
        return Predicate("is_null", self.name)

    def is_nan(self) -> Predicate:
        return Predicate("is_nan", self.name)

    def not_nan(self) -> Predicate:
        return Predicate("not_nan", self.name)

    def not_null(self) -> Predicate:
        return Predicate("not_null", self.name)

    def starts_with(self, prefix: str | bytes) -> Predicate:
        return Predicate("starts_with", self.name, (prefix,))

    def not_starts_with(self, prefix: str | bytes) -> Predicate:
        return Predicate("not_starts_with", self.name, (prefix,))


def col(name: str) -> Reference:
    """A reference to the column ``name``."""
    return Reference(name)


def _as_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    if isinstance(values, (str, bytes)):
        raise FilterError("isin/not_in take a list of values, not a single string")
    return tuple(values)


def parse_filter(text: str) -> Expression:
    """Parse SQL-like filter text (EXPR-2); see lakefmt.expression_parser for the grammar."""
    from lakefmt.expression_parser import parse_filter as parse
    return parse(text)


def to_expression(f: str | Expression | None) -> Expression:
    """Normalize a filter argument: text is parsed, None means ALWAYS_TRUE."""
    if f is None:
        return ALWAYS_TRUE
    if isinstance(f, str):
        return parse_filter(f)
    if isinstance(f, bool):
        return ALWAYS_TRUE if f else ALWAYS_FALSE
    _check_expr(f)
    return f


# -- binding ------------------------------------------------------------------------------------

def bind(expr: Expression | str | None, schema: Schema) -> Expression:
    """Resolve names to field ids and coerce literals to physical values (EXPR-3, EXPR-4).

    Raises:
        UnknownColumnError: a referenced column is not in ``schema``.
        FilterError: a literal does not fit its column's type, or an operator does not apply.
    """
    expr = to_expression(expr)
    try:
        return _bind(expr, schema)
    except RecursionError:
        # Only a tree built in Python can get here: parsed text is limited to MAX_FILTER_DEPTH
        # levels, and chains of any length are flattened below (EXPR-11).
        raise FilterError("the filter is nested too deeply to bind; build long AND/OR chains with "
                          f"and_(*terms) / or_(*terms) and nest parentheses and NOT at most "
                          f"{MAX_FILTER_DEPTH} levels deep (EXPR-11)") from None


def _bind(expr: Expression, schema: Schema) -> Expression:
    if isinstance(expr, (AlwaysTrue, AlwaysFalse)):
        return expr
    if isinstance(expr, And):  # chains are flattened and rebuilt balanced (EXPR-11)
        return and_(*(_bind(e, schema) for e in operands(expr, And)))
    if isinstance(expr, Or):
        return or_(*(_bind(e, schema) for e in operands(expr, Or)))
    if isinstance(expr, Not):
        return not_(_bind(expr.child, schema))
    if isinstance(expr, BoundPredicate):
        field = schema.field_by_id(expr.field_id)
        if field is None or not can_promote(expr.type, field.type):
            raise FilterError(f"predicate {expr} is bound to another schema")
        if field.type != expr.type or field.name != expr.name:  # physical values survive widening
            return BoundPredicate(expr.op, field.id, field.name, field.type, expr.literals)
        return expr
    if isinstance(expr, Predicate):
        return _bind_predicate(expr, schema)
    raise FilterError(f"cannot bind {expr!r}")


def _bind_predicate(pred: Predicate, schema: Schema) -> Expression:
    field = schema.find(pred.column)
    ltype, op = field.type, pred.op
    if op in UNARY_OPS:
        return BoundPredicate(op, field.id, field.name, ltype)
    if op in NAN_OPS:
        if ltype.name not in ("float", "double"):
            raise FilterError(f"{op} applies to float and double columns; column {field.name!r} is {ltype}")
        return BoundPredicate(op, field.id, field.name, ltype)
    if op in PREFIX_OPS:
        if ltype.name not in ("string", "binary"):
            raise FilterError(f"{op} applies to string and binary columns; column "
                              f"{field.name!r} is {ltype}")
        prefix = pred.literals[0] if pred.literals else None
        return BoundPredicate(op, field.id, field.name, ltype, (coerce_literal(prefix, ltype, field.name),))
    values = [coerce_literal(v, ltype, field.name) for v in pred.literals]
    if op in COMPARISONS:
        if len(values) != 1:
            raise FilterError(f"{op} takes one literal, got {len(values)}")
        return BoundPredicate(op, field.id, field.name, ltype, (values[0],))
    unique = tuple(sorted(set(values)))
    if not unique:
        return ALWAYS_FALSE if op == "in" else ALWAYS_TRUE
    if len(unique) == 1:
        return BoundPredicate("eq" if op == "in" else "ne", field.id, field.name, ltype, unique)
    return BoundPredicate(op, field.id, field.name, ltype, unique)


def referenced_field_ids(expr: Expression) -> set[int]:
    """Field ids used by the bound predicates of ``expr``."""
    ids: set[int] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, BoundPredicate):
            ids.add(e.field_id)
        elif isinstance(e, (And, Or)):
            stack += (e.left, e.right)
        elif isinstance(e, Not):
            stack.append(e.child)
        elif isinstance(e, Predicate):
            raise FilterError(f"predicate {e} is not bound")
    return ids
