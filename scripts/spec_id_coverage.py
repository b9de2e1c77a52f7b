#!/usr/bin/env python3
"""Requirement-ID coverage: which of the spec's requirement IDs no test cites.

A requirement ID is defined where it stands in bold at the start of a paragraph, bullet or
numbered item of a ``spec/*.md`` file, as in ``- **COMMIT-12** ...`` (spec/README.md,
"Conventions"). An ID whose text is "Withdrawn" is left out: it names no rule to test.

A test cites an ID when the ID appears as a whole word (``COMMIT-1`` does not cite
``COMMIT-12``) in a docstring, comment or string of a test file (``test_*.py``) under
``tests/``. Code outside strings and comments never holds an ID, so only those tokens are read.

Usage: ``python scripts/spec_id_coverage.py [--min 0.95] [--spec spec] [--tests tests]``.
Prints the coverage and the uncited IDs, and exits 1 when the coverage is below ``--min``.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MIN = 0.95

ID_PATTERN = r"[A-Z][A-Z0-9]*-[0-9]+"
# The ID in bold at the start of a line, after optional indentation, blockquote marks and a
# bullet or list number: "**X-1**", "- **X-1**", "3. **X-1**", "> - **X-1**".
_DEFINITION = re.compile(
    r"^[ \t]*(?:>[ \t]*)*(?:(?:[-*+]|\d+[.)])[ \t]+)?\*\*(" + ID_PATTERN + r")\*\*(.*)$")
# "Withdrawn" as the whole text, or as its first sentence: "*Withdrawn.*", "Withdrawn ()".
_WITHDRAWN = re.compile(r"^[\s*_:.\-—–]*withdrawn[\s*_]*(?:$|[.:;,—–(\-])", re.IGNORECASE)
# A whole-word ID: no letter, digit, "_" or "-" glued to either end.
_CITATION = re.compile(r"(?<![A-Za-z0-9_-])(" + ID_PATTERN + r")(?![A-Za-z0-9_-])")
_TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT}
for _name in ("FSTRING_MIDDLE",):  # f-string text is its own token from Python 3.12 on
    if hasattr(tokenize, _name):
        _TEXT_TOKENS.add(getattr(tokenize, _name))


@dataclass(frozen=True)
class Coverage:
    defined: tuple[str, ...]       # every live requirement ID, in spec order
    withdrawn: tuple[str, ...]     # IDs whose text is "Withdrawn", not counted
    cited: frozenset[str]          # the defined IDs that at least one test cites
    uncited: tuple[str, ...]       # the defined IDs no test cites, in spec order

    @property
    def ratio(self) -> float:
        return len(self.cited) / len(self.defined) if self.defined else 1.0

    def by_area(self) -> dict[str, tuple[int, int]]:
        """Area -> (cited, defined), in order of first definition."""
        out: dict[str, list[int]] = {}
        for rid in self.defined:
            counts = out.setdefault(area(rid), [0, 0])
            counts[1] += 1
            counts[0] += rid in self.cited
        return {k: (v[0], v[1]) for k, v in out.items()}


def area(rid: str) -> str:
    return rid.rsplit("-", 1)[0]


def defined_ids(text: str) -> tuple[list[str], list[str]]:
    """The requirement IDs defined in one Markdown text: (live, withdrawn), in order."""
    live: list[str] = []
    withdrawn: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            continue
        match = None if in_code else _DEFINITION.match(line)
        if match is None:
            continue
        rid, rest = match.groups()
        (withdrawn if _WITHDRAWN.match(rest) else live).append(rid)
    return live, withdrawn


def cited_ids(source: str) -> set[str]:
    """The IDs a Python source cites in its strings, docstrings and comments."""
    try:
        pieces = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                  if tok.type in _TEXT_TOKENS]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pieces = [source]  # a file that does not tokenize: read it as plain text
    return {m.group(1) for piece in pieces for m in _CITATION.finditer(piece)}


def find_test_files(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("*.py")
                  if p.name.startswith("test_") or p.name.endswith("_test.py"))


def coverage(spec: Path = ROOT / "spec", tests: Path = ROOT / "tests") -> Coverage:
    live: list[str] = []
    withdrawn: list[str] = []
    for md in sorted(spec.glob("*.md")):
        ids, gone = defined_ids(md.read_text(encoding="utf-8"))
        live += [i for i in ids if i not in live]
        withdrawn += gone
    live = [i for i in live if i not in withdrawn]
    cited: set[str] = set()
    for path in find_test_files(tests):
        cited |= cited_ids(path.read_text(encoding="utf-8"))
    hit = frozenset(i for i in live if i in cited)
    return Coverage(tuple(live), tuple(withdrawn), hit, tuple(i for i in live if i not in hit))


def report(cov: Coverage) -> str:
    head = (f"requirement IDs cited by tests: {len(cov.cited)} of {len(cov.defined)} "
            f"({cov.ratio:.1%}); {len(cov.withdrawn)} withdrawn not counted")
    lines = [head]
    for name, (hit, total) in cov.by_area().items():
        lines.append(f"  {name:<9} {hit:>3}/{total:<3}")
    if cov.uncited:
        lines.append(f"uncited ({len(cov.uncited)}): " + " ".join(cov.uncited))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min", type=float, default=DEFAULT_MIN,
                        help="lowest coverage that passes, as a fraction (default %(default)s)")
    parser.add_argument("--spec", type=Path, default=ROOT / "spec", help="folder of spec/*.md")
    parser.add_argument("--tests", type=Path, default=ROOT / "tests", help="folder of tests")
    args = parser.parse_args(argv)
    if not 0.0 <= args.min <= 1.0:
        parser.error("--min must be a fraction between 0 and 1")
    cov = coverage(args.spec, args.tests)
    print(report(cov))
    if not cov.defined:
        print(f"no requirement IDs found under {args.spec}", file=sys.stderr)
        return 1
    if cov.ratio < args.min:
        print(f"coverage {cov.ratio:.1%} is below the minimum {args.min:.1%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
