"""Hostile and huge filters (spec/expressions.md EXPR-11).

Deep nesting and huge integers fail with FilterError naming the limit, never with a raw
RecursionError or ValueError; chains of 10,000 terms parse, bind, prune and filter rows on a
real table; parsing is linear, so a 5 MB string literal parses at once.
"""

from __future__ import annotations

import functools
import operator
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.errors import FilterError
from lakefmt.evaluators import MetricsEvaluator, StrictMetricsEvaluator, rewrite_not, to_arrow_expression
from lakefmt.expressions import (
    MAX_FILTER_DEPTH,
    And,
    Expression,
    Not,
    Or,
    bind,
    col,
    parse_filter,
    referenced_field_ids,
)
from lakefmt.schema import Field, Schema
from lakefmt.types import DOUBLE, INT, LONG, STRING, decimal
from tests.conftest import downlinks, rows

SCHEMA = Schema((Field(1, "a", LONG), Field(2, "s", STRING), Field(3, "v", DOUBLE), Field(4, "n", INT),
                 Field(5, "dec", decimal(38, 0))))
TERMS = 10_000


def depth(expr: Expression) -> int:
    """The height of an expression tree, measured without recursion."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        e, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(e, (And, Or)):
            stack += [(e.left, d + 1), (e.right, d + 1)]
        elif isinstance(e, Not):
            stack.append((e.child, d + 1))
    return deepest


def nested(levels: int) -> str:
    """Filter text nesting parentheses and NOT ``levels`` deep, alternating OR, NOT and AND."""
    text = "a = 1"
    for i in range(levels):
        if i % 3 == 0:
            text = f"(n = {i} OR {text})"
        elif i % 3 == 1:
            text = f"NOT {text}"  # text starts with a parenthesis here
        else:
            text = f"(v < {i} AND {text})"
    return text


def nesting_of(text: str) -> int:
    """Deepest nesting of parentheses and NOT (EXPR-11) in text where NOT only precedes '('."""
    deepest, stack, pending = 0, [], 0
    for tok in text.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "NOT":
            pending += 1
        elif tok == "(":
            stack.append(pending + 1)
            pending = 0
            deepest = max(deepest, sum(stack))
        elif tok == ")":
            stack.pop()
    return deepest


# -- EXPR-11: nesting ------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "(" * MAX_FILTER_DEPTH + "a = 1" + ")" * MAX_FILTER_DEPTH,
    "NOT " * MAX_FILTER_DEPTH + "a = 1",
    "NOT (" * (MAX_FILTER_DEPTH // 2) + "a = 1" + ")" * (MAX_FILTER_DEPTH // 2),
], ids=["parentheses", "not", "not-parentheses"])
def test_nesting_at_the_limit_parses(text: str) -> None:
    assert parse_filter(text) == (col("a") == 1)


def test_alternating_nesting_at_the_limit_binds_and_evaluates() -> None:
    text = nested(MAX_FILTER_DEPTH)
    assert nesting_of(text) == MAX_FILTER_DEPTH
    with pytest.raises(FilterError, match="more than 100 levels deep"):
        parse_filter(nested(MAX_FILTER_DEPTH + 1))
    bound = bind(text, SCHEMA)
    assert referenced_field_ids(bound) == {1, 3, 4}
    to_arrow_expression(bound, lambda fid: {1: "a", 3: "v", 4: "n"}[fid])
    shallower = nested(60)  # printing adds parentheses, so print one well within the limit
    assert parse_filter(str(parse_filter(shallower))) == parse_filter(shallower)


@pytest.mark.parametrize("text, position", [
    ("(" * 101 + "a = 1" + ")" * 101, 100),
    ("(" * 330 + "a = 1" + ")" * 330, 100),
    ("NOT " * 1000 + "a = 1", 400),
    ("NOT (" * 51 + "a = 1" + ")" * 51, 250),
    ("a = 1 AND " + "(" * 101 + "a = 1" + ")" * 101, 110),
    ("(" * 100_000, 100),
], ids=["101-parentheses", "330-parentheses", "1000-not", "51-not-parentheses", "after-a-term",
        "100000-open"])
def test_nesting_beyond_the_limit_fails(text: str, position: int) -> None:
    with pytest.raises(FilterError, match=r"more than 100 levels deep \(the limit, EXPR-11\)") as info:
        parse_filter(text)
    assert info.value.position == position  # type: ignore[attr-defined]
    assert len(str(info.value)) < 400  # the message quotes an excerpt, not the whole filter


# -- EXPR-11: integer literals -------------------------------------------------------------------------

@pytest.mark.parametrize("digits", [39, 4301, 100_000])
def test_integer_literal_longer_than_38_digits_fails(digits: int) -> None:
    literal = "9" * digits
    with pytest.raises(FilterError, match=rf"integer literal 9+…9+ \({digits} digits\) is out of range") as info:
        parse_filter(f"a = -{literal}")
    assert "at most 38 digits" in str(info.value)
    assert info.value.position == 5  # type: ignore[attr-defined]
    assert len(str(info.value)) < 400


def test_integer_literals_within_38_digits() -> None:
    widest = int("9" * 38)
    assert parse_filter("dec = " + "9" * 38) == (col("dec") == widest)
    assert parse_filter("a = " + "0" * 50 + "7") == (col("a") == 7)  # leading zeros do not count
    assert bind("dec = -" + "9" * 38, SCHEMA) == bind(col("dec") == -widest, SCHEMA)
    with pytest.raises(FilterError, match="out of range for column 'a'"):  # beyond int64 (EXPR-4)
        bind(f"a = {2**63}", SCHEMA)
    with pytest.raises(FilterError, match="out of range for column 'a'"):
        bind("a = 1" + "0" * 40 + ".0", SCHEMA)  # a decimal literal is not an integer literal


# -- EXPR-11: long chains --------------------------------------------------------------------------

Row = dict[str, Any]


def and_chain() -> tuple[str, Callable[[Row], bool]]:
    """10,000 ANDed terms selecting payload_id 0, 1 and 2, with the same test in Python."""
    return (" AND ".join(f"payload_id != {3 + i % 5}" for i in range(TERMS)),
            lambda row: row["payload_id"] not in range(3, 8))


def or_chain() -> tuple[str, Callable[[Row], bool]]:
    """10,000 ORed terms selecting payload_id 5, 6 and 7."""
    return " OR ".join(f"payload_id = {5 + i}" for i in range(TERMS)), lambda row: row["payload_id"] >= 5


def mixed_filter(seed: int = 7) -> tuple[str, Callable[[Row], bool]]:
    """OR of 2,500 groups of four predicates, with NOT and parentheses; selects a few % of rows."""
    rng = random.Random(seed)
    groups, texts = [], []
    for _ in range(TERMS // 4):
        low, mission, payload = rng.uniform(0, 99.9), rng.randrange(3), rng.randrange(8)
        low_text, high_text = f"{low:.4f}", f"{low + 0.1:.4f}"
        groups.append((float(low_text), float(high_text), mission, payload))
        texts.append(f"value >= {low_text} AND value < {high_text} AND "
                     f"NOT (mission_id = {mission} OR payload_id = {payload})")

    def matches(row: Row) -> bool:  # downlinks() has no nulls, so two-valued logic is exact
        return any(low <= row["value"] < high and not (row["mission_id"] == m or row["payload_id"] == p)
                   for low, high, m, p in groups)

    return " OR ".join(texts), matches


CHAINS = {"and": and_chain, "or": or_chain, "mixed": mixed_filter}


def select(table: pa.Table, predicate: Callable[[Row], bool]) -> list[tuple]:
    """The rows of ``table`` for which ``predicate`` holds, as a sorted list (a multiset)."""
    return rows(pa.Table.from_pylist([r for r in table.to_pylist() if predicate(r)], schema=table.schema))


@pytest.mark.parametrize("kind", CHAINS)
def test_chain_of_10000_terms_parses_into_a_shallow_tree(kind: str) -> None:
    text, _ = CHAINS[kind]()
    expr = parse_filter(text)
    assert depth(expr) <= 20
    schema = Schema((Field(1, "payload_id", LONG), Field(2, "mission_id", INT), Field(3, "value", DOUBLE)))
    bound = rewrite_not(bind(expr, schema))
    assert depth(bound) <= 20
    assert referenced_field_ids(bound) == ({1} if kind != "mixed" else {1, 2, 3})
    assert parse_filter(str(expr)) == expr  # printing is not recursive either
    MetricsEvaluator(bound, schema)
    StrictMetricsEvaluator(bound, schema)


def test_left_deep_chain_built_in_python_binds() -> None:
    left_deep = functools.reduce(operator.and_, [col("a") != i for i in range(20_000)])
    bound = bind(left_deep, SCHEMA)  # flattened and rebalanced, not walked 20,000 deep
    assert depth(bound) <= 20
    assert referenced_field_ids(bound) == {1}


@pytest.mark.timeout(300)
def test_chains_of_10000_terms_scan_and_delete_a_table(local_catalog: lakefmt.Catalog) -> None:
    table = local_catalog.create_table("ns.chains", downlinks(1).schema, partition_by=["mission_id"])
    table.append(downlinks(600, seed=1))  # one file per mission_id
    data = table.scan().to_arrow()
    for kind, make in CHAINS.items():
        text, predicate = make()
        expected = select(data, predicate)
        assert 0 < len(expected) < data.num_rows, kind
        assert rows(table.scan(text).to_arrow()) == expected, kind
    text, predicate = and_chain()
    table.delete(text)
    assert rows(table.refresh().scan().to_arrow()) == select(data, lambda row: not predicate(row))


# -- parsing is linear ------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_5_mb_string_literals_parse() -> None:
    plain = "x" * 5_000_000
    assert parse_filter(f"s = '{plain}'") == (col("s") == plain)
    quoted = "it''s " * 1_000_000
    assert parse_filter(f"s = '{quoted}'") == (col("s") == quoted.replace("''", "'"))
    identifier = "c" * 5_000_000
    assert parse_filter(f'"{identifier}" IS NULL') == col(identifier).is_null()
    with pytest.raises(FilterError, match="unterminated string at position 4") as info:
        parse_filter(f"s = '{plain}")
    assert len(str(info.value)) < 400


# -- the CLI: exit 2 and one line, no traceback ---------------------------------------------------------

def test_cli_reports_hostile_filters_as_errors(local_catalog: lakefmt.Catalog, tmp_path: Path) -> None:
    local_catalog.create_table("ns.t", pa.schema([pa.field("a", pa.int64())])).append(
        pa.table({"a": pa.array([1, 2], pa.int64())}))
    for text, message in [("(" * 330 + "a = 1" + ")" * 330, "more than 100 levels deep"),
                          ("NOT " * 1000 + "a = 1", "more than 100 levels deep"),
                          ("a = " + "9" * 4301, "(4301 digits) is out of range")]:
        done = subprocess.run([sys.executable, "-m", "lakefmt.cli", "--warehouse", local_catalog.warehouse,
                               "scan", "ns.t", "--filter", text], check=False, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: "), done.stderr
        assert message in done.stderr
        assert "Traceback" not in done.stderr


def test_row_filter_of_wide_trees_keeps_three_valued_logic() -> None:
    """Past a few levels, AND/OR reach Arrow in an equivalent unflattened form (EXPR-10, EXPR-11)."""
    rng = random.Random(3)
    values = [None, -1, 0, 1, 2, 3, None, 5]
    table = pa.table({"a": pa.array(values, pa.int64())})
    ops = {"=": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y}

    def leaf() -> tuple[str, Callable[[int | None], bool | None]]:
        if rng.random() < 0.1:
            return "a IS NULL", lambda x: x is None
        op, lit = rng.choice(list(ops)), rng.randrange(-1, 6)
        return f"a {op} {lit}", lambda x: None if x is None else ops[op](x, lit)

    def tree(size: int) -> tuple[str, Callable[[int | None], bool | None]]:
        if size == 1:
            return leaf()
        cut = rng.randrange(1, size)
        (lt, lf), (rt, rf) = tree(cut), tree(size - cut)
        def both(x: int | None) -> bool | None:
            a, b = lf(x), rf(x)
            return False if a is False or b is False else None if a is None or b is None else True

        def either(x: int | None) -> bool | None:
            a, b = lf(x), rf(x)
            return True if a is True or b is True else None if a is None or b is None else False

        choice = rng.random()
        if choice < 0.45:
            return f"({lt} AND {rt})", both
        if choice < 0.9:
            return f"({lt} OR {rt})", either
        return f"NOT ({lt} OR {rt})", lambda x: None if either(x) is None else not either(x)

    tested = 0
    for size in (64, 150, 400, 1000):
        text, truth = tree(size)
        if nesting_of(text) > MAX_FILTER_DEPTH:
            continue
        bound = bind(text, SCHEMA)
        got = table.filter(to_arrow_expression(bound, lambda fid: "a"))["a"].to_pylist()
        assert got == [x for x in values if truth(x) is True], text
        tested += 1
    assert tested >= 3
