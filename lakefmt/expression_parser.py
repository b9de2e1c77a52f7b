"""The SQL-like filter syntax (spec/expressions.md, EXPR-2).

Grammar (keywords case-insensitive; AND binds tighter than OR; NOT tighter than AND)::

    expr      := and_expr (OR and_expr)*
    and_expr  := not_expr (AND not_expr)*
    not_expr  := NOT not_expr | '(' expr ')' | TRUE | FALSE | predicate
    predicate := operand cmp operand                    -- a column on exactly one side
               | column [NOT] IN '(' literal (',' literal)* ')'
               | column IS [NOT] NULL
               | column [NOT] BETWEEN literal AND literal   -- inclusive: c >= lo AND c <= hi
               | column [NOT] LIKE 'prefix%'            -- only prefix patterns; \\ escapes % _ \\
               | (starts_with | not_starts_with) '(' column ',' string ')'
               | (is_nan | isnan | not_nan) '(' column ')'
    cmp       := '=' | '==' | '!=' | '<>' | '<' | '<=' | '>' | '>='
    column    := bare_identifier | "double-quoted identifier"   ("" escapes ")
    literal   := [-|+] number | 'string' ('' escapes ') | TRUE | FALSE
               | DATE 'YYYY-MM-DD' | TIME 'HH:MM:SS' | TIMESTAMP '...' | TIMESTAMPTZ '...'

Integers parse as ``int``, ``123.45`` as ``Decimal``, ``1e3`` as ``float``. ``TIMESTAMP`` literals
without an offset are naive; ``TIMESTAMPTZ`` literals without an offset are UTC. ``NOT BETWEEN`` is
``NOT (c BETWEEN lo AND hi)``, so NaN satisfies it (EXPR-5). In a LIKE pattern a backslash makes the
next ``%``, ``_`` or backslash literal; before any other character, or at the end, it is an error.
``is_nan`` is the spelling EXPR-1 uses; ``isnan`` is accepted too. Syntax errors raise
FilterError whose message ends with ``at position N`` (0-based character offset, also available as
the ``position`` attribute of the error).

Limits (EXPR-11): parentheses and NOT nest at most ``MAX_FILTER_DEPTH`` (100) levels deep and an
integer literal has at most ``MAX_INTEGER_DIGITS`` (38) digits; breaking either raises FilterError.
Chains of AND/OR of any length parse into balanced trees. The parser keeps an explicit stack
rather than recursing, and the tokenizer matches each token once at its position, so parsing is
linear in the text's length.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from lakefmt.errors import FilterError
from lakefmt.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    MAX_FILTER_DEPTH,
    MAX_INTEGER_DIGITS,
    NAN_OPS,
    SET_OPS,
    UNARY_OPS,
    Expression,
    Predicate,
    and_,
    not_,
    or_,
    parse_iso_temporal,
)

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<str>'[^']*+(?:''[^']*+)*+')
  | (?P<qid>"[^"]*+(?:""[^"]*+)*+")
  | (?P<id>[^\W\d]\w*)
  | (?P<op><=|>=|<>|!=|==|[=<>(),+-])
""", re.VERBOSE)
_KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "TRUE", "FALSE"})
_TYPED = frozenset({"DATE", "TIME", "TIMESTAMP", "TIMESTAMPTZ"})
_CMP = {"=": "eq", "==": "eq", "!=": "ne", "<>": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_FLIP = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, str, qid, id, op, eof
    text: str
    pos: int

    def is_kw(self, *words: str) -> bool:
        return self.kind == "id" and self.text.upper() in words

    def is_op(self, *ops: str) -> bool:
        return self.kind == "op" and self.text in ops


@dataclass
class _Frame:
    """One open parenthesis (or the whole filter) while parsing."""

    nots: int  # NOTs written before the parenthesis
    or_terms: list[Expression] = field(default_factory=list)
    and_terms: list[Expression] = field(default_factory=list)

    def close_and(self) -> None:
        self.or_terms.append(and_(*self.and_terms))
        self.and_terms = []

    def result(self) -> Expression:
        self.close_and()
        return or_(*self.or_terms)


def _negated(expr: Expression, nots: int) -> Expression:
    return not_(expr) if nots % 2 else expr


@dataclass(frozen=True)
class _Operand:
    is_column: bool
    value: Any
    pos: int


_CONTEXT = 40  # characters of filter text shown on each side of an error's position


def _error(text: str, message: str, pos: int) -> FilterError:
    """A FilterError at ``pos``, quoting at most ``_CONTEXT`` characters on each side of it."""
    start, end = max(0, pos - _CONTEXT), min(len(text), pos + _CONTEXT)
    head = "…" if start else ""
    excerpt = head + text[start:end].replace("\n", " ").replace("\t", " ") + ("…" if end < len(text) else "")
    caret = " " * (len(head) + pos - start) + "^"
    err = FilterError(f"{message} at position {pos}\n  {excerpt}\n  {caret}")
    err.position = pos  # type: ignore[attr-defined]
    return err


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            ch = text[pos]
            what = "unterminated string" if ch in "'\"" else f"unexpected character {ch!r}"
            raise _error(text, what, pos)
        kind = match.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append(_Tok(kind, match.group(), pos))
        pos = match.end()
    tokens.append(_Tok("eof", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    @property
    def tok(self) -> _Tok:
        return self.tokens[self.i]

    def peek(self, n: int = 1) -> _Tok:
        return self.tokens[min(self.i + n, len(self.tokens) - 1)]

    def next(self) -> _Tok:
        tok = self.tokens[self.i]
        self.i = min(self.i + 1, len(self.tokens) - 1)
        return tok

    def fail(self, message: str, tok: _Tok | None = None) -> FilterError:
        tok = tok or self.tok
        near = "end of input" if tok.kind == "eof" else repr(tok.text)
        return _error(self.text, f"{message}, found {near}", tok.pos)

    def expect_op(self, op: str) -> _Tok:
        if not self.tok.is_op(op):
            raise self.fail(f"expected {op!r}")
        return self.next()

    def parse(self) -> Expression:
        """``expr`` of the grammar, parsed with an explicit stack instead of recursion.

        Each open parenthesis is a frame holding the finished OR terms and the AND terms of the
        current OR term; NOTs wait on the frame (before a parenthesis) or apply to the next
        primary. The nesting depth (parentheses and NOTs) is bounded by MAX_FILTER_DEPTH, and
        chains of any length become balanced trees (EXPR-11).
        """
        if self.tok.kind == "eof":
            raise self.fail("empty filter")
        frames = [_Frame(nots=0)]
        depth = 0  # open parentheses plus NOTs waiting for their operand
        while True:
            nots = 0
            while self.tok.is_kw("NOT") or self.tok.is_op("("):
                depth += 1
                if depth > MAX_FILTER_DEPTH:
                    raise self.fail(f"the filter nests parentheses and NOT more than "
                                    f"{MAX_FILTER_DEPTH} levels deep (the limit, EXPR-11)")
                if self.next().text == "(":
                    frames.append(_Frame(nots=nots))
                    nots = 0
                else:
                    nots += 1
            expr = _negated(self.parse_primary(), nots)
            depth -= nots
            while True:
                frame = frames[-1]
                frame.and_terms.append(expr)
                if self.tok.is_kw("AND"):
                    self.next()
                    break
                if self.tok.is_kw("OR"):
                    self.next()
                    frame.close_and()
                    break
                if len(frames) == 1:
                    if self.tok.kind != "eof":
                        raise self.fail("expected AND, OR or end of filter")
                    return frame.result()
                self.expect_op(")")
                frames.pop()
                expr = _negated(frame.result(), frame.nots)
                depth -= 1 + frame.nots

    def parse_primary(self) -> Expression:
        """``not_expr`` without its NOTs and parentheses: TRUE, FALSE, a call or a predicate."""
        if self.tok.is_kw("TRUE", "FALSE") and not self.peek().is_op(*_CMP):
            return ALWAYS_TRUE if self.next().text.upper() == "TRUE" else ALWAYS_FALSE
        if self.tok.kind == "id" and self.peek().is_op("("):
            function = self.tok.text.lower()
            if function in ("starts_with", "not_starts_with"):
                return self.parse_starts_with_call(function)
            if function in _NAN_CALLS:
                self.next()
                self.expect_op("(")
                column = self.parse_column()
                self.expect_op(")")
                return Predicate(_NAN_CALLS[function], column)
        return self.parse_predicate()

    def parse_starts_with_call(self, op: str) -> Expression:
        self.next()
        self.expect_op("(")
        column = self.parse_column()
        self.expect_op(",")
        if self.tok.kind != "str":
            raise self.fail("expected a string prefix")
        prefix = _unquote(self.next().text, "'")
        self.expect_op(")")
        return Predicate(op, column, (prefix,))

    def parse_column(self) -> str:
        operand = self.parse_operand()
        if not operand.is_column:
            raise _error(self.text, "expected a column name", operand.pos)
        return operand.value

    def parse_predicate(self) -> Expression:
        left = self.parse_operand()
        tok = self.tok
        if tok.kind == "op" and tok.text in _CMP:
            self.next()
            right = self.parse_operand()
            op = _CMP[tok.text]
            if left.is_column and right.is_column:
                raise _error(self.text, "comparing two columns is not supported", tok.pos)
            if not left.is_column and not right.is_column:
                raise _error(self.text, "a comparison needs a column on one side", left.pos)
            if left.is_column:
                return Predicate(op, left.value, (right.value,))
            return Predicate(_FLIP[op], right.value, (left.value,))
        if not left.is_column:
            raise self.fail("expected a comparison operator")
        column = left.value
        if tok.is_kw("IS"):
            self.next()
            negated = self.tok.is_kw("NOT")
            if negated:
                self.next()
            if not self.tok.is_kw("NULL"):
                raise self.fail("expected NULL")
            self.next()
            return Predicate("not_null" if negated else "is_null", column)
        negated = tok.is_kw("NOT")
        if negated:
            self.next()
        if self.tok.is_kw("IN"):
            self.next()
            return Predicate("not_in" if negated else "in", column, self.parse_list())
        if self.tok.is_kw("BETWEEN"):
            self.next()
            low = self.parse_literal()
            if not self.tok.is_kw("AND"):
                raise self.fail("expected AND in BETWEEN")
            self.next()
            high = self.parse_literal()
            between = and_(Predicate("ge", column, (low,)), Predicate("le", column, (high,)))
            return not_(between) if negated else between  # NOT of the whole: NaN satisfies it (EXPR-5)
        if self.tok.is_kw("LIKE"):
            self.next()
            return self.parse_like(column, negated)
        if negated:
            raise self.fail("expected IN, BETWEEN or LIKE after NOT")
        raise self.fail(f"expected a comparison operator, IN, IS, BETWEEN or LIKE after column {column!r}")

    def parse_like(self, column: str, negated: bool) -> Expression:
        tok = self.tok
        if tok.kind != "str":
            raise self.fail("expected a string pattern after LIKE")
        self.next()
        text, wildcard = _like_pattern(_unquote(tok.text, "'"))
        if isinstance(wildcard, str):
            raise _error(self.text, wildcard, tok.pos)
        if not wildcard:
            return Predicate("ne" if negated else "eq", column, (text,))
        return Predicate("not_starts_with" if negated else "starts_with", column, (text,))

    def parse_list(self) -> tuple[Any, ...]:
        self.expect_op("(")
        values = [self.parse_literal()]
        while self.tok.is_op(","):
            self.next()
            values.append(self.parse_literal())
        self.expect_op(")")
        return tuple(values)

    def parse_literal(self) -> Any:
        operand = self.parse_operand()
        if operand.is_column:
            raise _error(self.text, "expected a literal, found a column", operand.pos)
        return operand.value

    def parse_operand(self) -> _Operand:
        tok = self.tok
        if tok.kind == "qid":
            self.next()
            return _Operand(True, _unquote(tok.text, '"'), tok.pos)
        if tok.kind == "str":
            self.next()
            return _Operand(False, _unquote(tok.text, "'"), tok.pos)
        if tok.kind == "num" or (tok.is_op("-", "+") and self.peek().kind == "num"):
            sign = -1 if tok.is_op("-") else 1
            if tok.kind == "op":
                self.next()
            return _Operand(False, self.number(self.next(), sign), tok.pos)
        if tok.kind == "id":
            word = tok.text.upper()
            if word in ("TRUE", "FALSE"):
                self.next()
                return _Operand(False, word == "TRUE", tok.pos)
            if word == "NULL":
                raise self.fail("NULL is only allowed in IS NULL / IS NOT NULL")
            if word in _TYPED and self.peek().kind == "str":
                self.next()
                return _Operand(False, self.typed_literal(word, self.next()), tok.pos)
            if word in _KEYWORDS:
                raise self.fail("expected a column or a literal (quote keywords used as column names)")
            self.next()
            return _Operand(True, tok.text, tok.pos)
        raise self.fail("expected a column or a literal")

    def number(self, tok: _Tok, sign: int) -> Any:
        """An ``int``, ``Decimal`` or ``float``; integers have at most MAX_INTEGER_DIGITS digits (EXPR-11)."""
        text = tok.text
        if "e" in text or "E" in text:
            return sign * float(text)
        if "." in text:
            return sign * decimal.Decimal(text)
        digits = len(text.lstrip("0"))
        if digits > MAX_INTEGER_DIGITS:
            shown = text if len(text) <= 24 else f"{text[:12]}…{text[-6:]}"
            raise _error(self.text, f"integer literal {shown} ({digits} digits) is out of range: "
                         f"integers have at most {MAX_INTEGER_DIGITS} digits, the range of "
                         f"decimal(38, 0); use a float literal such as 1e40 instead", tok.pos)
        return sign * int(text)

    def typed_literal(self, word: str, tok: _Tok) -> Any:
        text = _unquote(tok.text, "'").strip()
        try:
            if word == "DATE":
                return dt.date.fromisoformat(text)
            if word == "TIME":
                return parse_iso_temporal(text, "time")
            value = parse_iso_temporal(text, "datetime")
        except ValueError:
            raise _error(self.text, f"invalid {word} literal {text!r}", tok.pos) from None
        if word == "TIMESTAMPTZ" and value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value


def _unquote(text: str, quote: str) -> str:
    return text[1:-1].replace(quote * 2, quote)


_NAN_CALLS = {"is_nan": "is_nan", "isnan": "is_nan", "not_nan": "not_nan"}
LIKE_ESCAPE = "\\"
"""The escape character of LIKE patterns (EXPR-2): ``\\%``, ``\\_`` and ``\\\\`` are literal."""


def _like_pattern(pattern: str) -> tuple[str, bool | str]:
    """``(text, True)`` for ``'text%'``, ``(text, False)`` for a pattern without wildcards (EXPR-2).

    Escapes are resolved in ``text``. A pattern that is not a prefix pattern, or that has a bad
    escape, gives ``("", message)``.
    """
    chars: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == LIKE_ESCAPE:
            if i + 1 == n or pattern[i + 1] not in "%_" + LIKE_ESCAPE:
                return "", ("in a LIKE pattern a backslash escapes only %, _ or a backslash; "
                            "write \\\\ for a backslash")
            chars.append(pattern[i + 1])
            i += 2
            continue
        if c == "%" and i == n - 1:
            return "".join(chars), True
        if c in "%_":
            return "", "only prefix patterns like 'abc%' are supported by LIKE"
        chars.append(c)
        i += 1
    return "".join(chars), False


def _like_escape(text: str) -> str:
    """``text`` with the LIKE wildcards and the escape character escaped (inverse of _like_pattern)."""
    return "".join(LIKE_ESCAPE + c if c in "%_" + LIKE_ESCAPE else c for c in text)




def parse_filter(text: str) -> Expression:
    """Parse SQL-like filter text into an unbound expression (EXPR-2).

    The last texts parsed are kept with their expressions (immutable, so one can be shared): a
    dashboard or a service repeats the same few filters, and parsing one costs about 50 us of
    a selective read of a sorted file's ~1.5 ms.
    """
    if not isinstance(text, str):
        raise FilterError(f"a filter must be a string, got {type(text).__name__}")
    return _parsed(text)


@lru_cache(maxsize=256)
def _parsed(text: str) -> Expression:
    return _Parser(text).parse()


# -- printing (the inverse of parsing) ------------------------------------------------------

def _quote_ident(name: str) -> str:
    if name.isidentifier() and name.upper() not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


_RESERVED = _KEYWORDS | _TYPED
_SYMBOL = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _literal_sql(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, dt.time):
        return f"TIME '{value.isoformat()}'"
    if isinstance(value, float):
        text = repr(value)  # keep an exponent so the text parses back as a float
        return text if "e" in text or not math.isfinite(value) else text + "e0"
    if isinstance(value, decimal.Decimal):
        text = format(value, "f")
        return text if "." in text else text + ".0"
    return repr(value) if isinstance(value, bytes) else str(value)


def leaf_sql(op: str, column: str, literals: tuple[Any, ...]) -> str:
    """Filter text for one leaf, parseable by :func:`parse_filter` (bytes literals excepted)."""
    name = _quote_ident(column)
    lits = [_literal_sql(v) for v in literals]
    if op in _SYMBOL:
        return f"{name} {_SYMBOL[op]} {lits[0]}"
    if op in SET_OPS:
        return f"{name} {'IN' if op == 'in' else 'NOT IN'} ({', '.join(lits)})"
    if op in UNARY_OPS:
        return f"{name} {'IS NULL' if op == 'is_null' else 'IS NOT NULL'}"
    if op in NAN_OPS:
        return f"{op}({name})"
    if isinstance(literals[0], str):
        pattern = _literal_sql(_like_escape(literals[0]))
        return f"{name} {'LIKE' if op == 'starts_with' else 'NOT LIKE'} {pattern[:-1]}%'"
    call = f"starts_with({name}, {lits[0]})"
    return call if op == "starts_with" else f"NOT {call}"
