"""Spark's pushed filters as lakefmt predicates (spec/spark.md, SPARK-5).

Spark hands ``pushFilters`` a list of leaf filters (an AND). Each one that becomes a
lakefmt predicate is used twice: to prune manifests and files while planning
(READ-5) and to filter rows exactly while reading (READ-8). Only then is it reported
as handled; every other filter is handed back to Spark, which evaluates it on the rows
the reader returns. A filter is handed back when the two engines could disagree:

* float and double comparisons: Spark orders NaN above every number and makes
  ``NaN = NaN`` true, lakefmt follows IEEE 754 (EXPR-5), and pruning with bounds
  that exclude NaN would drop rows Spark wants;
* columns Spark sees in a carried type (``time`` as long, wide decimals as text);
* ``IN`` lists holding NULL, literals that do not fit the column (EXPR-4), and
  filters lakefmt has no predicate for (``LIKE '%x'``, ``LIKE '%x%'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakefmt.errors import LakefmtError
from lakefmt.expressions import Expression, Predicate, bind, not_
from lakefmt.schema import Schema
from lakefmt.spark.types import is_carried

try:  # pyspark >= 4.1; older versions never push filters to Python data sources
    from pyspark.sql import datasource as ds

    _BINARY_OPS: dict[type, str] = {ds.EqualTo: "eq", ds.GreaterThan: "gt", ds.GreaterThanOrEqual: "ge",
                                    ds.LessThan: "lt", ds.LessThanOrEqual: "le"}
except AttributeError:  # pragma: no cover - pyspark 4.0
    ds = None  # type: ignore[assignment]
    _BINARY_OPS = {}

_ORDERED_UNSAFE = ("float", "double")


def to_predicate(spark_filter: Any, schema: Schema) -> Expression | None:
    """The lakefmt predicate that selects exactly the rows Spark's filter selects, or None."""
    if ds is None:
        return None
    if isinstance(spark_filter, ds.Not):
        if isinstance(spark_filter.child, ds.EqualNullSafe):
            return None  # NOT (x <=> v) is TRUE on nulls; lakefmt's x != v is NULL there
        child = to_predicate(spark_filter.child, schema)
        return None if child is None else not_(child)
    column = _column(spark_filter, schema)
    if column is None:
        return None
    name, ltype = column
    if isinstance(spark_filter, ds.IsNull):
        return _bound_or_none(Predicate("is_null", name), schema)
    if isinstance(spark_filter, ds.IsNotNull):
        return _bound_or_none(Predicate("not_null", name), schema)
    if is_carried(ltype) or ltype.name in _ORDERED_UNSAFE:
        return None
    value = getattr(spark_filter, "value", None)
    if isinstance(spark_filter, ds.EqualNullSafe):
        # x <=> NULL is IS NULL; x <=> v is FALSE (not NULL) on nulls, which selects the same rows as x = v.
        op = "is_null" if value is None else "eq"
        return _bound_or_none(Predicate(op, name, () if value is None else (value,)), schema)
    if value is None:
        return None
    binary_op = _BINARY_OPS.get(type(spark_filter))
    if binary_op is not None:
        return _bound_or_none(Predicate(binary_op, name, (value,)), schema)
    if isinstance(spark_filter, ds.In):
        values = tuple(value)
        if not values or any(v is None for v in values):
            return None
        return _bound_or_none(Predicate("in", name, values), schema)
    if isinstance(spark_filter, ds.StringStartsWith) and ltype.name == "string":
        return _bound_or_none(Predicate("starts_with", name, (value,)), schema)
    return None


def push(filters: list[Any], schema: Schema, accept: Callable[[Expression], None]) -> list[Any]:
    """Call ``accept`` with each filter that converts; return the filters Spark must still apply."""
    rejected = []
    for f in filters:
        predicate = to_predicate(f, schema)
        if predicate is None:
            rejected.append(f)
        else:
            accept(predicate)
    return rejected


def _column(spark_filter: Any, schema: Schema) -> tuple[str, Any] | None:
    attribute = getattr(spark_filter, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None  # nested column paths: lakefmt v1 has no nested types
    name = attribute[0]
    if name not in schema.names:
        return None
    return name, schema.find(name).type


def _bound_or_none(predicate: Expression, schema: Schema) -> Expression | None:
    """The predicate if it binds (its literals fit the column, EXPR-4), else None."""
    try:
        bind(predicate, schema)
    except LakefmtError:
        return None
    return predicate
