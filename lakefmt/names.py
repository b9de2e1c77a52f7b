"""Namespace and table names (spec/catalog.md CAT-1, CAT-2).

A name matches ``[A-Za-z_][A-Za-z0-9_]{0,127}`` in full: ``fullmatch``, so a name with a
trailing newline (which ``re.match`` with ``$`` lets through) is refused. The Python API,
the CLI and the service all validate with these functions.

Example:
    >>> parse_identifier("artemis.downlinks")
    ('artemis', 'downlinks')
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lakefmt.errors import InvalidNameError

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # always used with fullmatch (CAT-2)


def parse_identifier(identifier: str | Sequence[str]) -> tuple[str, str]:
    """Split ``"namespace.table"`` (or take a pair of names) and validate both parts (CAT-2).

    Raises:
        InvalidNameError: not a string or a pair of strings, not exactly two parts, or a part
            that does not match CAT-2 in full (a trailing newline included).
    """
    if isinstance(identifier, str):
        parts: list[Any] = identifier.split(".")
    elif isinstance(identifier, (list, tuple)):
        parts = list(identifier)
    else:
        raise InvalidNameError(f"table identifier must be a 'namespace.table' string or a (namespace, table) "
                               f"pair, got {type(identifier).__name__} {identifier!r}")
    if len(parts) != 2:
        raise InvalidNameError(f"table identifier must be 'namespace.table', got {identifier!r}")
    validate_name(parts[0], "namespace")
    validate_name(parts[1], "table")
    return parts[0], parts[1]


def validate_name(name: str, what: str) -> str:
    """Return ``name`` if the whole of it matches CAT-2; raise :class:`InvalidNameError` otherwise."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise InvalidNameError(f"invalid {what} name {name!r}: use letters, digits and '_', "
                               "starting with a letter or '_', at most 128 characters")
    return name
